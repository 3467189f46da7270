"""The GPU reader in the boxes, a STAND-IN: their GPUs are FAKE (character devices that cannot compute), so it
derives a busy figure from the work of the processes bound to them.

Each holder (a job or a server, the scheduler says which and how many GPUs it holds on the node) gets the node's
lowest free GPU indices and keeps them while it holds them. A GPU's busy figure over an interval is the CPU time its
holder's processes on the node used in it, shared among the GPUs it holds there: a training rank keeps one CPU
busy (100 %), an idle kernel almost none. Its memory is their resident memory, shared the same way, out of
FAKE_MEMORY_MIB. The CPU time comes from the node's cgroups (portal/gpus/cgroups.py), which root writes and a job
cannot: a user cannot mark a GPU busy without doing the work. A holder seen for the first time is unknown until
the next reading (nothing to take a difference from), and so is one whose cgroups could not be read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from portal.gpus.readings import GpuReading, NodeReading
from portal.scheduler.cluster import NodeHolding

FAKE_MEMORY_MIB = 16 * 1024  # what each fake GPU says it has


Held = NodeHolding  # what a holder holds on this node, as the scheduler says


@dataclass(frozen=True)
class Use:
    """What a holder's processes on this node have used: CPU seconds since they started, and memory now."""

    cpu_s: float
    memory_bytes: int


class StandIn:
    """Readings of one node's FAKE GPUs, one after another (it keeps the last CPU times to take differences)."""

    def __init__(self, node: str, gpus: int, use_of: Callable[[str, Held], Use | None],
                 clock: Callable[[], float] = time.time):
        self.node, self.gpus, self.use_of, self.clock = node, gpus, use_of, clock
        self._indices: dict[str, tuple[int, ...]] = {}  # holder -> its GPUs, kept while it holds them
        self._last: dict[str, tuple[float, float]] = {}  # holder -> (cpu_s, when)
        self._read_at: float | None = None

    def read(self, held: Mapping[str, Held]) -> NodeReading:
        now = self.clock()
        interval = 0.0 if self._read_at is None else max(0.0, now - self._read_at)
        self._read_at = now
        self._place(held)
        gpus: dict[int, GpuReading] = {}
        for holder, indices in self._indices.items():
            busy, memory = self._figures(holder, held[holder], len(indices), now)
            for index in indices:
                gpus[index] = GpuReading(index=index, uuid=self._uuid(index), busy=busy, memory_used_mib=memory,
                                         memory_total_mib=FAKE_MEMORY_MIB, holder=holder, user=held[holder].user)
        for index in range(self.gpus):  # a free GPU does nothing: 0 %, known
            gpus.setdefault(index, GpuReading(index=index, uuid=self._uuid(index), busy=0.0, memory_used_mib=0,
                                              memory_total_mib=FAKE_MEMORY_MIB))
        return NodeReading(self.node, now, min(interval, 3600.0), "standin",
                           gpus=tuple(gpus[index] for index in sorted(gpus)))

    def _place(self, held: Mapping[str, Held]) -> None:
        """Forget the holders that hold nothing here now; give each new one the lowest free indices."""
        for gone in [h for h in self._indices if h not in held]:
            del self._indices[gone]
            self._last.pop(gone, None)
        taken = {index for indices in self._indices.values() for index in indices}
        for holder in sorted(h for h in held if h not in self._indices):
            free = [index for index in range(self.gpus) if index not in taken]
            want = max(0, min(held[holder].gpus, len(free)))  # more than the node has: the scheduler's to refuse
            if want:
                self._indices[holder] = tuple(free[:want])
                taken.update(free[:want])

    def _figures(self, holder: str, held: Held, gpus: int, now: float) -> tuple[float | None, int | None]:
        use = self.use_of(holder, held)
        if use is None:
            self._last.pop(holder, None)
            return None, None
        memory = int(use.memory_bytes / gpus) >> 20
        last = self._last.get(holder)
        self._last[holder] = (use.cpu_s, now)
        if last is None or now <= last[1] or use.cpu_s < last[0]:  # first seen, or its processes were replaced
            return None, min(memory, FAKE_MEMORY_MIB)
        busy = 100.0 * (use.cpu_s - last[0]) / (now - last[1]) / gpus
        return min(100.0, busy), min(memory, FAKE_MEMORY_MIB)

    def _uuid(self, index: int) -> str:
        return f"FAKE-{self.node}-{index}"
