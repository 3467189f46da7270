"""The cluster as every scheduler shows it, whatever its own words: the jobs in its queue (`QueuedJob`), its nodes
(`ClusterNode`) and the pools they form (`NodePool`: a Slurm partition, or the nodes of one GPU type on
Kubernetes), and what the pages and the quota read from them: the start warning of a submit (`start_note`), a
user's jobs (`users_jobs`) and those in words, the GPUs they hold (`gpu_holders`). Each scheduler reads its own
answers into these, its own words too (a server, a reason in words: portal/scheduler/slurm/answers.py and
json_answers.py; portal/scheduler/kubernetes/nodes.py and records.py); the snapshot (snapshot.py) and the dashboard
use nothing else. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from portal.quota import GpuHolder
from portal.records.fit import NOTHING, NodeRoom, Shape
from portal.records.limits import Pool
from portal.records.states import ENDED_STATES, PENDING, RUNNING

UNNAMED_JOB = "training"  # the name of a job whose queue entry does not say its program (Kubernetes' pods)


@dataclass(frozen=True)
class QueuedJob:
    """One job in a scheduler's queue: pending, running or ended (Slurm keeps an ended job for MinJobAge; a
    Kubernetes job's pods are its entries: portal/scheduler/kubernetes/records.py).

    Its last three fields are its scheduler's own words, read by that scheduler's reader so that the pages and the
    quota need none of them. On Slurm (portal.scheduler.slurm.json_answers): `server` when its job name is
    batchspawner's, `reason_words` its reason word in words (portal.scheduler.slurm.answers.pending_reason), and
    `waits_for_resources` when that word is one of HELD_REASONS there. On Kubernetes
    (portal.scheduler.kubernetes.records.pod_queue): `server` for the pods of no job, `reason_words` the scheduler's
    message, in words already, and `waits_for_resources` whenever it gave one in words (what its nodes lack)."""

    id: str
    user: str
    state: str
    elapsed: str  # as squeue prints it (duration_text): "1:23", "1:02:03", "1-02:03:04"
    nodes: int
    gpus_per_node: int
    reason: str  # why it waits (Slurm's "Resources", or words) or why it ended ("NonZeroExitCode"); "None" if none
    name: str = ""
    node_list: str = ""  # where it runs or ran, as a hostlist ("node[1-2]")
    gpus: int = 0  # every GPU it holds or asks for, all nodes together (per-node and per-job requests alike)
    uid: int = -1
    exit_code: str = ""  # Slurm's "3:0" (exit status : signal), once it has ended
    restarts: int = 0  # how often Slurm requeued it
    expected_start: int = 0  # a pending job's: when Slurm expects it to start (epoch seconds); 0: no estimate
    server: bool = False  # a user's JupyterLab server, not a job
    reason_words: str = ""  # why a pending job waits, in words, as the pages show it; "" when it does not wait
    waits_for_resources: bool = False  # it waits for GPUs, CPUs or memory that jobs hold: those are worth naming
    submitted: int = 0  # when it was submitted (epoch seconds; a job array's, its first task's); 0: not said
    partition: str = ""  # the partition (Slurm) or GPU node pool (Kubernetes) it asked for; "": not said
    # A sweep's trials (a job array's tasks) in this entry: running, and waiting to start now (as many as may start
    # beside the running ones under its `parallel`; the trials beyond it are not counted). Slurm: a started task's
    # entry is one running, the array's pending entry the waiting ones; Kubernetes: its Job's trial pods.
    trials_running: int = 0
    trials_waiting: int = 0
    # The most GPU-minutes it may still hold (gpu_minutes_ahead): what the weekly budget charges ahead for it.
    gpu_minutes_ahead: int = 0

    @property
    def queued(self) -> bool:
        """Whether plain `squeue` lists it: not ended."""
        return self.state not in ENDED_STATES


MAX_LIMIT_MINUTES = 366 * 24 * 60  # a time limit longer than a year is none (UNLIMITED), charged nothing ahead


def gpu_minutes_ahead(gpus: int, state: str, limit_minutes: int | None, ran_s: float) -> int:
    """The most GPU-minutes a job or server in `state` may still hold: its GPUs x its whole time limit while it waits
    (a requeued one too), x what is left of it once it runs (`ran_s` seconds so far, whole minutes counted), 0 once
    it ends or completes; 0 too where it says no time limit (None, or more than a year: Slurm's UNLIMITED), as
    nothing then can be charged ahead."""
    if not limit_minutes or limit_minutes > MAX_LIMIT_MINUTES or state in ENDED_STATES or \
            state in ("COMPLETING", "STAGE_OUT"):
        return 0
    if state == PENDING or state.startswith("REQUEUE"):
        return gpus * limit_minutes
    return gpus * max(0, limit_minutes - int(ran_s // 60))


def duration_text(seconds: float) -> str:
    """Seconds as squeue's %M prints them, the one format of elapsed time on every page: "0:05", "12:34",
    "1:02:03", "1-02:03:04"."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Slurm's node list ("node[1-2,4]", "node1,gpu[01-02]") as names; "None assigned" is none."""
    names = []
    for prefix, ranges, single in re.findall(r"([^,\[\]]+)\[([^\]]+)\]|([^,\[\]]+)", text):
        if single:
            if single.strip() and " " not in single.strip():
                names.append(single.strip())
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            width = len(low)
            for number in range(int(low), int(high or low) + 1):
                names.append(f"{prefix}{number:0{width}d}")
    return tuple(names)


@dataclass(frozen=True)
class ClusterNode:
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    free_gpus: int  # 0 when the node cannot run anything now
    usable: bool
    partitions: tuple[str, ...]
    state: str = ""  # Slurm's, e.g. "IDLE", "MIXED", "IDLE+DRAIN", "DOWN+NOT_RESPONDING"
    address: str = ""
    free_cpus: int = 0  # what no job holds now; 0 when the node cannot run anything now
    free_memory_mb: int = 0
    # What a job can ever have of it, busy or not: on Kubernetes its allocatable less what the cluster's own pods
    # (no user's: the hub, DNS) request, `kept`; None: all of it (Slurm gives a job whole nodes' CPUs and memory).
    room: Shape | None = None
    kept: Shape | None = None

    def node_room(self) -> NodeRoom:
        """The node as portal.records.fit weighs a job against it."""
        return NodeRoom(self.name, self.room or Shape(self.cpus * 1000, self.memory_mb, self.gpus),
                        self.kept or NOTHING)


@dataclass(frozen=True)
class NodePool:
    """A partition that is up, with its member nodes."""

    name: str
    nodes: tuple[ClusterNode, ...]
    max_minutes: int | None  # None: no wall-time limit
    default: bool

    @property
    def usable_nodes(self) -> tuple[ClusterNode, ...]:
        """The nodes that can run something now (not down, drained or failing)."""
        return tuple(n for n in self.nodes if n.usable)

    # A job's per-node request must fit the partition's largest usable node: Slurm places it there or nowhere
    # (a drained node offers nothing, however large).
    @property
    def cpus_per_node(self) -> int:
        return max((n.cpus for n in self.usable_nodes), default=0)

    @property
    def memory_mb_per_node(self) -> int:
        return max((n.memory_mb for n in self.usable_nodes), default=0)

    @property
    def gpus_per_node(self) -> int:
        return max((n.gpus for n in self.usable_nodes), default=0)

    def rooms(self) -> tuple[NodeRoom, ...]:
        """The usable nodes as a job can ever have them (what a submit is weighed against: portal.records.fit)."""
        return tuple(node.node_room() for node in self.usable_nodes)

    @property
    def free_gpus_per_node(self) -> int:
        return max((n.free_gpus for n in self.usable_nodes), default=0)

    def as_pool(self) -> Pool:
        """The pool as a server sees it (portal.records.limits.Pool): its best usable node's shape."""
        return Pool(name=self.name, cpus_per_node=self.cpus_per_node, memory_mb_per_node=self.memory_mb_per_node,
                    gpus_per_node=self.gpus_per_node, free_gpus_per_node=self.free_gpus_per_node,
                    max_minutes=self.max_minutes, default=self.default)

    def unusable_note(self) -> str:
        """" (node2 is drained)"-style words for the nodes that cannot take work now, or ""."""
        down = [n for n in self.nodes if not n.usable]
        if not down:
            return ""
        return f"; not usable now: {', '.join(f'{n.name} ({n.state.lower()})' for n in down)}"


def server_pools(pools: Iterable[NodePool]) -> tuple[Pool, ...]:
    """The pools a server may go to: those with a usable node (a drained or down node offers nothing)."""
    return tuple(pool.as_pool() for pool in pools if pool.usable_nodes)


def users_jobs(jobs: Mapping[str, QueuedJob], user: str) -> list[QueuedJob]:
    """The user's jobs that wait or run (what plain squeue lists), in the queue's order."""
    return [job for job in jobs.values() if job.user == user and job.queued]


def gpu_holders(jobs: Iterable[QueuedJob]) -> tuple[GpuHolder, ...]:
    """The jobs with GPUs among `jobs` (a user's, as their scheduler lists them: pending ones count too, they are a
    claim on the quota), in the queue's order."""
    return tuple(GpuHolder(job_id=job.id, gpus=job.gpus, server=job.server) for job in jobs if job.gpus)


@dataclass(frozen=True)
class NodeHolding:
    """What one running job or server holds on one node, as its scheduler says (the GPU readers' input,
    portal.gpus.agent): whose it is, how many GPUs there, and, where its processes' cgroups are not named by its
    id (Slurm's job_<id>), their names on the node: a Kubernetes job's or server's pods there, by uid."""

    user: str
    gpus: int
    pods: tuple[str, ...] = ()


def holders_on(jobs: Iterable[QueuedJob], node: str) -> dict[str, NodeHolding]:
    """The running jobs and servers of a queue that hold GPUs on `node`, and how many there."""
    return {job.id: NodeHolding(job.user, job.gpus_per_node) for job in jobs
            if job.state == RUNNING and job.gpus_per_node > 0 and node in expand_hostlist(job.node_list)}


def own_jobs_in_words(jobs: Iterable[QueuedJob], whose: str = "your") -> str:
    """A user's own jobs as they read of them, for what holds what their waiting job asks for: "your server
    (job 4), your job 7"; "" for none. `whose`: "alice's" for someone else reading of them (an admin)."""
    return ", ".join(f"{whose} server (job {job.id})" if job.server else f"{whose} job {job.id}" for job in jobs)


def start_note(nodes_needed: int, gpus: int, cpus: int, memory_gb: int, partition: NodePool,
               mine: Iterable[QueuedJob]) -> str:
    """Whether a job asking each of `nodes_needed` nodes for `gpus`, `cpus` (all its workers together) and
    `memory_gb` can start now on the partition's usable nodes; "" when it can, else why it will wait, in words:
    "will wait for your server (job 4) to end: node1 has 20 of 24 GB free". `mine`: the user's jobs now (their
    own are named; anything else is "other users' jobs"). The request itself fits a node (parse_job_spec)."""
    usable = partition.usable_nodes
    need_mb = memory_gb * 1024

    def short_of(node: ClusterNode) -> list[str]:
        found = []
        if node.free_gpus < gpus:
            found.append(f"{node.free_gpus} of {node.gpus} GPUs")
        if node.free_cpus < cpus:
            found.append(f"{node.free_cpus} of {node.cpus} CPUs")
        if node.free_memory_mb < need_mb:
            found.append(f"{node.free_memory_mb // 1024} of {node.memory_mb // 1024} GB")
        return found

    short = {node.name: what for node in usable if (what := short_of(node))}
    if len(usable) - len(short) >= nodes_needed:
        return ""
    holding = [job for job in mine if job.state == RUNNING and set(expand_hostlist(job.node_list)) & set(short)]
    holders = own_jobs_in_words(holding) or "other users' jobs"
    where = "; ".join(f"{name} has {' and '.join(what)} free" for name, what in short.items())
    return f"will wait for {holders} to end: {where}"
