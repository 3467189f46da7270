"""How often an open page refreshes itself: the base period while few pages are open, longer as more are, so that all
open pages together ask at most `reads_per_s` a second (the dashboard is one process on the hub's machine).

Each page read says who read it (`seen`); the pages open are the users seen within the last minute (or two periods,
when that is longer). The period
is given to each page as it renders (data-poll-s, the meta refresh) and with each live answer (the `X-Poll-S`
header, which the page's script follows), so open pages slow down and speed up again with the crowd. Measured
(bench.dashboard, 2 cores): 1,000 users at 5 s (200 reads/s) answered within 26 ms at p99; 5,000 at 5 s (1,000
reads/s) queued for seconds and failed requests; at this pace 5,000 pages refresh every 25 s.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

WINDOW_S = 60.0  # a user whose page asked within this long has it open


class Pace:
    def __init__(self, base_s: float, reads_per_s: float, clock: Callable[[], float] = time.monotonic):
        if base_s <= 0 or reads_per_s <= 0:
            raise ValueError(f"a page's period ({base_s}) and the reads a second ({reads_per_s}) must be above 0")
        self.base_s, self.reads_per_s, self._clock = base_s, reads_per_s, clock
        self._last: dict[str, float] = {}  # user -> when a page of theirs last asked
        self._lock = threading.Lock()
        self._pruned = clock()
        self._period = base_s

    def seen(self, user: str) -> None:
        now = self._clock()
        with self._lock:
            self._last[user] = now
            if now - self._pruned >= self.base_s:  # the count is refreshed at most once per base period
                self._prune(now)

    def _prune(self, now: float) -> None:
        window = max(WINDOW_S, 2 * self._period)  # a page open at this pace asks at least once in two periods
        self._last = {user: at for user, at in self._last.items() if now - at <= window}
        self._pruned = now
        # whole seconds: the page's meta refresh and the script both read it
        self._period = max(self.base_s, float(math.ceil(len(self._last) / self.reads_per_s)))

    def poll_s(self) -> float:
        """The period every open page is asked to keep now."""
        with self._lock:
            now = self._clock()
            if now - self._pruned >= self.base_s:
                self._prune(now)
            return self._period

    def open_pages(self) -> int:
        with self._lock:
            return len(self._last)
