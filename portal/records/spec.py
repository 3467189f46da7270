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

from chexnet.reference import MODELS  # the models the trainer builds, defined once (TensorFlow-free)
from portal import inputs
from portal.inputs import InputError, format_minutes, minutes_of
from portal.quota import GpuQuota

TEMPLATES = ("chexnet",)
WHOLE = "spec"  # what an error about the request as a whole names (not a mapping, a key that is no field name)
__all__ = ["FIELDS", "MODELS", "TEMPLATES", "JobLimits", "JobSpec", "JobSpecError", "format_minutes", "minutes_of",
           "parse_job_spec"]

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
        return asdict(self)


FIELDS = tuple(f.name for f in fields(JobSpec))
BOOLEAN_FIELDS = tuple(f.name for f in fields(JobSpec) if f.type in (bool, "bool"))  # switches: fp16, xla, mail


@dataclass(frozen=True)
class JobLimits:
    """What one user may ask for on one backend now: the partition's shape and the user's GPU quota."""

    partition: str  # "" on the local backend
    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    memory_gb_per_node: int
    max_minutes: int | None  # None: no wall-time limit
    quota: GpuQuota  # the user's (all nodes together), with what their server and jobs hold of it now
    default_data_dir: str
    unusable_note: str = ""  # "; not usable now: node2 (idle+drain)": why `nodes` is fewer than the partition's
    jobs_queued: int = 0  # the user's jobs queued or running now, servers included
    max_jobs: int | None = None  # the most of those at once (max_jobs_per_user); None: no limit
    mail: bool = False  # e-mail at a job's end is offered (Slurm, with job_mail)

    @property
    def max_gpus_per_node(self) -> int:
        return max(0, min(self.gpus_per_node, self.quota.left))

    # What notebooks read (`jobs.limits()`; a user's copy of a template keeps its code): the quota's figures.
    @property
    def gpu_quota(self) -> int:
        return self.quota.limit

    @property
    def gpus_in_use(self) -> int:
        return self.quota.in_use

    @property
    def gpus_left(self) -> int:
        return self.quota.left

    def where(self) -> str:
        return f"in partition {self.partition}" if self.partition else "on this machine"


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


def _mail(raw: Mapping[str, Any], limits: JobLimits) -> bool:
    if "mail" not in raw:
        return limits.mail
    wanted = inputs.boolean(raw["mail"], "mail")
    if wanted and not limits.mail:
        raise JobSpecError("mail", "e-mail at a job's end is not offered here (only on Slurm, where the site has "
                                   "job_mail); allowed: false")
    return wanted


@inputs.refused_as(JobSpecError)
def parse_job_spec(raw: Mapping[str, Any], limits: JobLimits,
                   user_can_read: Callable[[str], bool] = lambda path: os.path.isdir(path) and os.access(
                       path, os.R_OK | os.X_OK)) -> JobSpec:
    """Validate a notebook's dict, API JSON or command-line flags against what the user may ask for.

    `user_can_read(path)` says whether the user who will run the job can list the directory; the default asks
    for the calling process, which is right when the user calls (a notebook), wrong when root acts for them.
    """
    raw = inputs.fields_of(raw, FIELDS, WHOLE)
    if limits.max_jobs is not None and limits.jobs_queued >= limits.max_jobs:
        raise JobSpecError(WHOLE, f"you have {limits.jobs_queued} jobs queued or running (your server included); "
                                  f"allowed: at most {limits.max_jobs} at once: cancel one or wait for one to end")
    template = inputs.choice(raw["template"], "template", TEMPLATES) if "template" in raw else JobSpec.template

    nodes_note = f" (usable nodes {limits.where()}{limits.unusable_note})"
    nodes = _integer(raw, "nodes", 1, limits.nodes, nodes_note) if "nodes" in raw else 1
    most_gpus = min(limits.gpus_per_node, limits.quota.left // nodes)
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
        cpus_per_task = max(1, min(DEFAULT_CPUS_PER_TASK, most_cpus))
    memory_note = f" (GB per node {limits.where()})"
    if "memory_gb" in raw:
        memory_gb = _integer(raw, "memory_gb", 1, limits.memory_gb_per_node, memory_note)
    else:
        memory_gb = max(1, min(DEFAULT_MEMORY_GB, limits.memory_gb_per_node))
    if "time_limit" in raw:
        time_limit = inputs.wall_time(raw["time_limit"], "time_limit", limits.max_minutes, f" ({limits.where()})")
    elif limits.max_minutes is not None and minutes_of(DEFAULT_TIME_LIMIT) > limits.max_minutes:
        time_limit = format_minutes(limits.max_minutes)
    else:
        time_limit = DEFAULT_TIME_LIMIT

    defaults = JobSpec()
    return JobSpec(
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
        model=inputs.choice(raw["model"], "model", MODELS) if "model" in raw else defaults.model,
        fp16=inputs.boolean(raw["fp16"], "fp16") if "fp16" in raw else defaults.fp16,
        xla=inputs.boolean(raw["xla"], "xla") if "xla" in raw else defaults.xla,
        mail=_mail(raw, limits),
        data_dir=_data_dir(raw, limits, user_can_read),
    )
