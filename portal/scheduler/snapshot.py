"""The cluster as the scheduler last told it (`ClusterSnapshot`), asked at most once per refresh interval for every
request together (`ClusterCache`): a page refresh by every user at once still costs one `squeue`.

Each scheduler reads its own snapshot (portal.scheduler: Slurm's queue, partitions and nodes; Kubernetes's GPU
pools as configured); the cache is the same for all of them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from portal.config import PortalConfig
from portal.errors import SchedulerError

if TYPE_CHECKING:
    from portal.scheduler.cluster import ClusterNode, NodePool, QueuedJob

# While one thread asks Slurm, others get the last answer if it is at most this much past its interval, rather
# than all waiting on the lock for squeue (seconds on a busy controller: every request in flight stalled).
STALE_GRACE_S = 10.0


@dataclass(frozen=True)
class ClusterSnapshot:
    taken_at: float  # time.monotonic()
    queue: dict[str, QueuedJob] = field(default_factory=dict)
    partitions: tuple[NodePool, ...] = ()
    nodes: dict[str, ClusterNode] = field(default_factory=dict)
    asked_at: float = 0.0  # when squeue was started: a job submitted before this is in `queue` unless it has left

    def without(self, job_ids: Collection[str]) -> ClusterSnapshot:
        """The snapshot as if these jobs (cancelled since it was taken) had left the queue."""
        return replace(self, queue={k: v for k, v in self.queue.items() if k not in job_ids})

    def to_dict(self) -> dict:
        return {
            "partitions": [{"name": p.name, "default": p.default, "max_minutes": p.max_minutes,
                            "nodes": [n.name for n in p.nodes]} for p in self.partitions],
            "nodes": [{"name": n.name, "cpus": n.cpus, "memory_mb": n.memory_mb, "gpus": n.gpus,
                       "free_gpus": n.free_gpus, "used_gpus": n.gpus - n.free_gpus if n.usable else 0,
                       "usable": n.usable, "state": n.state, "address": n.address,
                       "partitions": list(n.partitions)} for n in self.nodes.values()],
            "gpus": sum(n.gpus for n in self.nodes.values()),
            "free_gpus": sum(n.free_gpus for n in self.nodes.values()),
            "jobs_pending": sum(1 for j in self.queue.values() if j.state == "PENDING"),
            "jobs_running": sum(1 for j in self.queue.values() if j.state == "RUNNING"),
        }


class Snapshots(Protocol):
    """What the cache asks: a scheduler (portal.scheduler.protocol.Scheduler has both), named here by its shape so that
    the cache stays below the schedulers it serves."""

    queue_in_snapshot: bool  # its jobs are in the snapshot's queue: each refresh is a queue question (squeue)

    def snapshot(self, clock: Callable[[], float] = ...) -> ClusterSnapshot: ...


class ClusterCache:
    """The latest snapshot, refreshed by at most one thread at a time and at most once per interval (`interval_s`,
    default dashboard_refresh_s). `scheduler`: whose snapshot it is (`portal.scheduler.registry.scheduler_for(cfg)`,
    the configured one); `read`: how a snapshot is taken instead, for tests that give the cluster's answer."""

    def __init__(self, cfg: PortalConfig, scheduler: Snapshots | None = None,
                 clock: Callable[[], float] = time.monotonic, read: Callable[[], ClusterSnapshot] | None = None,
                 interval_s: float | None = None):
        self.cfg = cfg
        self.interval_s = float(cfg.dashboard_refresh_s if interval_s is None else interval_s)
        self._clock = clock
        # Slurm's snapshot is one squeue and two scontrol; Kubernetes's GPU pools come from the settings
        self._asks_queue = scheduler.queue_in_snapshot if scheduler is not None else True
        if read is None:
            if scheduler is None:
                raise TypeError("ClusterCache needs the scheduler whose snapshot it caches, or a read")
            read = lambda: scheduler.snapshot(self._clock)  # noqa: E731
        self._read = read
        self._lock = threading.Lock()
        self._snapshot: ClusterSnapshot | None = None
        self._failure: tuple[float, SchedulerError] | None = None  # the last failure, told again for an interval
        # How often the scheduler was asked: the performance checks read these (GET api/cluster shows them).
        self.refreshes = 0

    @property
    def squeue_calls(self) -> int:
        return self.refreshes if self._asks_queue else 0

    @property
    def scontrol_calls(self) -> int:
        return 2 * self.squeue_calls

    def snapshot(self) -> ClusterSnapshot:
        """The cached answer while it is fresh; else ask the scheduler (once, whoever else is waiting).
        SchedulerError when it does not answer: the stale answer is not passed off as the current one, and for an
        interval the same failure is told again at once (every page would otherwise wait on the controller's
        timeout in turn). While another thread asks, the last answer is served if it is at most STALE_GRACE_S past
        its interval."""
        if not self._lock.acquire(blocking=False):
            last = self._snapshot  # not after a failure: that is told again, never hidden behind an old answer
            if last is not None and self._failure is None and \
                    self._clock() - last.taken_at < self.interval_s + STALE_GRACE_S:
                return last
            self._lock.acquire()
        try:
            return self._snapshot_locked()
        finally:
            self._lock.release()

    def _snapshot_locked(self) -> ClusterSnapshot:
        """snapshot() with the lock held."""
        now = self._clock()
        if self._snapshot is not None and now - self._snapshot.taken_at < self.interval_s:
            return self._snapshot
        if self._failure is not None and now - self._failure[0] < self.interval_s:
            raise self._failure[1]
        self.refreshes += 1
        try:
            self._snapshot = self._read()
        except SchedulerError as err:
            self._failure = (self._clock(), err)
            raise
        self._failure = None
        return self._snapshot
