"""A view of several users' records, each user's part read on its own (issue 49, item 7).

An admin's list of every user's jobs, an admin's lookup of a job among every user's, the usage of everyone: such a
view waited for each user's records in turn, so one user whose files stall (FIFOs, endless links, thousands of
records that never end) held it for the others: measured, 60 s and a 503, every round, while the users it was about
answered in 30 ms. Now:

- `UserParts.ask(user, key, read)`: the part's read runs on the part readers' own pool, or is joined when the same
  part (user, key) is in flight. At most `share` of one user's parts hold a worker at once; the rest of his wait in
  his own queue and hold none: a user's slow reads keep his share busy, never the others' workers.
- `UserParts.gather(parts, deadline_s)`: every part asked at once, each waited for until the one deadline; a part
  not done by then, or failed, is answered from what it last read, with its age and why (`Part`), or as unread when
  it has never been read. Nobody waits for a late part: it carries on, and what it reads is the next view's.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from portal.errors import Unavailable
from portal.inputs import one_line

T = TypeVar("T")
log = logging.getLogger("portal.service")
# How long a view of several users waits for each user's part: every part is asked at once, so the view answers
# within about this (plus its own work) whatever one user's files do. A part read from what the board keeps (the
# usual case) takes milliseconds; one that reads a home (a first scan, states of jobs that left the queue) takes a
# process per file, about 30 ms each.
PART_DEADLINE_S = 2.0
PART_WORKERS = 8  # parts read at once, for all views and users together
PART_SHARE = 2  # ... of which one user's at most (portal.service.app.WORKERS_PER_USER for requests)


@dataclass(frozen=True)
class Part(Generic[T]):
    """One user's part of a view: `value` as read now, or (`late` says why not) as last read `age_s` ago, or None
    when it has never been read."""

    user: str
    value: T | None
    late: str = ""  # "" when read for this view; else why not ("not read within 2 s", or the error)
    age_s: float | None = None  # how old a late part's value is; None with no value

    @property
    def fresh(self) -> bool:
        return not self.late

    def note(self, what: str = "records") -> str:
        """What the page and the JSON say of a late part ("" for a fresh one): stale, or unreadable."""
        if self.fresh:
            return ""
        if self.value is None:
            return f"{self.user}'s {what} are unreadable now ({self.late}); shown once they answer"
        return f"stale: {self.user}'s {what} as read {self.age_s:.0f} s ago ({self.late})"


class PartsLate(Unavailable, RuntimeError):
    """A view could not be answered from the parts that were read in time (a job looked up among users whose
    records did not all answer): the service says 503, try again."""


@dataclass
class _Queued:
    key: Hashable
    read: Callable[[], Any]
    future: Future


class UserParts:
    """Each user's parts of views, read at most `share` at once per user on `workers` threads of their own, each
    joined while in flight; the last value of each part kept (`keep`) for a view that cannot wait for it."""

    def __init__(self, workers: int = PART_WORKERS, share: int = PART_SHARE,
                 clock: Callable[[], float] = time.monotonic):
        if share < 1 or workers < share:
            raise ValueError(f"workers {workers}, share {share}; allowed: a share of 1 or more, workers at least that")
        self.share, self._clock = share, clock
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="portal-part")
        self._lock = threading.Lock()
        self._running: dict[tuple[str, Hashable], Future] = {}  # (user, key) -> the part in flight
        self._holding: dict[str, int] = {}  # user -> his parts that hold a worker (or are handed to the pool)
        self._waiting: dict[str, deque[_Queued]] = {}  # user -> his parts beyond his share, holding no worker
        self._last: dict[tuple[str, Hashable], tuple[float, Any]] = {}  # (user, key) -> (read at, value)
        self.reads = 0  # parts actually read (the tests count them)

    def in_use(self, user: str) -> int:
        """How many of the user's parts hold a worker now."""
        with self._lock:
            return self._holding.get(user, 0)

    def stop(self) -> None:
        """Drop the parts not started (nobody waits beyond a deadline); those reading finish."""
        with self._lock:
            self._waiting.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def ask(self, user: str, key: Hashable, read: Callable[[], T], keep: bool = True) -> Future:
        """The future of the user's part `key`: the one in flight, else `read` started now (or queued behind the
        user's own parts when his share is taken). `keep`: its value is kept for a view that cannot wait."""
        with self._lock:
            running = self._running.get((user, key))
            if running is not None:
                return running
            future: Future = Future()
            self._running[(user, key)] = future
            queued = _Queued(key, self._kept(user, key, read) if keep else read, future)
            if self._holding.get(user, 0) >= self.share:
                self._waiting.setdefault(user, deque()).append(queued)
                return future
            self._holding[user] = self._holding.get(user, 0) + 1
        self._start(user, queued)
        return future

    def _kept(self, user: str, key: Hashable, read: Callable[[], T]) -> Callable[[], T]:
        def reading() -> T:
            value = read()
            with self._lock:
                self._last[(user, key)] = (self._clock(), value)
            return value
        return reading

    def _start(self, user: str, queued: _Queued) -> None:
        try:
            self._pool.submit(self._run, user, queued)
        except RuntimeError as err:  # stopped: the part is never read
            self._finished(user, queued, None, err)

    def _run(self, user: str, queued: _Queued) -> None:
        with self._lock:
            self.reads += 1
        try:
            value = queued.read()
        except BaseException as err:  # noqa: BLE001 (handed to whoever waits for the part)
            self._finished(user, queued, None, err)
        else:
            self._finished(user, queued, value, None)

    def _finished(self, user: str, queued: _Queued, value: Any, error: BaseException | None) -> None:
        with self._lock:
            self._running.pop((user, queued.key), None)
            waiting = self._waiting.get(user)
            following = waiting.popleft() if waiting else None
            if waiting is not None and not waiting:
                del self._waiting[user]
            if following is None:  # his worker is free again
                self._holding[user] -= 1
                if not self._holding[user]:
                    del self._holding[user]
        if error is not None:
            queued.future.set_exception(error)
        else:
            queued.future.set_result(value)
        if following is not None:  # his next part takes the worker his last one held
            self._start(user, following)

    def last(self, user: str, key: Hashable) -> tuple[float, Any] | None:
        """(age in seconds, value) of the part as last read, None if never."""
        with self._lock:
            found = self._last.get((user, key))
        return None if found is None else (self._clock() - found[0], found[1])

    def gather(self, parts: Mapping[str, tuple[Hashable, Callable[[], T]]], deadline_s: float = PART_DEADLINE_S,
               keep: bool = True) -> dict[str, Part[T]]:
        """Each user's part (user -> (key, read)), asked at once and waited for until `deadline_s` from now; a part
        late or failed is its last value (`keep`), marked."""
        futures = {user: self.ask(user, key, read, keep) for user, (key, read) in parts.items()}
        concurrent.futures.wait(futures.values(), timeout=deadline_s)
        answered: dict[str, Part[T]] = {}
        for user, future in futures.items():
            if future.done() and not future.cancelled() and future.exception() is None:
                answered[user] = Part(user, future.result())
                continue
            if not future.done() or future.cancelled():
                why = f"not read within {deadline_s:g} s"
            else:
                error = future.exception()
                why = one_line(error) or type(error).__name__
                log.warning("%s's part of a view failed: %s", user, why, exc_info=error)
            last = self.last(user, parts[user][0]) if keep else None
            answered[user] = Part(user, None, why) if last is None else Part(user, last[1], why, last[0])
        return answered
