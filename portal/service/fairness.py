"""A fair share of the dashboard for each user (issue 40, item 2).

- `UserShares`: at most `share` of a pool's workers do one user's work at once (2 of the 8 readers); the rest of
  that user's requests wait on the event loop, holding no worker, so one user's slow reads (their own hostile files,
  a slow Slurm answer of theirs) never hold up another user's page.
- `UserShares.once`: the same read asked again by the same user while it runs is answered by that one read (a job
  page and its live parts, ten tabs on one job).
- `RateLimits`: a token bucket per user for the JSON API: `rate` requests a second, `burst` at once; beyond that
  429 with Retry-After, before any work is done.

All of it runs on the service's one event loop: no locks. The tables are pruned as users go idle, so their size
is the number of users active at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class UserShares:
    """Per user, at most `share` calls at once through `run`; the same call (by key) while one runs is joined."""

    def __init__(self, share: int):
        if share < 1:
            raise ValueError(f"share is {share}; allowed: 1 or more")
        self.share = share
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}  # calls of each user in `run` now (running or waiting)
        self._holding: dict[str, int] = {}  # ... of which hold a worker
        self._running: dict[Hashable, asyncio.Future[Any]] = {}

    def in_use(self, user: str) -> int:
        """How many of the user's calls hold a worker now."""
        return self._holding.get(user, 0)

    async def run(self, user: str, call: Callable[[], Awaitable[T]], key: Hashable | None = None) -> T:
        """`call()` within the user's share. With a `key` (hashable; the user is part of it), a call made while one
        with the same key runs gets that one's result, or its error."""
        if key is not None:
            key = (user, key)
            joined = self._running.get(key)
            if joined is not None:
                return await asyncio.shield(joined)
        self._users[user] = self._users.get(user, 0) + 1
        slots = self._slots.setdefault(user, asyncio.Semaphore(self.share))
        future: asyncio.Future[Any] | None = None
        if key is not None:
            future = asyncio.get_running_loop().create_future()
            self._running[key] = future
        try:
            async with slots:
                self._holding[user] = self._holding.get(user, 0) + 1
                try:
                    result = await call()
                finally:
                    self._holding[user] -= 1
                    if not self._holding[user]:
                        del self._holding[user]
        except BaseException as err:
            if future is not None:
                future.set_exception(err)
                future.exception()  # retrieved: nobody else may be waiting on it
            raise
        else:
            if future is not None:
                future.set_result(result)
            return result
        finally:
            if key is not None:
                self._running.pop(key, None)
            self._users[user] -= 1
            if not self._users[user]:
                del self._users[user]
                self._slots.pop(user, None)


def read_key(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable | None:
    """What makes two reads the same read: the function, and its arguments by what they name (a hub user by name,
    a job by id, a list by its items). None when an argument is none of those: that read is never joined."""
    def part(value: Any) -> Hashable:
        if value is None or isinstance(value, str | int | float | bool):
            return value
        if isinstance(value, list | tuple):
            return tuple(part(item) for item in value)
        for name in ("id", "name"):  # a job (portal.jobs.Job, a record) by its id; a hub user by name
            named = getattr(value, name, None)
            if isinstance(named, str):
                return (type(value).__qualname__, named)
        raise TypeError(type(value).__qualname__)

    target = getattr(fn, "__func__", fn)  # a bound method: its function (its object is the one board or cache)
    try:
        return (getattr(target, "__qualname__", None) or repr(target), part(args),
                tuple(sorted((name, part(value)) for name, value in kwargs.items())))
    except TypeError:
        return None


class RateLimits:
    """A token bucket per user: `burst` requests at once, refilled at `rate` a second."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        if rate <= 0 or burst < 1:
            raise ValueError(f"rate {rate}, burst {burst}; allowed: a rate above 0 and a burst of 1 or more")
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # user -> (tokens, when)

    def take(self, user: str) -> float:
        """0 when the user may make a request now (one token taken), else the seconds until they may."""
        now = self.clock()
        tokens, when = self._buckets.get(user, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - when) * self.rate)
        if tokens >= 1:
            self._buckets[user] = (tokens - 1, now)
            self._prune(now)
            return 0.0
        self._buckets[user] = (tokens, now)
        return (1 - tokens) / self.rate

    def _prune(self, now: float) -> None:
        """Forget the users whose bucket is full again (every one idle for burst / rate seconds)."""
        if len(self._buckets) < 1024:
            return
        full_after = self.burst / self.rate
        for user in [u for u, (_, when) in self._buckets.items() if now - when > full_after]:
            del self._buckets[user]
