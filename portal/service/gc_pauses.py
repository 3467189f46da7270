"""Python's garbage collector in a long-running dashboard: fewer full collections, each shorter, and the slow
ones said in the log.

A full collection (generation 2) walks every object the process keeps and holds the GIL while it does: the event
loop waits, and every page in flight with it. The dashboard keeps a few dozen objects per user (records, states,
scans), so at 5,000 users a full collection took 180-240 ms on the 2-core machine, and came every 2-3 s: the
jobs page's p99 was those pauses (issue 43). `settle` takes the imports' objects out of every collection and
makes young collections rarer, so fewer objects of the pages in flight get old; `watch` logs each collection
that took longer than `slow_s`, with its generation and how many objects it looked at, so an operator can tell
such a pause from a slow scheduler.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger("portal.service")
SLOW_S = 0.1  # a pause that a page's latency shows
# Young collections every this many allocations (Python's default: 700). Each one moves the objects of the pages in
# flight a generation up, and a full collection comes once enough of them have: at 200 reads a second, 700 gave one
# full collection every 2-3 s, 10,000 one every 25-30 s (issue 43, 5,000 users: p99 308 -> 50 ms).
YOUNG_THRESHOLD = 10_000


class PauseWatch:
    """A gc callback that times each collection; collections over `slow_s` are logged (and counted)."""

    def __init__(self, slow_s: float = SLOW_S, clock: Callable[[], float] = time.perf_counter,
                 say: Callable[..., None] = log.warning):
        self.slow_s, self._clock, self._say = slow_s, clock, say
        self._started: float | None = None
        self.slow = 0
        self.longest_s = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        if self._started is None:
            return
        took, self._started = self._clock() - self._started, None
        self.longest_s = max(self.longest_s, took)
        if took >= self.slow_s:
            self.slow += 1
            self._say("garbage collection paused the dashboard for %.0f ms (generation %s, %s objects tracked)",
                      took * 1000, info.get("generation"), len(gc.get_objects(info.get("generation", 2))))


def settle(young: int = YOUNG_THRESHOLD) -> None:
    """Once started: what the imports and the app made (about 100,000 objects: modules, classes, functions, kept
    for the life of the process) out of every later collection (gc.freeze), and young collections every `young`
    allocations instead of Python's 700."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)


def watch(slow_s: float = SLOW_S) -> PauseWatch:
    """Start logging the slow collections of this process; returns the watch (its counts)."""
    watcher = PauseWatch(slow_s)
    gc.callbacks.append(watcher)
    return watcher
