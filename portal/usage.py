"""GPU usage from Slurm accounting: each job's GPU-hours this week, per user and in all, from `sacct`.

Pure: the runs `sacct --json` told (portal.slurm_json) and the clock go in, a `UsageReport` comes out. The dashboard
runs `sacct` (as the user, or as root with `-a` for an admin: Slurm's PrivateData=jobs shows a user only their own
jobs) and renders this. A job's GPU-hours are its GPUs (allocated gres/gpu, all nodes) times the part of its run
inside the week; a job
still running counts up to now. A requeued job's earlier runs are their own rows (`sacct --duplicates`), so the
hours a failed run used are counted too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from portal.slurm import SERVER_JOB_NAME

if TYPE_CHECKING:
    from portal.slurm_json import AccountedRun


@dataclass(frozen=True)
class JobUsage:
    job_id: str
    user: str
    name: str
    state: str
    start: datetime | None  # None: never started
    end: datetime | None  # None: still running
    gpus: int
    nodes: str
    gpu_hours: float  # inside the week

    @property
    def kind(self) -> str:
        return "server" if self.name == SERVER_JOB_NAME else "job"

    def to_dict(self) -> dict:
        return {"job_id": self.job_id, "user": self.user, "name": self.name, "kind": self.kind,
                "state": self.state, "start": self.start.isoformat() if self.start else None,
                "end": self.end.isoformat() if self.end else None, "gpus": self.gpus, "nodes": self.nodes,
                "gpu_hours": round(self.gpu_hours, 3)}


@dataclass(frozen=True)
class UsageReport:
    week_start: datetime
    jobs: tuple[JobUsage, ...] = ()
    per_user: dict[str, float] = field(default_factory=dict)  # GPU-hours this week

    @property
    def gpu_hours(self) -> float:
        return sum(self.per_user.values())

    def to_dict(self) -> dict:
        return {"week_start": self.week_start.isoformat(), "gpu_hours": round(self.gpu_hours, 3),
                "per_user": {user: round(hours, 3) for user, hours in sorted(self.per_user.items())},
                "jobs": [job.to_dict() for job in self.jobs]}


def week_start(now: datetime) -> datetime:
    """Monday 00:00 of the week `now` is in (local time, as sacct prints and takes times)."""
    return (now - timedelta(days=now.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)


def sacct_time(value: str) -> datetime | None:
    """sacct's 2026-11-22T19:15:44; "Unknown", "None" and the like are None."""
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def overlap_hours(start: datetime | None, end: datetime | None, since: datetime, now: datetime) -> float:
    if start is None:
        return 0.0
    seconds = (min(end or now, now) - max(start, since)).total_seconds()
    return max(0.0, seconds) / 3600


def usage_report(runs: Iterable[AccountedRun], now: datetime) -> UsageReport:
    """The runs of `sacct --json -X --duplicates -S <week start>` as a report of this week's GPU-hours."""
    since = week_start(now)
    jobs = [JobUsage(job_id=run.job_id, user=run.user, name=run.name, state=run.state, start=run.start,
                     end=run.end, gpus=run.gpus, nodes=run.nodes,
                     gpu_hours=run.gpus * overlap_hours(run.start, run.end, since, now)) for run in runs]
    per_user: dict[str, float] = {}
    for job in jobs:
        per_user[job.user] = per_user.get(job.user, 0.0) + job.gpu_hours
    ordered = sorted(jobs, key=lambda job: (job.start or job.end or now, job.job_id), reverse=True)
    return UsageReport(week_start=since, jobs=tuple(ordered), per_user=per_user)
