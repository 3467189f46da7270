"""GPU usage as every scheduler reports it: each job's GPU-hours this week, per user and in all (`UsageReport`,
what the usage page and the API show). A job's GPU-hours are its GPUs times the part of its run inside the week; a
job still running counts up to now. A scheduler that keeps accounting fills it (Slurm: portal/scheduler/slurm/
usage.py, from `sacct`); one that keeps none says so (NoAccounting). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta


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
    kind: str = "job"  # or "server": a JupyterLab server's

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
    """Sunday 00:00 of the week `now` is in (local time, as sacct prints and takes times): Slurm's week, whose
    weekly reset (PriorityUsageResetPeriod=WEEKLY) clears the usage that holds each user to their weekly GPU-hours
    budget (GrpTRESMins; portal.scheduler.slurm.accounts), so the portal and Slurm count the same week."""
    return (now - timedelta(days=(now.weekday() + 1) % 7)).replace(hour=0, minute=0, second=0, microsecond=0)


def overlap_hours(start: datetime | None, end: datetime | None, since: datetime, now: datetime) -> float:
    if start is None:
        return 0.0
    seconds = (min(end or now, now) - max(start, since)).total_seconds()
    return max(0.0, seconds) / 3600
