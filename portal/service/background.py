"""Work the dashboard keeps off its request path: values kept for a time, concurrent asks coalesced, background
refreshes at most one per key (moved out of portal.service.board, which imports them)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
REFRESH_WORKERS = 2  # background rescans and metrics reads at once: each is a process run as a user
log = logging.getLogger("portal.service")


class TimedCache:
    """Values kept for a time; a value marked `final` is kept for good (an ended job's metrics never change)."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic):
        self.ttl_s, self._clock = ttl_s, clock
        self._items: dict[Any, tuple[float, bool, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, want_final: bool = False) -> Any | None:
        """The value while fresh (or final); with `want_final`, only a final value (a job that just ended must
        not keep showing what it had reached while it ran)."""
        with self._lock:
            item = self._items.get(key)
        if item is None:
            return None
        stored_at, final, value = item
        if want_final:
            return value if final else None
        return value if final or self._clock() - stored_at < self.ttl_s else None

    def put(self, key: Any, value: Any, final: bool = False) -> Any:
        with self._lock:
            self._items[key] = (self._clock(), final, value)
        return value

    def get_any(self, key: Any) -> Any | None:
        """The value, however old."""
        with self._lock:
            item = self._items.get(key)
        return None if item is None else item[2]

    def drop(self, key: Any) -> None:
        with self._lock:
            self._items.pop(key, None)


class Coalescer:
    """Concurrent calls for the same key share one run: the first caller runs it, the others wait for its answer
    (or its exception)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Hashable, Future] = {}
        self.runs = 0  # how many times a function actually ran (the tests read it)

    def run(self, key: Hashable, fn: Callable[[], T]) -> T:
        with self._lock:
            running = self._running.get(key)
            if running is None:
                running = self._running[key] = Future()
                mine = True
                self.runs += 1
            else:
                mine = False
        if not mine:
            return running.result()
        try:
            value = fn()
        except BaseException as err:
            running.set_exception(err)
            raise
        else:
            running.set_result(value)
            return value
        finally:
            with self._lock:
                del self._running[key]


class Refresher:
    """Work off the request path: at most one task per key at once (asking again while it runs does nothing), and
    at most one per owner (a user whose files are slow to read holds one worker, never all of them: their next
    task starts once this one ends), run by `execute` (a small pool of its own by default, so requests never
    queue behind it)."""

    def __init__(self, execute: Callable[[Callable[[], None]], Any] | None = None):
        self._pool: ThreadPoolExecutor | None = None
        if not execute:
            self._pool = ThreadPoolExecutor(REFRESH_WORKERS, thread_name_prefix="portal-refresh")
            execute = self._pool.submit
        self._execute = execute
        self._lock = threading.Lock()
        self._running: set[Hashable] = set()
        self._owners: set[str] = set()

    def stop(self) -> None:
        """Drop the queued tasks (nobody waits for them); those running finish. Nothing starts afterwards."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def start(self, key: Hashable, fn: Callable[[], Any], owner: str | None = None) -> bool:
        """Start `fn` unless the key's task, or another of `owner`'s, runs (or waits to) already; whether it was
        started."""
        with self._lock:
            if key in self._running or (owner is not None and owner in self._owners):
                return False
            self._running.add(key)
            if owner is not None:
                self._owners.add(owner)

        def task() -> None:
            try:
                fn()
            except Exception:  # a background task has no one to answer to: log it, the next ask tries again
                log.warning("background refresh %s failed", key, exc_info=True)
            finally:
                with self._lock:
                    self._running.discard(key)
                    if owner is not None:
                        self._owners.discard(owner)

        self._execute(task)
        return True
