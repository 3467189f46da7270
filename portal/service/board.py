"""The dashboard's view of training jobs: whose they are, what state they are in, what they have reached.

Every call here blocks (Slurm commands, files read as the user): the handlers run them in a thread pool. Jobs are
read through `portal.jobs` acting for the user (`user=`, `groups=` from the hub), so a user reaches only their
own jobs; an admin's request is run as the job's owner. States and elapsed times of queued and running jobs come
from the shared cluster snapshot (one squeue for everyone); only jobs that left the queue ask Slurm themselves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from portal import jobs as jobs_api
from portal.config import PortalConfig
from portal.jobs import Job, JobAccessError, JobNotFound, RunMetrics
from portal.jobs.record import ENDED_STATES
from portal.service.cluster import ClusterCache, ClusterSnapshot
from portal.tensorboard import panel_url


@dataclass(frozen=True)
class HubUser:
    """The logged-in user as the hub knows them (groups from LDAP; admin from the admin groups)."""

    name: str
    groups: tuple[str, ...] = ()
    admin: bool = False
    server_ready: bool = False  # their single-user server runs (TensorBoard lives there)

    @classmethod
    def from_model(cls, model: Mapping[str, Any]) -> HubUser:
        server = (model.get("servers") or {}).get("") or {}
        return cls(name=str(model["name"]), groups=tuple(sorted(model.get("groups") or ())),
                   admin=bool(model.get("admin")), server_ready=bool(server.get("ready")))


class TimedCache:
    """Values kept for a time; a value marked `final` is kept for good (an ended job's metrics never change)."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic):
        self.ttl_s, self._clock = ttl_s, clock
        self._items: dict[Any, tuple[float, bool, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, want_final: bool = False) -> Any | None:
        """The value while fresh (or final); with `want_final`, only a final value (a job that just ended must
        not keep showing what it had reached while it ran)."""
        with self._lock:
            item = self._items.get(key)
        if item is None:
            return None
        stored_at, final, value = item
        if want_final:
            return value if final else None
        return value if final or self._clock() - stored_at < self.ttl_s else None

    def put(self, key: Any, value: Any, final: bool = False) -> Any:
        with self._lock:
            self._items[key] = (self._clock(), final, value)
        return value

    def drop(self, key: Any) -> None:
        with self._lock:
            self._items.pop(key, None)


def job_summary(job: Job, state: str, elapsed: str, metrics: RunMetrics | None, base_url: str = "/",
                service_prefix: str = "/services/portal/") -> dict[str, Any]:
    """What the jobs list and the API show of one job (pure: everything it needs is passed in)."""
    spec = job.spec
    return {
        "id": job.id, "user": job.record.user, "backend": job.backend, "state": state,
        "nodes": spec.nodes, "gpus_per_node": spec.gpus_per_node, "elapsed": elapsed,
        "submitted_at": job.submitted_at, "job_dir": job.job_dir, "spec": spec.to_dict(),
        "images_per_sec": metrics.images_per_sec if metrics else None,
        "best_mean_auroc": metrics.best_mean_auroc if metrics else None,
        "epochs_done": metrics.epochs_done if metrics else 0,
        "links": {"page": f"{service_prefix}jobs/{job.id}", "log": f"{service_prefix}jobs/{job.id}/log",
                  "tensorboard": panel_url(job.record.user, job.id, base_url)},
    }


def job_key(job: Job) -> tuple[str, str, str]:
    """What names one job for the caches: Slurm reuses ids when its state is reset (the old job's directory is
    kept, renamed), so an id alone could hand a new job the old one's ended state or metrics."""
    return job.record.user, job.id, job.submitted_at


class JobBoard:
    def __init__(self, cfg: PortalConfig, cluster: ClusterCache, base_url: str = "/",
                 service_prefix: str = "/services/portal/", api: Any = jobs_api):
        self.cfg, self.cluster, self.api = cfg, cluster, api
        self.base_url, self.service_prefix = base_url, service_prefix
        self._listings = TimedCache(cfg.dashboard_refresh_s)
        self._metrics = TimedCache(cfg.dashboard_metrics_refresh_s)
        self._elapsed: dict[tuple[str, str, str], str] = {}  # last elapsed seen in squeue, for jobs that left it
        self._ended: dict[tuple[str, str, str], str] = {}  # an ended job's state never changes: ask Slurm once

    # --- reading ---

    def _jobs_of(self, user: HubUser) -> list[Job]:
        cached = self._listings.get(user.name)
        if cached is None:
            cached = self._listings.put(user.name, self.api.jobs(user=user.name, groups=user.groups, cfg=self.cfg))
        return cached

    def state_of(self, job: Job, snapshot: ClusterSnapshot) -> tuple[str, str]:
        """(state, elapsed): from the shared squeue answer while the job is queued, else from the job itself."""
        queued = snapshot.queue.get(job.id) if job.backend == "slurm" else None
        key = job_key(job)
        if queued is not None and queued.user == job.record.user:
            self._elapsed[key] = queued.elapsed
            return queued.state, queued.elapsed
        if key not in self._ended:
            state = job.state
            if state not in ENDED_STATES:
                return state, self._elapsed.get(key, "")
            self._ended[key] = state
        return self._ended[key], self._elapsed.get(key, "")

    def metrics_of(self, job: Job, state: str) -> RunMetrics:
        key = job_key(job)
        ended = state in ENDED_STATES
        cached = self._metrics.get(key, want_final=ended)
        if cached is None:
            cached = self._metrics.put(key, job.metrics(), final=ended)
        return cached

    def summary(self, job: Job, snapshot: ClusterSnapshot | None = None) -> dict[str, Any]:
        snapshot = snapshot or self.cluster.snapshot()
        state, elapsed = self.state_of(job, snapshot)
        metrics = self.metrics_of(job, state) if state != "PENDING" else None
        return job_summary(job, state, elapsed, metrics, self.base_url, self.service_prefix)

    def list(self, user: HubUser, everyone: Sequence[HubUser] = ()) -> list[dict[str, Any]]:
        """The user's jobs, newest first; an admin's list has every user in `everyone` too."""
        snapshot = self.cluster.snapshot()
        owners = [user, *(u for u in everyone if u.name != user.name)] if user.admin else [user]
        found: list[Job] = []
        for owner in owners:
            try:
                found.extend(self._jobs_of(owner))
            except JobAccessError:
                continue  # a hub user with no account on this machine has no jobs here
        found.sort(key=lambda job: job.submitted_at, reverse=True)
        return [self.summary(job, snapshot) for job in found]

    def get(self, user: HubUser, job_id: str, everyone: Sequence[HubUser] = ()) -> Job:
        """The job, if it is the user's (or the user is an admin); JobNotFound otherwise, for either reason."""
        try:
            return self.api.get(job_id, user=user.name, groups=user.groups, cfg=self.cfg)
        except JobNotFound:
            if not user.admin:
                raise
        queued = self.cluster.snapshot().queue.get(str(job_id))
        candidates = [u for u in everyone if queued is None or u.name == queued.user]
        for owner in candidates:
            if owner.name == user.name:
                continue
            try:
                return self.api.get(job_id, user=owner.name, groups=owner.groups, cfg=self.cfg)
            except (JobNotFound, JobAccessError):
                continue
        raise JobNotFound(f"job {job_id}: not found")

    def log_tail(self, job: Job, lines: int | None = None) -> str:
        return job.logs(tail=lines or self.cfg.dashboard_log_lines)

    # --- acting ---

    def submit(self, user: HubUser, spec: Mapping[str, Any]) -> dict[str, Any]:
        job = self.api.submit(spec, user=user.name, groups=user.groups, cfg=self.cfg)
        self._listings.drop(user.name)
        return job_summary(job, job.state, "", None, self.base_url, self.service_prefix)

    def cancel(self, user: HubUser, job_id: str, everyone: Sequence[HubUser] = ()) -> Job:
        job = self.get(user, job_id, everyone)
        job.cancel()
        self._listings.drop(job.record.user)
        return job

    def limits(self, user: HubUser):
        return self.api.limits(user=user.name, groups=user.groups, cfg=self.cfg)
