"""What the jobs list, a job's page and the API show of one job, and of a user's GPUs against their quota.

Pure: everything comes in as arguments (the job, its state and metrics, the cluster snapshot); the board
(portal.service.board) finds them and caches them.
"""

from __future__ import annotations

from typing import Any

from portal.jobs import Job, RunMetrics, UnreadableJob
from portal.jobs.record import RUNNING, UNREADABLE
from portal.scheduler.snapshot import ClusterSnapshot
from portal.slurm import pending_reason
from portal.slurm_json import users_jobs
from portal.tensorboard import panel_url


def job_summary(job: Job, state: str, elapsed: str, metrics: RunMetrics | None, base_url: str = "/",
                service_prefix: str = "/services/portal/", reason: str = "") -> dict[str, Any]:
    """What the jobs list and the API show of one job (pure: everything it needs is passed in). `reason`: why a
    pending job waits, in Slurm's word and ours."""
    spec = job.spec
    return {
        "id": job.id, "user": job.record.user, "backend": job.backend, "state": state,
        "reason": pending_reason(reason) if state == "PENDING" and reason else "",
        "nodes": spec.nodes, "gpus_per_node": spec.gpus_per_node, "elapsed": elapsed,
        "submitted_at": job.submitted_at, "job_dir": job.job_dir, "spec": spec.to_dict(),
        "images_per_sec": metrics.images_per_sec if metrics else None,
        "best_mean_auroc": metrics.best_mean_auroc if metrics else None,
        "epochs_done": metrics.epochs_done if metrics else 0, "epochs": spec.epochs,
        "series": {"images_per_sec": list(metrics.images_per_sec_series) if metrics else [],
                   "mean_auroc": list(metrics.mean_auroc_series) if metrics else []},
        "epoch_seconds": metrics.epoch_seconds if metrics else None,
        "time_left_s": time_left_s(state, spec.epochs, metrics),
        "metrics_unreadable": metrics.unreadable if metrics else "", "unreadable": "",
        "links": {"page": f"{service_prefix}jobs/{job.id}", "log": f"{service_prefix}jobs/{job.id}/log",
                  "tensorboard": panel_url(job.record.user, job.id, base_url)},
    }


def time_left_s(state: str, epochs: int, metrics: RunMetrics | None) -> float | None:
    """Seconds until a running job's last epoch ends, at its median epoch time so far; None when not running or
    not known yet (fewer than two epochs). The epoch under way counts whole: an estimate, shown as one."""
    if state != RUNNING or metrics is None or metrics.epoch_seconds is None:
        return None
    return max(0, epochs - metrics.epochs_done) * metrics.epoch_seconds


def unreadable_summary(job: UnreadableJob, service_prefix: str = "/services/portal/") -> dict[str, Any]:
    """The list's row and the API's answer for a job whose record is not one: its id, whose home it is in, why."""
    return {"id": job.id, "user": job.owner, "backend": "", "state": UNREADABLE, "reason": "",
            "unreadable": f"unreadable record: {job.reason}", "nodes": "-", "gpus_per_node": "-", "elapsed": "",
            "submitted_at": "", "job_dir": job.job_dir, "spec": {}, "images_per_sec": None, "best_mean_auroc": None,
            "epochs_done": 0, "epochs": None, "series": {"images_per_sec": [], "mean_auroc": []},
            "epoch_seconds": None, "time_left_s": None, "metrics_unreadable": "",
            "links": {"page": f"{service_prefix}jobs/{job.id}", "log": "", "tensorboard": ""}}


def quota_of(user: str, gpu_quota: int, snapshot: ClusterSnapshot) -> dict[str, Any]:
    """A user's GPUs held or waited for now against their quota, with the jobs that hold them (servers, portal
    jobs and anything sbatch'ed from a terminal alike), each with Slurm's reason in words when it waits."""
    holders = [{"job_id": q.id, "name": q.name, "state": q.state, "gpus": q.gpus,
                "reason": pending_reason(q.reason) if q.state == "PENDING" else ""}
               for q in users_jobs(snapshot.queue, user) if q.gpus]
    return {"user": user, "gpu_quota": gpu_quota, "gpus_in_use": sum(h["gpus"] for h in holders),
            "holders": holders}


def job_key(job: Job) -> tuple[str, str, str]:
    """What names one job for the caches: Slurm reuses ids when its state is reset (the old job's directory is
    kept, renamed), so an id alone could hand a new job the old one's ended state or metrics."""
    return job.record.user, job.id, job.submitted_at
