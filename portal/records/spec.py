"""A training job request: `JobSpec`, and the one validator every caller goes through.

Pure: what the user sent and what the cluster allows (`JobLimits`, built from Slurm's facts or this machine's)
go in, a validated `JobSpec` (or a `JobSpecError` naming the field and what is allowed) comes out. The only
outside fact, whether the user can read `data_dir`, is asked through a function the caller passes, so the rules are
unit-tested without Slurm or other users. The notebook API, the command line and the dashboard all parse here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from portal import inputs
from portal.inputs import InputError, format_minutes, minutes_of
from portal.records.limits import PLACED, JobLimits
from portal.records.programs import LEGACY_OPTIONS, Program, ProgramField, registry

WHOLE = "spec"  # what an error about the request as a whole names (not a mapping, a key that is no field name)
__all__ = ["FIELDS", "JobSpec", "JobSpecError", "format_minutes", "input_fields", "minutes_of",
           "parse_job_spec"]
OptionValue = str | int | bool

# Bounds that do not depend on the cluster: wide enough for real training, narrow enough to catch typos.
MAX_EPOCHS = 1000
MAX_BATCH_SIZE = 1024  # per GPU (per worker)
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 32, 1024

# What a job gets when it does not say, each lowered to what the partition and the quota allow.
DEFAULT_GPUS_PER_NODE = 1
DEFAULT_CPUS_PER_TASK = 4
DEFAULT_MEMORY_GB = 16
DEFAULT_TIME_LIMIT = "04:00:00"


class JobSpecError(InputError):
    """A job field is not allowed. `field` names it; the message says what is allowed."""


@dataclass(frozen=True)
class JobSpec:
    """A validated request for one training job (build it with `parse_job_spec`, not directly)."""

    template: str = "chexnet"
    nodes: int = 1
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    cpus_per_task: int = DEFAULT_CPUS_PER_TASK  # per Horovod worker
    memory_gb: int = DEFAULT_MEMORY_GB  # per node
    time_limit: str = DEFAULT_TIME_LIMIT  # HH:MM:SS
    epochs: int = 5
    batch_size: int = 16  # per GPU (per worker)
    image_size: int = 224
    model: str = "densenet121"
    fp16: bool = False
    xla: bool = False
    mail: bool = False  # e-mail at the job's end (Slurm's --mail-type=END,FAIL); parse_job_spec's default: the user's
    data_dir: str = ""  # empty only before parsing: parse_job_spec puts the configured default here
    # The program's own fields (portal.records.programs) beyond those above, as (name, value) in its order.
    options: tuple[tuple[str, OptionValue], ...] = ()

    @property
    def workers_per_node(self) -> int:
        """One Horovod worker per GPU; a CPU-only job still needs one."""
        return max(1, self.gpus_per_node)

    @property
    def workers(self) -> int:
        return self.nodes * self.workers_per_node

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        """Flat, as the API takes it: the program's own fields beside the others (chexnet's fp16 and xla only for
        a program that has them)."""
        values = asdict(self)
        del values["options"]
        try:
            program = registry().get(self.template)
            for name in LEGACY_OPTIONS:
                if program.field(name) is None:
                    del values[name]
        except KeyError:  # a record of a program no longer registered: shown as it was
            pass
        return {**values, **dict(self.options)}

    def option(self, name: str) -> OptionValue | None:
        return dict(self.options).get(name)


FIELDS = tuple(f.name for f in fields(JobSpec) if f.name != "options")  # every program's (and chexnet's fp16, xla)
BOOLEAN_FIELDS = tuple(f.name for f in fields(JobSpec) if f.type in (bool, "bool"))  # switches: fp16, xla, mail


def input_fields() -> tuple[str, ...]:
    """What a request may name: JobSpec's fields and every registered program's own."""
    return (*FIELDS, *registry().option_names())


def boolean_fields() -> tuple[str, ...]:
    """The switches among input_fields(): JobSpec's and the programs' own."""
    own = (f.name for p in registry().programs for f in p.fields if f.kind == "bool")
    return tuple(dict.fromkeys((*BOOLEAN_FIELDS, *own)))




def _integer(raw: Mapping[str, Any], name: str, low: int, high: int, why: str = "") -> int:
    return inputs.whole_number(raw[name], name, low, high, why)


def _data_dir(raw: Mapping[str, Any], limits: JobLimits, user_can_read: Callable[[str], bool]) -> str:
    value = raw["data_dir"] if "data_dir" in raw else limits.default_data_dir
    allowed = f"allowed: an absolute path of a directory you can read, at most {inputs.MAX_PATH} characters"
    path = inputs.absolute_path(value, "data_dir", allowed)
    if not user_can_read(path):
        raise JobSpecError("data_dir", f"{inputs.shown(path)} does not exist or you cannot read it; {allowed}")
    return path


def _gpus_per_node(raw: Mapping[str, Any], limits: JobLimits, nodes: int, most: int) -> int:
    """GPUs per node within what a node has and what is left of the quota, counting what the user holds now."""
    if most >= limits.gpus_per_node:
        return _integer(raw, "gpus_per_node", 0, most, f" (GPUs per node {limits.where()})")
    if not limits.quota.in_use:
        return _integer(raw, "gpus_per_node", 0, most, limits.quota.note(" for all nodes together"))
    value = _integer(raw, "gpus_per_node", 0, limits.gpus_per_node, f" (GPUs per node {limits.where()})")
    if value > most:
        per_node = f" per node on {nodes} nodes" if nodes > 1 else ""
        raise JobSpecError("gpus_per_node", f"{limits.quota.held()} ({limits.quota.holders_text()}); ask for at "
                                            f"most {most}{per_node}")
    return value


def _fitting(limits: JobLimits, others: Mapping[str, int], no_launcher: bool, field: str, most: int) -> int:
    """A field's default: the most (up to `most`) with which a run of `others` fits the nodes, the launcher
    counted; `most` when none does (the check after says why)."""
    for value in range(most, 0, -1):
        if limits.refusal({**others, field: value}, no_launcher=no_launcher) is None:
            return value
    return most


def _mail(raw: Mapping[str, Any], limits: JobLimits) -> bool:
    if "mail" not in raw:
        return limits.mail
    wanted = inputs.boolean(raw["mail"], "mail")
    if wanted and not limits.mail:
        raise JobSpecError("mail", "e-mail at a job's end is not offered here (only on Slurm, where the site has "
                                   "job_mail); allowed: false")
    return wanted


def _program_value(raw: Mapping[str, Any], field: ProgramField, program: Program) -> OptionValue:
    if field.name not in raw:
        return field.default
    value = raw[field.name]
    if field.kind == "bool":
        return inputs.boolean(value, field.name)
    if field.kind == "int":
        return inputs.whole_number(value, field.name, field.low, field.high, f" ({field.label} of {program.name})")
    return inputs.choice(value, field.name, field.choices, f"offered by {program.name}")


def _program_fields(raw: Mapping[str, Any], program: Program) -> dict[str, OptionValue]:
    """The program's own fields (model among them), each checked as it declares; a field of another program is
    refused, naming the program's own fields."""
    for name in (*registry().option_names(), *LEGACY_OPTIONS):
        if name in raw and program.field(name) is None:
            own = ", ".join(f.name for f in program.fields) or "none"
            raise JobSpecError(name, f"is not a field of the program {program.name}; its own fields: {own}")
    return {f.name: _program_value(raw, f, program) for f in program.fields}


