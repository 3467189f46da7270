"""Slurm's accounting as GPU usage: the runs `sacct --json` told (portal.scheduler.slurm.json_answers) and the clock
go in, a `UsageReport` (portal.scheduler.usage) comes out. The dashboard runs `sacct` (as the user, or as root with
`-a` for an admin: Slurm's PrivateData=jobs shows a user only their own jobs) and renders this. A job's GPUs are
its allocated gres/gpu, all nodes. A requeued job's earlier runs are their own rows (`sacct --duplicates`), so the
hours a failed run used are counted too. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from portal.scheduler.slurm.answers import SERVER_JOB_NAME
from portal.scheduler.usage import JobUsage, UsageReport, overlap_hours, week_start

if TYPE_CHECKING:
    from portal.scheduler.slurm.json_answers import AccountedRun


def sacct_time(value: str) -> datetime | None:
    """sacct's 2026-11-22T19:15:44; "Unknown", "None" and the like are None."""
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def usage_report(runs: Iterable[AccountedRun], now: datetime) -> UsageReport:
    """The runs of `sacct --json -X --duplicates -S <week start>` as a report of this week's GPU-hours."""
    since = week_start(now)
    jobs = [JobUsage(job_id=run.job_id, user=run.user, name=run.name, state=run.state, start=run.start,
                     end=run.end, gpus=run.gpus, nodes=run.nodes,
                     kind="server" if run.name == SERVER_JOB_NAME else "job",
                     gpu_hours=run.gpus * overlap_hours(run.start, run.end, since, now)) for run in runs]
    per_user: dict[str, float] = {}
    for job in jobs:
        per_user[job.user] = per_user.get(job.user, 0.0) + job.gpu_hours
    ordered = sorted(jobs, key=lambda job: (job.start or job.end or now, job.job_id), reverse=True)
    return UsageReport(week_start=since, jobs=tuple(ordered), per_user=per_user)
