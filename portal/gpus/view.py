"""The portal's side of the nodes' GPU readings (portal.gpus.agent writes them, root's, in readings_dir): the
latest of each node, and a job's or a server's GPUs over time, node by node, for its page.

Every reading is checked against its schema (portal.gpus.readings) before it is used; a line of the history that
is not one is left out and counted. A node whose latest reading is older than STALE_AFTER_S has a reader that
stopped: it reads as an error, so its GPUs are unknown (never idle).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from portal.gpus.readings import MAX_BYTES, NodeReading, ReadingError
from programkit.userfiles import read_bytes

STALE_AFTER_S = 60.0
MAX_HISTORY_READ = 8 << 20  # the agent keeps at most half of this


@dataclass(frozen=True)
class Point:
    """A holder's GPUs on one node at one reading: their mean busy percent (None: unknown) and memory."""

    at: float
    busy: float | None
    memory_used_mib: int | None


@dataclass(frozen=True)
class NodeSeries:
    node: str
    gpus: tuple[int, ...]  # the indices it held there, the last it held
    points: tuple[Point, ...]
    left_out: int = 0  # history lines that were not readings
    source: str = ""  # the last reading's reader: "standin" for the boxes' FAKE GPUs


def latest(folder: Path, clock: Callable[[], float] = time.time) -> dict[str, NodeReading]:
    """Each node's latest reading; a stale or unreadable one as an error reading (its GPUs unknown)."""
    found: dict[str, NodeReading] = {}
    now = clock()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        node = path.stem  # the file's name, as for the history: the agent names both after its node
        try:
            reading = NodeReading.from_json(read_bytes(path, MAX_BYTES).decode())
        except (OSError, ValueError, ReadingError) as err:  # a link, a FIFO, too big; not a reading
            found[node] = NodeReading(node, now, 0.0, "standin", error=f"unreadable reading: {str(err)[:200]}")
            continue
        if now - reading.at > STALE_AFTER_S:
            reading = replace(reading, gpus=tuple(replace(g, busy=None) for g in reading.gpus),
                              error=f"no reading for {now - reading.at:.0f} s: the node's reader stopped")
        found[node] = reading
    return found


def holder_series(folder: Path, holder: str, nodes: Iterable[str], since: float = 0.0) -> list[NodeSeries]:
    """A job's or a server's GPUs on each of its nodes, reading by reading since `since` (epoch seconds)."""
    series = []
    for node in nodes:
        points, indices, left_out, source = [], (), 0, ""
        for reading in _history(folder / f"{node}.jsonl", f'"holder":"{holder}"'):
            if reading is None:
                left_out += 1
                continue
            held = reading.held_by(holder)
            if reading.at < since or not held:
                continue
            indices, source = tuple(g.index for g in held), reading.source
            known = [g.busy for g in held if g.busy is not None]
            memory = [g.memory_used_mib for g in held if g.memory_used_mib is not None]
            points.append(Point(reading.at, sum(known) / len(known) if len(known) == len(held) else None,
                                sum(memory) if memory else None))
        series.append(NodeSeries(node, indices, tuple(points), left_out, source))
    return series


def _history(path: Path, holding: str = "") -> Iterable[NodeReading | None]:
    """The node's readings, oldest first (with `holding`, only the lines that hold that text: the agent writes
    compact JSON, so a holder's readings are the lines with its `"holder":"<id>"`, and a page of one job does not
    check a day of every holder's readings); None for each line that is not a reading."""
    try:
        data = read_bytes(path, MAX_HISTORY_READ)
    except (OSError, ValueError):
        return
    for line in data.decode(errors="replace").splitlines():
        if holding not in line:
            continue
        try:
            yield NodeReading.from_json(line)
        except ReadingError:
            yield None


def holder_gpus(folder: Path, holder: str, since: float = 0.0) -> list[NodeSeries]:
    """holder_series over every node with readings, keeping the nodes where it held GPUs."""
    nodes = sorted(path.stem for path in folder.glob("*.jsonl")) if folder.is_dir() else []
    return [series for series in holder_series(folder, holder, nodes, since) if series.points]


@dataclass(frozen=True)
class HeldGpu:
    """A GPU held now, for the admin's Cluster page."""

    node: str
    index: int
    holder: str
    user: str
    busy: float | None
    memory_used_mib: int | None
    idle_since: float | None  # the start of its current idle stretch; None: busy or unknown now
    error: str = ""  # its node's reader's, when it failed


def held_now(folder: Path, clock: Callable[[], float] = time.time) -> list[HeldGpu]:
    """Every GPU held now, node by node, with since when it has been idle (from its node's history)."""
    rows = []
    for node, reading in sorted(latest(folder, clock).items()):
        since = _idle_stretches(folder / f"{node}.jsonl")
        rows += [HeldGpu(node, gpu.index, gpu.holder, gpu.user, gpu.busy, gpu.memory_used_mib,
                         since.get((gpu.index, gpu.holder)) if gpu.idle else None, reading.error)
                 for gpu in reading.gpus if gpu.holder]
    return rows


@dataclass(frozen=True)
class OwnGpu:
    """A GPU that one of a user's own holders has now, as their lab shows it."""

    node: str
    index: int
    busy: float | None  # None: unknown (its node's reader failed or stopped)
    memory_used_mib: int | None
    memory_total_mib: int | None
    source: str  # the reader: "standin" for the boxes' FAKE GPUs
    error: str = ""


def own_now(folder: Path, holders: Collection[str], user: str, clock: Callable[[], float] = time.time) -> list[OwnGpu]:
    """The GPUs these holders of `user`'s have now, node by node, from each node's latest reading only."""
    return [OwnGpu(node, gpu.index, gpu.busy, gpu.memory_used_mib, gpu.memory_total_mib, reading.source, reading.error)
            for node, reading in sorted(latest(folder, clock).items())
            for gpu in reading.gpus if gpu.holder in holders and gpu.user == user]


def _idle_stretches(history: Path) -> dict[tuple[int, str], float]:
    """For each (GPU, holder) idle at the end of the history, when its idle stretch began."""
    since: dict[tuple[int, str], float] = {}
    for reading in _history(history):
        for gpu in reading.gpus if reading else ():
            if gpu.idle:
                since.setdefault((gpu.index, gpu.holder), reading.at)
            else:
                since.pop((gpu.index, gpu.holder), None)
    return since
