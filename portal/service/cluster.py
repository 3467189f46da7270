"""Slurm's view of the cluster, asked at most once per refresh interval for every request together.

`ClusterCache` runs `squeue --json` (read by portal.slurm_json) and `scontrol` (read-only, as the service's own
user) and keeps their answer for `dashboard_refresh_s`. A page refresh by every user at once still costs one squeue.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from portal.config import PortalConfig
from portal.jobs import SlurmError
from portal.slurm import SlurmNode, SlurmPartition, nodes_from_scontrol, slurm_partitions
from portal.slurm_json import SQUEUE_JSON, QueuedJob, SlurmAnswerError, read_squeue

SLURM_TIMEOUT_S = 20
# While one thread asks Slurm, others get the last answer if it is at most this much past its interval, rather
# than all waiting on the lock for squeue (seconds on a busy controller: every request in flight stalled).
STALE_GRACE_S = 10.0


@dataclass(frozen=True)
class ClusterSnapshot:
    taken_at: float  # time.monotonic()
    queue: dict[str, QueuedJob] = field(default_factory=dict)
    partitions: tuple[SlurmPartition, ...] = ()
    nodes: dict[str, SlurmNode] = field(default_factory=dict)
    asked_at: float = 0.0  # when squeue was started: a job submitted before this is in `queue` unless it has left

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


Runner = Callable[[Sequence[str]], str]


class ClusterCache:
    """The latest snapshot, refreshed by at most one thread at a time and at most once per interval."""

    def __init__(self, cfg: PortalConfig, run: Runner | None = None, clock: Callable[[], float] = time.monotonic):
        self.cfg = cfg
        self.interval_s = float(cfg.dashboard_refresh_s)
        self._run = run or self._slurm
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: ClusterSnapshot | None = None
        self._failure: tuple[float, SlurmError] | None = None  # Slurm's last failure, told again for an interval
        # How often Slurm was asked: the performance checks read these (GET api/cluster shows them).
        self.squeue_calls = 0
        self.scontrol_calls = 0

    def _slurm(self, argv: Sequence[str]) -> str:
        command = [str(self.cfg.slurm_bin_dir / argv[0]), *argv[1:]]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S,
                                    env={"SLURM_CONF": str(self.cfg.slurm_conf_path), "PATH": "/usr/bin:/bin"})
        except subprocess.TimeoutExpired:
            raise SlurmError(f"Slurm did not answer `{' '.join(argv)}` in {SLURM_TIMEOUT_S} s") from None
        except OSError as err:
            raise SlurmError(f"cannot run {command[0]}: {err.strerror}") from None
        if result.returncode != 0:
            raise SlurmError(f"`{' '.join(argv)}` failed: {result.stderr.strip()[:300]}")
        return result.stdout

    def snapshot(self) -> ClusterSnapshot:
        """The cached answer while it is fresh; else ask Slurm (once, whoever else is waiting). SlurmError when
        Slurm does not answer: the stale answer is not passed off as the current one, and for an interval the same
        failure is told again at once (every page would otherwise wait on the controller's timeout in turn).
        While another thread asks, the last answer is served if it is at most STALE_GRACE_S past its interval."""
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
        if self.cfg.spawner_backend == "kubernetes":
            # No Slurm: the GPU pools as configured (the hub does not list nodes); each job's state comes
            # from its MPIJob.
            pools = tuple(SlurmPartition(name=t, nodes=(), max_minutes=None, default=i == 0)
                          for i, t in enumerate(self.cfg.k8s_gpu_types))
            self._snapshot = ClusterSnapshot(taken_at=now, partitions=pools)
            return self._snapshot
        try:
            self._snapshot = self._ask_slurm()
        except SlurmError as err:
            self._failure = (self._clock(), err)
            raise
        self._failure = None
        return self._snapshot

    def _ask_slurm(self) -> ClusterSnapshot:
        asked_at = self._clock()
        self.squeue_calls += 1
        try:  # what plain squeue lists: pending and running jobs (22.05's --json also returns ended ones)
            queue = {job.id: job for job in read_squeue(self._run(SQUEUE_JSON), time.time()).values() if job.queued}
        except SlurmAnswerError as err:
            raise SlurmError(f"`{' '.join(SQUEUE_JSON)}`: {err}") from None
        self.scontrol_calls += 2
        partition_lines = self._run(["scontrol", "show", "partition", "-o"])
        node_lines = self._run(["scontrol", "show", "node", "-d", "-o"])
        return ClusterSnapshot(taken_at=self._clock(), queue=queue,
                               partitions=slurm_partitions(partition_lines, node_lines),
                               nodes=nodes_from_scontrol(node_lines), asked_at=asked_at)
