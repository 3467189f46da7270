"""Whether a request can ever be placed on a cluster's nodes, and the arithmetic that says why not (pure).

A scheduler places what a request asks for at once: a run's node pods (`nodes` of them: Slurm gives each its own
node; on Kubernetes they are pods, which may share one), the launcher pod a Kubernetes run adds, and a sweep's
trials at once (each a run of its own). What the nodes can ever give is their `NodeRoom`: their CPUs, memory and
GPUs less what the cluster's own pods hold (the hub, DNS: no user's), busy or not. A request that fits nowhere is
refused at submit (portal.records.spec); one that fits but not now waits (portal.scheduler.cluster.start_note).

The launcher is counted on the worst node it may land on: the kube-scheduler picks its node before the workers'
(it is made first) and never moves it, so a run fits only if it fits wherever the launcher goes. Many identical
pods need no search: each node holds as many as fit in it, whatever the order they come in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["NodeRoom", "Request", "Shape", "cluster_words", "fits", "most_placed", "refusal", "request_words"]

SHOWN_NODES = 4  # a refusal names this many nodes of different shapes, then counts the rest


@dataclass(frozen=True)
class Shape:
    """CPUs (in thousandths, as Kubernetes counts them: a node may give 1900m), memory (MiB) and GPUs: what one
    pod asks for, or what one node can give."""

    millicpus: int
    memory_mb: int
    gpus: int = 0

    def times_in(self, room: Shape, most: int) -> int:
        """How many pods of this shape fit in `room`, counted up to `most`."""
        counts = [have // need for need, have in ((self.millicpus, room.millicpus), (self.memory_mb, room.memory_mb),
                                                  (self.gpus, room.gpus)) if need > 0]
        return max(0, min([most, *counts]))

    def less(self, other: Shape) -> Shape:
        return Shape(self.millicpus - other.millicpus, self.memory_mb - other.memory_mb, self.gpus - other.gpus)

    def only(self, dimension: str) -> Shape:
        """This shape with every other dimension asked as nothing ("millicpus", "memory_mb" or "gpus")."""
        return Shape(**{name: getattr(self, name) if name == dimension else 0 for name in DIMENSIONS})

    def words(self) -> str:
        """"2 CPUs, 16 GB and 1 GPU"; a dimension that is nothing is left out (GPUs) or said as 0."""
        parts = [f"{_figure(self.millicpus / 1000)} CPU{'' if self.millicpus == 1000 else 's'}",
                 f"{_figure(self.memory_mb / 1024)} GB"]
        if self.gpus:
            parts.append(f"{self.gpus} GPU{'' if self.gpus == 1 else 's'}")
        return ", ".join(parts[:-1]) + " and " + parts[-1]


DIMENSIONS = ("millicpus", "memory_mb", "gpus")
NOTHING = Shape(0, 0, 0)


def _figure(value: float) -> str:
    """1.9, 2, 7.8: one decimal at most, rounded down (a node's room is never said to be more than it is)."""
    tenths = int(value * 10 + 1e-9)
    return str(tenths // 10) if tenths % 10 == 0 else f"{tenths / 10:.1f}"


@dataclass(frozen=True)
class NodeRoom:
    """One node that can take work: what a job's pods can ever have of it (`room`), and what the cluster's own
    pods hold of it (`kept`, said in a refusal; already taken out of `room`)."""

    name: str
    room: Shape
    kept: Shape = NOTHING


@dataclass(frozen=True)
class Request:
    """What a request places at once: `runs` runs (a sweep's trials at once; 1 for a single run), each of `nodes`
    pods of shape `pod` (one node's workers: their CPUs, the memory, the GPUs), on nodes of their own when
    `own_nodes` (Slurm) or sharing nodes where they fit (Kubernetes); and a `launcher` pod, placed first, once."""

    pod: Shape
    nodes: int
    runs: int = 1
    own_nodes: bool = True
    launcher: Shape | None = None


def _runs_in(counts: Sequence[int], nodes: int, own_nodes: bool, most: int) -> int:
    """The most runs of `nodes` pods (up to `most`) that nodes holding `counts` pods each can take at once. On
    nodes of their own, r runs fit when every node gives each run at most one pod and they add up to r * nodes
    (sum(min(count, r)) >= r * nodes: a flow argument; it holds for every r up to the largest that fits)."""
    if not own_nodes:
        return min(most, sum(counts) // nodes)
    found = 0
    for runs in range(1, most + 1):
        if sum(min(count, runs) for count in counts) < runs * nodes:
            break
        found = runs
    return found


def _rooms_after_launcher(rooms: Sequence[NodeRoom], launcher: Shape | None) -> list[list[Shape]]:
    """The nodes' rooms once the launcher has landed, one list for each node it may land on ([] when it fits
    none); without a launcher, the rooms as they are."""
    shapes = [node.room for node in rooms]
    if launcher is None:
        return [shapes]
    return [[room.less(launcher) if i == at else room for i, room in enumerate(shapes)]
            for at, room in enumerate(shapes) if launcher.times_in(room, 1)]


def most_placed(rooms: Sequence[NodeRoom], request: Request) -> int:
    """The most of what `request` asks for that the nodes can ever hold, wherever the launcher lands: runs at once
    for a sweep (up to `request.runs`), else the run's node pods (up to `request.nodes`). The request fits when
    that is all of it; 0 when the launcher fits on no node."""
    if request.runs == 1:  # a node's pods do not depend on the others': only the launcher's node changes (O(n))
        most = 1 if request.own_nodes else request.nodes
        counts = [request.pod.times_in(node.room, most) for node in rooms]
        if request.launcher is None:
            return min(sum(counts), request.nodes)
        losses = [count - request.pod.times_in(node.room.less(request.launcher), most)
                  for count, node in zip(counts, rooms, strict=True) if request.launcher.times_in(node.room, 1)]
        return min(sum(counts) - max(losses), request.nodes) if losses else 0
    worst: int | None = None
    for shapes in _rooms_after_launcher(rooms, request.launcher):
        counts = [request.pod.times_in(room, request.runs * request.nodes) for room in shapes]
        placed = _runs_in(counts, request.nodes, request.own_nodes, request.runs)
        worst = placed if worst is None else min(worst, placed)
    return worst or 0


def fits(rooms: Sequence[NodeRoom], request: Request) -> bool:
    return most_placed(rooms, request) >= (request.runs if request.runs > 1 else request.nodes)


def request_words(request: Request, workers: int, cpus_per_task: int) -> str:
    """What the request places, in words: "2 node pods of 2 CPUs, 16 GB and 1 GPU each (1 worker x 2 CPUs), and a
    launcher pod of 1 CPU and 2 GB on one of the nodes"."""
    per = f"({workers} worker{'s' if workers != 1 else ''} x {cpus_per_task} CPU{'s' if cpus_per_task != 1 else ''})"
    if request.own_nodes:
        run = f"{request.nodes} node{'s' if request.nodes != 1 else ''}, each giving it {request.pod.words()} {per}"
    else:
        run = (f"{request.nodes} node pods of {request.pod.words()} each {per}" if request.nodes > 1 else
               f"1 node pod of {request.pod.words()} {per}")
    said = f"{request.runs} trials at once, each on {run}" if request.runs > 1 else run
    if request.launcher is not None:
        said += f", and a launcher pod of {request.launcher.words()} on one of the nodes"
    return said


def cluster_words(rooms: Sequence[NodeRoom]) -> str:
    """The nodes as a refusal names them: "2 nodes of 2 CPUs, 7.7 GB and 2 GPUs each (kubec-1: 0.1 CPU and 0.5 GB
    held by the cluster's own pods)"; shapes that differ are named node by node."""
    if not rooms:
        return "no node that can take work"
    shapes: dict[Shape, list[str]] = {}
    for node in rooms:
        shapes.setdefault(node.room, []).append(node.name)
    count = f"{len(rooms)} node{'s' if len(rooms) != 1 else ''}"
    if len(shapes) == 1:
        said = f"{count} with room for {next(iter(shapes)).words()} {'each' if len(rooms) > 1 else ''}".rstrip()
    else:
        listed = [f"{', '.join(names[:2])}{' ...' if len(names) > 2 else ''}: {shape.words()}"
                  for shape, names in list(shapes.items())[:SHOWN_NODES]]
        more = len(shapes) - SHOWN_NODES
        said = f"{count} ({'; '.join(listed)}{f'; {more} more shapes' if more > 0 else ''})"
    kept = [f"{node.name}: {node.kept.words()}" for node in rooms if node.kept != NOTHING][:SHOWN_NODES]
    return said + (f", after what the cluster's own pods hold ({'; '.join(kept)})" if kept else "")


# --- a refusal: which field, and what would fit ------------------------------------------------------------------

FIELD_OF = {"millicpus": "cpus_per_task", "memory_mb": "memory_gb", "gpus": "gpus_per_node"}
LOWEST = {"cpus_per_task": 1, "memory_gb": 1, "gpus_per_node": 0}
Values = dict[str, int]  # nodes, gpus_per_node, cpus_per_task, memory_gb: what a request is made of


def _only(request: Request, dimension: str) -> Request:
    launcher = request.launcher.only(dimension) if request.launcher is not None else None
    return Request(request.pod.only(dimension), request.nodes, request.runs, request.own_nodes, launcher)


def _largest(rooms: Sequence[NodeRoom], make: Callable[[Values], Request], values: Values, field: str) -> int | None:
    """The largest value of `field` below the one asked with which the request fits; None when not even its lowest
    does. Asking less never hurts, so a binary search finds it."""
    low, high = LOWEST[field], values[field] - 1
    if high < low or not fits(rooms, make({**values, field: low})):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if fits(rooms, make({**values, field: middle})):
            low = middle
        else:
            high = middle - 1
    return low


def _alternatives(rooms: Sequence[NodeRoom], make: Callable[[Values], Request], values: Values,
                  fields: Sequence[str]) -> list[str]:
    """What would fit instead: each field lowered alone (the field refused first); else, all of them lowered
    together, in that order, each to the most that fits with the ones before at theirs ("cpus_per_task 1 and
    memory_gb 5")."""
    alone = [f"{field} at most {lower}" for field in fields
             if field in LOWEST and (lower := _largest(rooms, make, values, field)) is not None]
    if alone:
        return alone
    lowered = {**values, **{field: LOWEST[field] for field in fields if field in LOWEST}}
    if not fits(rooms, make(lowered)):
        return []
    for field in fields:
        if field in LOWEST and values[field] > lowered[field]:
            found = _largest(rooms, make, {**lowered, field: values[field] + 1}, field)
            lowered[field] = lowered[field] if found is None else found
    return [" and ".join(f"{field} {lowered[field]}" for field in fields if lowered[field] != values[field])]


def refusal(rooms: Sequence[NodeRoom], make: Callable[[Values], Request], values: Values,
            runs_field: str = "") -> tuple[str, str] | None:
    """(field, message) when the request made of `values` (by `make`) can never be placed on `rooms`, else None.
    The field is the one that asks too much: the runs at once (`runs_field`) when fewer would fit, else the first
    of CPUs, memory and GPUs that does not fit alone, else nodes. The message has the arithmetic and what fits."""
    request = make(values)
    most = most_placed(rooms, request)
    sweep = request.runs > 1
    if most >= (request.runs if sweep else request.nodes):
        return None
    if sweep and most >= 1:
        field, value = runs_field, request.runs
    else:
        field = next((FIELD_OF[d] for d in DIMENSIONS if not fits(rooms, _only(request, d))), "nodes")
        value = values[field]
    allowed = _alternatives(rooms, make, values, [field, *(name for name in LOWEST if name != field)])
    if most >= 1:
        allowed.append(f"{runs_field} at most {most}" if sweep else f"nodes at most {most}")
    unit = "node" if request.own_nodes else "node pod"
    held = (f"at most {most} trial{'s' if most != 1 else ''} at once" if sweep else
            f"{most} of its {request.nodes} {unit}{'s' if request.nodes != 1 else ''}")
    if request.launcher is not None:
        held += " wherever the launcher lands"
    said = request_words(request, max(1, values["gpus_per_node"]), values["cpus_per_task"])
    return field, (f"{value} can never be placed: the job asks for {said}; the cluster has {cluster_words(rooms)}, "
                   f"which can hold {held}, so the job would never start; allowed: "
                   f"{', or '.join(allowed) or 'a smaller request'}")
