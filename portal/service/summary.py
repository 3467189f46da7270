"""What the jobs list, a job's page and the API show of one job, and of a user's GPUs against their quota.

Pure: everything comes in as arguments (the job, its state and metrics, the cluster snapshot); the board
(portal.service.board) finds them and caches them.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from portal.jobs import Job, RunMetrics, UnreadableJob
from portal.records.record import RUNNING, UNREADABLE
from portal.renamed import OLD_SCHEDULER_NAME
from portal.scheduler.cluster import QueuedJob, own_jobs_in_words, users_jobs
from portal.scheduler.snapshot import ClusterSnapshot
from portal.tensorboard import panel_url

NO_WAIT = {"reason": "", "held_by": "", "expected_start": ""}


def waiting(line: QueuedJob | None, snapshot: ClusterSnapshot, now: float | None = None,
            whose: str = "your") -> dict[str, str]:
    """What a waiting job (its queue line, Scheduler.waiting) waits for, as far as the portal can tell: the
    reason in words (once), what holds what it asks for, and when Slurm expects it to start.

    `held_by` names the user's own servers and jobs that run now ("your server (job 4)"; `whose` says "alice's"
    to an admin reading of alice's job); with none of theirs,
    "other users' jobs" when others run; nothing for a reason that is not about held resources (a held job, a
    start time not come). `expected_start`: Slurm's estimate (squeue's start time for a pending job), local
    time, when it has one that is still ahead."""
    if line is None:
        return dict(NO_WAIT)
    held_by = ""
    if line.waits_for_resources:  # its scheduler's reader tells (portal.scheduler.cluster.QueuedJob)
        mine = [q for q in users_jobs(snapshot.queue, line.user) if q.state == RUNNING and q.id != line.id]
        held_by = own_jobs_in_words(mine, whose)
        if not held_by and any(q.state == RUNNING and q.user != line.user for q in snapshot.queue.values()):
            held_by = "other users' jobs"
    now = time.time() if now is None else now
    expected = ""
    if line.expected_start > now:
        at = datetime.fromtimestamp(line.expected_start)
        same_day = at.date() == datetime.fromtimestamp(now).date()
        expected = at.strftime("%H:%M" if same_day else "%a %d %b %H:%M")
    return {"reason": line.reason_words, "held_by": held_by, "expected_start": expected}


def job_summary(job: Job, state: str, elapsed: str, metrics: RunMetrics | None, base_url: str = "/",
                service_prefix: str = "/services/portal/", wait: dict[str, str] | None = None) -> dict[str, Any]:
    """What the jobs list and the API show of one job (pure: everything it needs is passed in). `wait`: what a
    pending job waits for (`waiting`)."""
    spec = job.spec
    wait = wait if state == "PENDING" and wait else NO_WAIT
    return {
        "id": job.id, "user": job.record.user, "scheduler": job.record.scheduler,
        OLD_SCHEDULER_NAME: job.record.scheduler, "state": state, **wait,
        "nodes": spec.nodes, "gpus_per_node": spec.gpus_per_node, "elapsed": elapsed,
        "submitted_at": job.submitted_at, "job_dir": job.job_dir, "spec": spec.to_dict(),
        "sweep": job.plan.to_dict() if job.plan is not None else None,
        "images_per_sec": metrics.images_per_sec if metrics else None,
        "best_mean_auroc": metrics.best_mean_auroc if metrics else None,
        "epochs_done": metrics.epochs_done if metrics else 0, "epochs": spec.epochs,
        "series": {"images_per_sec": list(metrics.images_per_sec_series) if metrics else [],
                   "mean_auroc": list(metrics.mean_auroc_series) if metrics else []},
        "epoch_seconds": metrics.epoch_seconds if metrics else None,
        "time_left_s": time_left_s(state, spec.epochs, metrics),
        "metrics_unreadable": metrics.unreadable if metrics else "", "unreadable": "",
        "stale": "",  # an admin's list: what says this row is as last read, its owner's files late (views.py)
        "links": {"page": f"{service_prefix}jobs/{job.id}", "log": f"{service_prefix}jobs/{job.id}/log",
                  "tensorboard": panel_url(job.record.user, job.record.run_prefix, base_url)},
    }


def time_left_s(state: str, epochs: int, metrics: RunMetrics | None) -> float | None:
    """Seconds until a running job's last epoch ends, at its median epoch time so far; None when not running or
    not known yet (fewer than two epochs). The epoch under way counts whole: an estimate, shown as one."""
    if state != RUNNING or metrics is None or metrics.epoch_seconds is None:
        return None
    return max(0, epochs - metrics.epochs_done) * metrics.epoch_seconds


def unreadable_summary(job: UnreadableJob, service_prefix: str = "/services/portal/") -> dict[str, Any]:
    """The list's row and the API's answer for a job whose record is not one: its id, whose home it is in, why."""
    return {"id": job.id, "user": job.owner, "scheduler": "", OLD_SCHEDULER_NAME: "", "state": UNREADABLE, **NO_WAIT,
            "unreadable": f"unreadable record: {job.reason}", "nodes": "-", "gpus_per_node": "-", "elapsed": "",
            "submitted_at": "", "job_dir": job.job_dir, "spec": {}, "sweep": None, "images_per_sec": None,
            "best_mean_auroc": None,
            "epochs_done": 0, "epochs": None, "series": {"images_per_sec": [], "mean_auroc": []},
            "epoch_seconds": None, "time_left_s": None, "metrics_unreadable": "", "stale": "",
            "links": {"page": f"{service_prefix}jobs/{job.id}", "log": "", "tensorboard": ""}}


def quota_of(user: str, gpu_quota: int, snapshot: ClusterSnapshot) -> dict[str, Any]:
    """A user's GPUs held or waited for now against their quota, with the jobs that hold them (servers, portal
    jobs and anything sbatch'ed from a terminal alike), each with its scheduler's reason in words when it waits."""
    holders = [{"job_id": q.id, "name": q.name, "state": q.state, "gpus": q.gpus,
                "reason": q.reason_words}
               for q in users_jobs(snapshot.queue, user) if q.gpus]
    return {"user": user, "gpu_quota": gpu_quota, "gpus_in_use": sum(h["gpus"] for h in holders),
            "holders": holders}


def job_key(job: Job) -> tuple[str, str, str]:
    """What names one job for the caches: Slurm reuses ids when its state is reset (the old job's directory is
    kept, renamed), so an id alone could hand a new job the old one's ended state or metrics."""
    return job.record.user, job.id, job.submitted_at