@inputs.refused_as(JobSpecError)
def parse_job_spec(raw: Mapping[str, Any], limits: JobLimits,
                   user_can_read: Callable[[str], bool] = lambda path: os.path.isdir(path) and os.access(
                       path, os.R_OK | os.X_OK), sweep: bool = False) -> JobSpec:
    """Validate a notebook's dict, API JSON or command-line flags against what the user may ask for.

    `user_can_read(path)` says whether the user who will run the job can list the directory; the default asks
    for the calling process, which is right when the user calls (a notebook), wrong when root acts for them.
    A job that the cluster's nodes could never hold (its launcher counted) is refused with the arithmetic
    (portal.records.fit); the defaults are lowered until the job fits. `sweep`: the spec is a sweep's trial's,
    which brings no launcher (its trials at once are checked by portal.records.sweep.parse_sweep).
    """
    raw = inputs.fields_of(raw, input_fields(), WHOLE)
    if limits.max_jobs is not None and limits.jobs_queued >= limits.max_jobs:
        raise JobSpecError(WHOLE, f"you have {limits.jobs_queued} jobs queued or running (your server included); "
                                  f"allowed: at most {limits.max_jobs} at once: cancel one or wait for one to end")
    programs = registry()
    template = inputs.choice(raw["template"], "template", programs.names, "a training program here") \
        if "template" in raw else programs.default.name
    program = programs.get(template)
    if limits.programs and template not in limits.programs:
        raise JobSpecError("template", f"{template} cannot run {limits.where()}: its launcher ({program.launcher}) has "
                                       f"no job script for this scheduler yet; allowed: {', '.join(limits.programs)}")
    own = _program_fields(raw, program)
    no_launcher = sweep or not limits.adds_launcher(program.launcher)

    if limits.nodes < 1:  # every node of the jobs' pool drained or down: nothing a job asks for can run
        raise JobSpecError("nodes", f"no node {limits.where()} can run a job now{limits.unusable_note}")
    nodes_note = f" (usable nodes {limits.where()}{limits.unusable_note})"
    nodes = _integer(raw, "nodes", 1, limits.nodes, nodes_note) if "nodes" in raw else 1
    most_gpus = limits.quota.cap(limits.gpus_per_node, nodes)
    if "gpus_per_node" in raw:
        gpus_per_node = _gpus_per_node(raw, limits, nodes, most_gpus)
    else:  # one GPU when the user may have one, like the spawn form
        gpus_per_node = max(0, min(DEFAULT_GPUS_PER_NODE, most_gpus))
    workers = max(1, gpus_per_node)

    most_cpus = limits.cpus_per_node // workers
    cpu_note = f" ({limits.cpus_per_node} CPUs per node {limits.where()}, shared by {workers} worker(s))"
    if "cpus_per_task" in raw:
        cpus_per_task = _integer(raw, "cpus_per_task", 1, most_cpus, cpu_note)
    else:
        cpus_per_task = _fitting(limits, {"nodes": nodes, "gpus_per_node": gpus_per_node, "memory_gb": 1}, no_launcher,
                                 "cpus_per_task", max(1, min(DEFAULT_CPUS_PER_TASK, most_cpus)))
    memory_note = f" (GB per node {limits.where()})"
    if "memory_gb" in raw:
        memory_gb = _integer(raw, "memory_gb", 1, limits.memory_gb_per_node, memory_note)
    else:
        memory_gb = _fitting(limits, {"nodes": nodes, "gpus_per_node": gpus_per_node, "cpus_per_task": cpus_per_task},
                             no_launcher, "memory_gb", max(1, min(DEFAULT_MEMORY_GB, limits.memory_gb_per_node)))
    if "time_limit" in raw:
        time_limit = inputs.wall_time(raw["time_limit"], "time_limit", limits.max_minutes, f" ({limits.where()})")
    elif limits.max_minutes is not None and minutes_of(DEFAULT_TIME_LIMIT) > limits.max_minutes:
        time_limit = format_minutes(limits.max_minutes)
    else:
        time_limit = DEFAULT_TIME_LIMIT

    defaults = JobSpec()
    spec = JobSpec(
        template=template,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        cpus_per_task=cpus_per_task,
        memory_gb=memory_gb,
        time_limit=time_limit,
        epochs=_integer(raw, "epochs", 1, MAX_EPOCHS) if "epochs" in raw else defaults.epochs,
        batch_size=_integer(raw, "batch_size", 1, MAX_BATCH_SIZE, " (images per GPU per step)")
        if "batch_size" in raw else defaults.batch_size,
        image_size=_integer(raw, "image_size", MIN_IMAGE_SIZE, MAX_IMAGE_SIZE, " (pixels, square)")
        if "image_size" in raw else defaults.image_size,
        model=str(own.pop("model")),
        fp16=bool(own.pop("fp16", False)),
        xla=bool(own.pop("xla", False)),
        mail=_mail(raw, limits),
        data_dir=_data_dir(raw, limits, user_can_read),
        options=tuple(own.items()),
    )
    found = limits.refusal({name: getattr(spec, name) for name in PLACED}, no_launcher=no_launcher)
    if found is not None:  # every field is allowed alone; together, the nodes could never hold the job
        raise JobSpecError(*found)
    return spec
