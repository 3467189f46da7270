"""The launchers the portal can start a training program with, each one registered thing (the seam for launchers).

A launcher is a declaration module of plain values, which imports nothing (portal/launchers/horovod.py):

    NAME = "torchrun"            # what a program's LAUNCHER names
    TEMPLATES = ""               # the directory of its job scripts, "" for the portal's (portal/records/templates)
    KUBERNETES = "portal.scheduler.kubernetes.torchjob:torchrun_job_objects"  # "module:function" that builds a
                                 # single run's Kubernetes objects ("" where it runs on no Kubernetes; ".kube:f":
                                 # a module of the declaration's own package)
    LAUNCHER_POD = False         # whether a single run on Kubernetes brings a pod of its own beside its nodes'

and its job scripts, `<TEMPLATES>/<NAME>.<kind>` for each scheduler that runs it: `sbatch` (Slurm), `local.sh` (the
local runner), `k8s.sh` and `k8s-worker.sh` (a plain Kubernetes job: the record's pod and the others), `k8s-trial.sh`
(a sweep's trial pod) and `mpijob.sh` (an MPIJob's launcher). Slurm and the local runner run the programs whose
launcher has their kind of script (portal.records.templating.programs_with), Kubernetes those whose launcher names a
builder (where the site runs MPIJobs: has an `mpijob.sh`; its sweeps: a `k8s-trial.sh`). The builder takes (spec,
job_id, user, cfg, partition) and the keywords `plain`, `submitted_at` and `keys`, and returns (the record, [what it
owns]), as portal.scheduler.kubernetes.torchjob.torchrun_job_objects does; no scheduler holds a branch on a
launcher's name.

Registering one is one line: its declaration module in `REGISTERED` below (a test adds one there, and clears
`_registered`'s cache: the registry is loaded once), or a site's own, outside the portal's package, in the setting
`site_launchers`, after these (portal.config_programs; docs/admin-guide.md, "A site's own training program").
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from portal.errors import Misconfigured
from portal.records.site import site_modules

# The one registration of each launcher: its declaration module.
REGISTERED = ("portal.launchers.horovod", "portal.launchers.torchrun")
PORTAL_TEMPLATES = Path(__file__).parent / "templates"  # the portal's job scripts, the shared pieces among them
BUILDER = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", re.ASCII)


class LauncherError(Misconfigured, ValueError):
    """A declaration module that is missing or not as this module's docstring says; names the module."""


@dataclass(frozen=True)
class Launcher:
    """A registered launcher (see the module's docstring)."""

    name: str
    templates: Path
    kubernetes: str
    launcher_pod: bool

    def has(self, kind: str) -> bool:
        """Whether it has a job script of this kind (`sbatch`, `k8s.sh`, ...): whether that scheduler runs it."""
        return (self.templates / f"{self.name}.{kind}").is_file()


def own_package_name(name: str, package: str) -> str:
    """A declaration's module name (MODULE, KUBERNETES's module): one with a leading "." (".train", ".kube:build")
    resolved against the declaration's `package`; any other, or one that climbs above the package's top, as written
    (the caller's check of the name then refuses the latter)."""
    if not name.startswith("."):
        return name
    try:
        return importlib.util.resolve_name(name, package)
    except (ImportError, ValueError):
        return name


def load_launcher(module_name: str) -> Launcher:
    """The launcher that `module_name` declares; LauncherError saying what is wrong with it."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise LauncherError(f"launcher {module_name} cannot be imported: {err}") from None
    values = vars(module)
    name = values.get("NAME")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9]{0,30}", name):
        raise LauncherError(f"launcher {module_name}: NAME is a lower-case word (letters and digits)")
    templates = values.get("TEMPLATES", "")
    kubernetes = values.get("KUBERNETES", "")
    pod = values.get("LAUNCHER_POD", False)
    if not isinstance(templates, (str, Path)) or not isinstance(kubernetes, str) or not isinstance(pod, bool):
        raise LauncherError(f"launcher {module_name}: TEMPLATES and KUBERNETES are strings, LAUNCHER_POD true or false")
    kubernetes = own_package_name(kubernetes, module.__package__ or "")
    if kubernetes and not BUILDER.fullmatch(kubernetes):
        raise LauncherError(f"launcher {module_name}: KUBERNETES is \"module:function\"; got {kubernetes!r}")
    folder = Path(templates) if templates else PORTAL_TEMPLATES
    if not folder.is_absolute():
        folder = Path(module.__file__ or "").parent / folder
    if not any(folder.glob(f"{name}.*")):
        raise LauncherError(f"launcher {module_name}: {folder} holds no job script {name}.*")
    return Launcher(name=name, templates=folder, kubernetes=kubernetes, launcher_pod=pod)


@dataclass(frozen=True)
class Launchers:
    """The registered launchers, by name, in registration order."""

    launchers: tuple[Launcher, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(launcher.name for launcher in self.launchers)

    def get(self, name: str) -> Launcher:
        found = next((launcher for launcher in self.launchers if launcher.name == name), None)
        if found is None:
            raise KeyError(name)
        return found

    def with_launcher_pod(self) -> tuple[str, ...]:
        """The launchers whose single runs on Kubernetes bring a pod of their own (JobLimits.launcher_for)."""
        return tuple(launcher.name for launcher in self.launchers if launcher.launcher_pod)


def launchers_of(modules: Iterable[str]) -> Launchers:
    found = tuple(load_launcher(module) for module in modules)
    names = [launcher.name for launcher in found]
    if not found or len(set(names)) != len(names):
        raise LauncherError(f"the launchers registered must be at least one, each NAME once: {', '.join(names)}")
    return Launchers(found)


@lru_cache(maxsize=1)
def _registered() -> Launchers:
    return launchers_of((*REGISTERED, *site_modules("site_launchers")))


def launchers() -> Launchers:
    """The registered launchers (`REGISTERED`), loaded once."""
    return _registered()
