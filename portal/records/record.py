"""What a job leaves in its directory (`~/jobs/<cluster>/<id>/job.json`) and the states a job can be in.

Each cluster keeps its users' jobs in a directory of its own under ~/jobs (`cluster_jobs_dir`), named by the
`cluster_name` setting: two clusters that share the homes (a site's second cluster, the tests' box beside a user's)
count their job ids apart, and would otherwise write into each other's directories. Jobs of the layout before
that (`~/jobs/<id>/`, `old_jobs_dir`) are still read where the `jobs_old_layout` setting says they are this
cluster's.

job.json is in the user's home: they can write anything there. So it is read as untrusted input: size-capped,
every field of the right type and size, and it must name the directory it is in and the user whose home that is
(`JobRecord.from_json(text, expect=...)`); anything else is a `RecordError` that says what is wrong, which the
dashboard shows as "unreadable record" for that one job.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from portal.errors import JobNotFound, Untrusted
from portal.inputs import finite_json
from portal.records.ids import JOB_ID, home_id_patterns
from portal.records.programs import registry
from portal.records.spec import FIELDS as JOBSPEC_FIELDS
from portal.records.spec import JobSpec, JobSpecError
from portal.records.states import (  # noqa: F401  (the API's words for a job's state, by portal.records.states)
    CANCELLED,
    COMPLETED,
    ENDED_STATES,
    FAILED,
    PENDING,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
)
from portal.records.sweep import SweepPlan, recorded_plan
from portal.renamed import OLD_SCHEDULER_NAME

UNREADABLE = "UNREADABLE"  # the state shown for a job whose record is not one
MAX_RECORD_BYTES = 64 * 1024  # a real job.json is under 1 KiB
MAX_TEXT = 4096  # any one string in a record (a data_dir path is the longest)
MAX_NUMBER = 1_000_000  # any whole number in a spec; the validator's bounds are far lower
EXIT_CODE = re.compile(r"^-?[0-9]{1,3}\Z")

JOBS_ROOT = "jobs"  # under the user's home: one directory per cluster, and the older layout's job directories
RECORD_FILE = "job.json"
OUTPUT_FILE = "output.log"  # the Slurm job's or the local run's stdout and stderr
EXIT_STATUS_FILE = "exit_status"  # written by the script when training ends, with its exit code
FINAL_STATE_FILE = "final_state"  # the ended state once seen, for when Slurm has forgotten the job


@dataclass(frozen=True)
class JobRecord:
    id: str
    scheduler: str  # its scheduler's name (job.json's "backend" before: portal.renamed)
    user: str
    spec: JobSpec
    submitted_at: str  # ISO 8601, UTC
    job_dir: Path
    sweep: SweepPlan | None = None  # a sweep's plan (portal.records.sweep): the job is a job array of its trials

    def check_owner(self, user_name: str) -> None:
        """JobNotFound unless the job is `user_name`'s: every scheduler answers another user's job as one it does
        not know (for its state, its cancel and every read of its output), whatever its files' modes or the
        cluster's permissions would let through, so that no one learns what others run."""
        if self.user != user_name:
            raise JobNotFound(f"job {self.id}: not found among {user_name}'s jobs")

    def to_json(self) -> str:
        sweep = {"sweep": self.sweep.to_dict()} if self.sweep is not None else {}
        return json.dumps({"id": self.id, "scheduler": self.scheduler, OLD_SCHEDULER_NAME: self.scheduler,
                           "user": self.user, "spec": self.spec.to_dict(),
                           "submitted_at": self.submitted_at, "job_dir": str(self.job_dir), **sweep},
                          indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, expect: RecordPlace | None = None) -> JobRecord:
        """The record in `text`; RecordError naming what is wrong. `expect`: where it was read from, which it must
        name (its id, its user, its directory)."""
        data = finite_json(text, MAX_RECORD_BYTES, RecordError)
        if not isinstance(data, dict):
            raise RecordError(f"a JSON {type(data).__name__}, not an object")
        spec = recorded_spec(data.get("spec"))
        record = cls(id=_text(data, "id"), scheduler=_scheduler(data), user=_text(data, "user"),
                     spec=spec, submitted_at=_timestamp(data), job_dir=Path(_text(data, "job_dir")),
                     sweep=_recorded_sweep(data, spec))
        if not JOB_ID.match(record.id):
            raise RecordError(f"id: {record.id[:20]!r} is not a job id")
        if record.scheduler not in home_id_patterns():
            raise RecordError(f"scheduler: {record.scheduler[:20]!r}; allowed: {', '.join(home_id_patterns())}")
        if expect is not None:
            expect.check(record)
        return record

    @property
    def output_path(self) -> Path:
        return self.job_dir / OUTPUT_FILE

    def task_log(self, task: int) -> Path:
        """A sweep's task's output (portal.scheduler.slurm.sbatch.SWEEP_TASK_LOG)."""
        return self.job_dir / f"trial-{int(task)}.log"

    def task_checkpoint_dir(self, task: int) -> Path:
        """A sweep's task's checkpoints (and its model card), as its batch script makes them (programkit.sweep)."""
        return self.job_dir / "trials" / str(int(task)) / "checkpoints"

    @property
    def logdir(self) -> Path:
        return self.job_dir / "tensorboard"

    @property
    def run_prefix(self) -> str:
        """What the names of this job's runs start with in the user's TensorBoard over ~/jobs (chexnet.train names
        a run by its logdir below ~/jobs): "<cluster>/<id>", or "<id>" for a job of the older layout."""
        parent = self.job_dir.parent.name
        return self.id if parent == JOBS_ROOT else f"{parent}/{self.id}"

    @property
    def checkpoint_dir(self) -> Path:
        return self.job_dir / "checkpoints"


