"""The job scripts: one template per launcher and scheduler (`portal/records/templates/<launcher>.sbatch`,
`<launcher>.local.sh`, `<launcher>.k8s.sh`, ...), filled from a validated spec, like Open OnDemand's submit
templates. The training program's own fragment (`<program>/<ARGS_TEMPLATE>`, from its package: the bash array
`train_args`) is included from there (portal.records.programs). Plain text, so no HTML escaping; two filters
quote what reaches the script."""

from __future__ import annotations

import shlex
from functools import lru_cache
from typing import TYPE_CHECKING

import jinja2

from portal.mlflow_accounts import tracking_uri
from portal.records.launchers import PORTAL_TEMPLATES, Launchers, launchers
from portal.records.programs import Program, Registry, registry

if TYPE_CHECKING:
    from portal.config import PortalConfig
    from portal.records.spec import JobSpec

# What mpirun passes on to the workers it starts on other hosts (-x), besides job_environment's names.
MPI_EXPORTED = ("PATH", "LD_LIBRARY_PATH", "PYTHONUNBUFFERED", "TF_CPP_MIN_LOG_LEVEL")
# Where rank 0 reads the job's MLflow account (programkit.tracking; portal.mlflow_accounts.JOB_FILE's path), and, in a
# sweep's task, the task's index (its run is "<job>:<task>").
TRACKING_FILE_VARIABLE, TASK_VARIABLE = "DSPORTAL_MLFLOW_FILE", "DSPORTAL_TASK"


def sbatch_value(value: object) -> str:
    """A value for an #SBATCH line. sbatch parses those lines itself (double quotes only, no shell), so only
    values that need no quoting at all are written; the validated spec and config never produce others."""
    text = str(value)
    if not text or shlex.quote(text) != text:
        raise ValueError(f"{text!r} cannot be written on an #SBATCH line (it would need quoting)")
    return text


def template_environment() -> jinja2.Environment:
    """The launchers' templates (the portal's, then each registered launcher's own folder), and each registered
    program's under its name (`chexnet/args.sh`)."""
    return _environment(registry(), launchers())


@lru_cache(maxsize=4)
def _environment(programs: Registry, registered: Launchers) -> jinja2.Environment:
    # StrictUndefined: a template that names a value the renderer did not pass fails, never renders blank.
    folders = dict.fromkeys([PORTAL_TEMPLATES, *(launcher.templates for launcher in registered.launchers)])
    loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(list(folders)), jinja2.PrefixLoader(
        {p.name: jinja2.FileSystemLoader(p.templates) for p in programs.programs}, delimiter="/")])
    env = jinja2.Environment(loader=loader, autoescape=False, undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["sbatch"] = sbatch_value
    return env


def programs_with(suffix: str) -> tuple[str, ...]:
    """The registered programs whose launcher has a job script of this kind (`sbatch`, `local.sh`, `k8s.sh`, ...):
    those a scheduler can run (JobLimits.programs)."""
    registered = launchers()
    return tuple(p.name for p in registry().programs if registered.get(p.launcher).has(suffix))


def programs_on_kubernetes(mpijob: bool) -> tuple[str, ...]:
    """The registered programs Kubernetes runs: those whose launcher builds its objects (its KUBERNETES), or where
    the site runs MPIJobs, those whose launcher has an MPIJob's script (`mpijob.sh`)."""
    if mpijob:
        return programs_with("mpijob.sh")
    registered = launchers()
    return tuple(p.name for p in registry().programs if registered.get(p.launcher).kubernetes)


def program_of(spec: JobSpec) -> Program:
    """The registered program a validated spec runs (KeyError for a name no longer registered)."""
    return registry().get(spec.template)


def launch_template(spec: JobSpec, suffix: str) -> jinja2.Template:
    """The job script of `spec`'s program's launcher for one scheduler: `suffix` is "sbatch", "local.sh", ..."""
    return template_environment().get_template(f"{program_of(spec).launcher}.{suffix}")


def program_values(spec: JobSpec, cfg: PortalConfig) -> dict[str, object]:
    """What every launcher template gets of the program: the program itself, the interpreter and bin directory
    of its environment, and its options (its own fields' values) for its fragment."""
    program = program_of(spec)
    return {"program": program, "python": program.python(cfg.venv), "program_bin": program.bin_dir(cfg.venv),
            "options": dict(spec.options)}


def job_environment(cfg: PortalConfig, home: str, tracking_file: str = "") -> list[tuple[str, str]]:
    """What every job script exports before it starts the workers, as (NAME, a shell word for its value): the NCCL
    settings that are set, where rank 0 finds the job's MLflow account (`tracking_file`, a shell word; with
    mlflow_url set: docs/mlflow.md), the site's programs' directory (PYTHONPATH, where site_python_path is set), then
    the site's jobs_environment, {home} in it written as `home` (a shell word: "$HOME" in a Slurm or local job, the
    home volume's mount path in a pod)."""
    nccl = {"NCCL_DEBUG": cfg.jobs_nccl_debug, "NCCL_SOCKET_IFNAME": cfg.jobs_nccl_socket_ifname,
            "NCCL_IB_DISABLE": cfg.jobs_nccl_ib_disable}
    found = [(name, shlex.quote(value)) for name, value in nccl.items() if value]
    if tracking_file and tracking_uri(cfg):
        found.append((TRACKING_FILE_VARIABLE, tracking_file))
    if cfg.site_python_path:  # the site's own programs' packages (portal.config_programs)
        found.append(("PYTHONPATH", shlex.quote(cfg.site_python_path)))
    for item in cfg.jobs_environment:
        name, _, value = item.partition("=")
        found.append((name, home.join(shlex.quote(part) if part else "" for part in value.split("{home}")) or "''"))
    return found


def exported(environment: list[tuple[str, str]]) -> tuple[str, ...]:
    """The names mpirun passes on (-x): MPI_EXPORTED and job_environment's."""
    return (*MPI_EXPORTED, *(name for name, _ in environment))
