"""What a user may ask of a scheduler now, in one description every scheduler answers (Scheduler.limits) and
every form is a view of: the training jobs' form and API (portal.records.spec.parse_job_spec) and the spawn form
(spawners.forms). Pure.

- `Pool`: one partition (Slurm) or GPU node pool (Kubernetes) as a server sees it: the best usable node's shape,
  memory in MB as everywhere the cluster is described (portal.scheduler.cluster, portal.records.fit).
- `JobLimits`: the pool jobs go to, every pool a server may go to, the user's `GpuQuota` and weekly `GpuBudget`
  (portal.records.budget), and the caps. The rule "how many GPUs may this user ask for" is `GpuQuota.cap`, once: of
  each node for a job (`max_gpus_per_node`; a job may wait), of one node's free GPUs for a server (`server_gpus`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from portal.quota import GpuQuota
from portal.records.budget import GpuBudget
from portal.records.fit import NodeRoom, Request, Shape, cluster_words, fits, most_placed, refusal, request_words

__all__ = ["PLACED", "JobLimits", "Placed", "Pool"]
PLACED = ("nodes", "gpus_per_node", "cpus_per_task", "memory_gb")  # the fields that say what a job places


class Placed(Protocol):
    """What a job places (a JobSpec: portal.records.spec), as the arithmetic of runs at once reads it."""

    @property
    def nodes(self) -> int: ...

    @property
    def gpus_per_node(self) -> int: ...

    @property
    def cpus_per_task(self) -> int: ...

    @property
    def memory_gb(self) -> int: ...

    @property
    def workers_per_node(self) -> int: ...


@dataclass(frozen=True)
class Pool:
    """What one partition or node pool offers a single server: its best usable node's shape."""

    name: str
    cpus_per_node: int
    memory_mb_per_node: int
    gpus_per_node: int
    free_gpus_per_node: int  # the most GPUs free on any one of its nodes right now
    max_minutes: int | None = None  # None: no wall-time limit
    default: bool = False


@dataclass(frozen=True)
class JobLimits:
    """What one user may ask of one scheduler now (Scheduler.limits): the jobs' pool's shape, every pool a
    server may go to, the user's GPU quota with what they hold of it, and the caps."""

    partition: str  # "" on the local scheduler
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
    # The usable nodes as a job can ever have them (portal.records.fit), busy or not; (): `nodes` nodes of the
    # shape above (a dry run's configured shape, a scheduler that does not say).
    rooms: tuple[NodeRoom, ...] = ()
    launcher: Shape | None = None  # the pod a single run adds (Kubernetes' launcher); None: none
    # The launchers (portal.records.launchers) whose single runs add it; (): every one. On Kubernetes a
    # Horovod run's launcher is a pod of its own, while a torchrun run's node 0 both trains and hosts the rendezvous.
    launcher_for: tuple[str, ...] = ()
    own_nodes: bool = True  # each of a run's node pods on a node of its own (Slurm); False: they may share one
    programs: tuple[str, ...] = ()  # the training programs this scheduler can start (templating.programs_with); (): all
    # Every pool a server may go to (up, with a usable node), the default one marked: the spawn form's choices.
    pools: tuple[Pool, ...] = ()
    gpu_choices: tuple[int, ...] | None = None  # the GPU counts a server may have (Kubernetes' profiles); None: any
    budget: GpuBudget | None = None  # the user's weekly GPU-hours and their use this week; None: no budget
    # GPU-minutes the user's queued and running jobs and servers may still hold (QueuedJob.gpu_minutes_ahead): what
    # the budget charges ahead
    gpu_minutes_ahead: int = 0

    @property
    def max_gpus_per_node(self) -> int:
        """The most GPUs a job may ask of each node: the pool's nodes have them, the quota leaves them (a job may
        wait for them to free up)."""
        return self.quota.cap(self.gpus_per_node)

    # --- the pools, as a server sees them (the spawn form: spawners.forms) ---

    def pool(self, name: str) -> Pool | None:
        return next((p for p in self.pools if p.name == name), None)

    @property
    def default_pool(self) -> Pool:
        return next((p for p in self.pools if p.default), self.pools[0])

    def server_gpus(self, pool: Pool) -> int:
        """The most GPUs a server may ask for on `pool` now: free on one of its nodes, and left of the quota."""
        return self.quota.cap(pool.free_gpus_per_node)

    def gpu_counts(self, pool: Pool) -> tuple[int, ...] | None:
        """The GPU counts a server may pick on `pool` now, where only some are offered (gpu_choices); else None."""
        if self.gpu_choices is None:
            return None
        return tuple(n for n in self.gpu_choices if n <= self.server_gpus(pool))

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

    def node_rooms(self) -> tuple[NodeRoom, ...]:
        """The nodes a job is weighed against: `rooms`, else `nodes` nodes of the per-node shape above."""
        if self.rooms:
            return self.rooms
        shape = Shape(self.cpus_per_node * 1000, self.memory_gb_per_node * 1024, self.gpus_per_node)
        return tuple(NodeRoom(f"node {i + 1}", shape) for i in range(self.nodes))

    def adds_launcher(self, launcher: str) -> bool:
        """Whether a single run of a program with this launcher ("horovod", "torchrun") brings the launcher pod."""
        return self.launcher is not None and (not self.launcher_for or launcher in self.launcher_for)

    def request(self, values: Mapping[str, int], runs: int = 1, no_launcher: bool = False) -> Request:
        """What a run of `values` (nodes, gpus_per_node, cpus_per_task, memory_gb) places, `runs` of them at once;
        `no_launcher`: a sweep's trials, or a program whose launcher needs no pod of its own (adds_launcher)."""
        workers = max(1, values["gpus_per_node"])
        pod = Shape(values["cpus_per_task"] * workers * 1000, values["memory_gb"] * 1024, values["gpus_per_node"])
        return Request(pod, values["nodes"], runs, self.own_nodes, None if no_launcher else self.launcher)

    def refusal(self, values: Mapping[str, int], runs: int = 1, no_launcher: bool = False,
                runs_field: str = "") -> tuple[str, str] | None:
        """(field, message with the arithmetic) when `runs` runs of `values` can never be placed on the nodes,
        else None (portal.records.fit.refusal)."""
        return refusal(self.node_rooms(), lambda asked: self.request(asked, runs, no_launcher), dict(values),
                       runs_field)

    def runs_at_once(self, spec: Placed, most: int) -> tuple[int, str]:
        """How many runs of `spec` (a sweep's trials, up to `most`) the nodes can ever hold at once, and the
        arithmetic in words."""
        request = self.request({name: getattr(spec, name) for name in PLACED}, most, no_launcher=True)
        rooms = self.node_rooms()
        found = most_placed(rooms, request) if most > 1 else int(fits(rooms, request))
        trial = request_words(replace(request, runs=1), spec.workers_per_node, spec.cpus_per_task)
        return found, f"trials at once that {cluster_words(rooms)} can ever hold, each on {trial}"