def cluster_jobs_dir(home: Path, cluster: str) -> Path:
    """Where a cluster keeps a user's jobs: ~/jobs/<cluster>/ (`cluster` is the checked cluster_name setting)."""
    return home / JOBS_ROOT / cluster


def old_jobs_dir(home: Path) -> Path:
    """Where jobs were kept before each cluster had a directory of its own: ~/jobs/<id>/ (read, never written)."""
    return home / JOBS_ROOT


def exit_code(text: str | None) -> int | None:
    """An exit status a job's script wrote ("0", "1", "-9"): ASCII digits, small; None for anything else."""
    value = (text or "").strip()
    return int(value) if EXIT_CODE.match(value) else None


def now_utc() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


class RecordError(Untrusted, ValueError):
    """A job.json that is not a record of this portal's (the message says what is wrong with it)."""


@dataclass(frozen=True)
class RecordPlace:
    """Where a record was read: ~<user>/jobs/<cluster>/<job_id>/job.json (or the older layout's
    ~<user>/jobs/<job_id>/job.json). The record must say the same."""

    job_id: str
    user: str
    job_dir: Path

    def check(self, record: JobRecord) -> None:
        if record.id != self.job_id:
            raise RecordError(f"id: says {record.id!r}, but the record is in the directory of job {self.job_id}")
        if record.user != self.user:
            raise RecordError(f"user: says {record.user[:32]!r}, but the record is in {self.user}'s home")
        if record.job_dir != self.job_dir:
            raise RecordError(f"job_dir: says {str(record.job_dir)[:80]!r}, but the record is in {self.job_dir}")


def _text(data: dict[str, Any], name: str, limit: int = MAX_TEXT) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise RecordError(f"{name}: {'missing' if value is None else f'a {type(value).__name__}, not a string'}")
    if len(value) > limit or any(ord(ch) < 32 for ch in value):
        raise RecordError(f"{name}: longer than {limit} characters or with control characters")
    return value


def _scheduler(data: dict[str, Any]) -> str:
    """The record's scheduler: "scheduler", or "backend" in a record written before the rename; where it has both,
    they must agree."""
    if "scheduler" not in data:
        return _text(data, OLD_SCHEDULER_NAME)
    named = _text(data, "scheduler")
    if OLD_SCHEDULER_NAME in data and _text(data, OLD_SCHEDULER_NAME) != named:
        raise RecordError(f"scheduler: {named[:20]!r}, but {OLD_SCHEDULER_NAME} (its old name) says "
                          f"{_text(data, OLD_SCHEDULER_NAME)[:20]!r}")
    return named


def _timestamp(data: dict[str, Any]) -> str:
    value = _text(data, "submitted_at", 64)
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise RecordError(f"submitted_at: {value[:32]!r} is not an ISO 8601 time") from None
    return value


def _recorded_sweep(data: dict[str, Any], spec: JobSpec) -> SweepPlan | None:
    if "sweep" not in data:
        return None
    try:
        return recorded_plan(data["sweep"], spec.epochs, spec.template)
    except JobSpecError as err:
        raise RecordError(str(err)) from None


def _recorded_options(raw: dict) -> tuple[tuple[str, Any], ...]:
    """The recorded program's own fields, as it declares them now (a program no longer registered: none); each
    of the declared kind, a choice's text bounded like any other."""
    try:
        program = registry().get(raw.get("template", JobSpec.template))
    except KeyError:
        return ()
    found = []
    for field in program.fields:
        if field.name in JOBSPEC_FIELDS or field.name not in raw:
            continue
        value, kind = raw[field.name], {"bool": bool, "int": int, "choice": str}[field.kind]
        if type(value) is not kind:
            raise RecordError(f"spec.{field.name}: a {type(value).__name__}, not a {kind.__name__}")
        if kind is str:
            _text(raw, field.name)
        found.append((field.name, value))
    return tuple(found)


def recorded_spec(raw: Any) -> JobSpec:
    """The spec as recorded at submit (validated then): here only each field's type and size are checked, since
    the record is shown, never submitted again. Unknown fields (a newer version's) are left out."""
    if not isinstance(raw, dict):
        raise RecordError("spec: missing" if raw is None else f"spec: a {type(raw).__name__}, not an object")
    values: dict[str, Any] = {}
    for spec_field in fields(JobSpec):
        if spec_field.name == "options":
            values["options"] = _recorded_options(raw)
            continue
        if spec_field.name not in raw:
            continue  # an older version's record: the default
        value, kind = raw[spec_field.name], type(getattr(JobSpec(), spec_field.name))
        where = f"spec.{spec_field.name}"
        if type(value) is not kind:  # exact: True is an int to isinstance
            raise RecordError(f"{where}: a {type(value).__name__}, not a {kind.__name__}")
        if kind is int and not 0 <= value <= MAX_NUMBER:
            raise RecordError(f"{where}: {value} is out of range 0-{MAX_NUMBER}")
        if kind is float and not math.isfinite(value):
            raise RecordError(f"{where}: not a finite number")
        if kind is str:
            _text(raw, spec_field.name)
        values[spec_field.name] = value
    return JobSpec(**values)
