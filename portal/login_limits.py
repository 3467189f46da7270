"""Limits on logins, kept apart from LDAP so they are pure and unit-tested (portal.auth applies them).

- `LoginThrottle`: failed logins counted per (user, client), per address and per user, in memory. A client is a
  browser that holds a login-device cookie for that user (issued on a successful login), else its address. A
  correct password is never refused because of what *other* clients did: attempts from a browser with a device
  cookie face only their own count, so an attacker cannot lock a user out of a browser they have used before.
- `LdapSlots`: at most N directory operations at once, at most M of them for one address, waiting a bounded time.
- `client_address`: the client's address behind the proxy, trusting X-Forwarded-For only from known proxies.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from portal.errors import Unavailable
from portal.retry import RetryLater

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Policy:
    """After `limit` failures, each further one blocks for a delay that doubles from `base_delay` to `max_delay`;
    the count is forgotten after `forget_after` seconds without a failure (counted from the end of the block)."""

    limit: int
    base_delay: float
    max_delay: float
    forget_after: float

    def delay(self, failures: int) -> float:
        if failures < self.limit:
            return 0.0
        return min(self.max_delay, self.base_delay * 2 ** min(failures - self.limit, 32))


@dataclass
class _Record:
    failures: int = 0
    last: float = 0.0
    blocked_until: float = 0.0


class FailureCounter:
    """Failures per key under one policy; the oldest keys are dropped beyond `max_keys` so memory stays bounded."""

    def __init__(self, policy: Policy, max_keys: int, clock: Callable[[], float]):
        self.policy, self.max_keys, self.clock = policy, max_keys, clock
        self._records: OrderedDict[object, _Record] = OrderedDict()

    def _current(self, key: object) -> _Record | None:
        record = self._records.get(key)
        if record and self.clock() > max(record.last, record.blocked_until) + self.policy.forget_after:
            del self._records[key]
            return None
        return record

    def wait(self, key: object) -> float:
        """Seconds before `key` may try again; 0 when it may now."""
        record = self._current(key)
        return max(0.0, record.blocked_until - self.clock()) if record else 0.0

    def failed(self, key: object) -> None:
        record = self._current(key) or _Record()
        now = self.clock()
        record.failures += 1
        record.last = now
        record.blocked_until = max(record.blocked_until, now + self.policy.delay(record.failures))
        self._records[key] = record
        self._records.move_to_end(key)
        while len(self._records) > self.max_keys:
            self._records.popitem(last=False)

    def forget(self, key: object) -> None:
        self._records.pop(key, None)


@dataclass(frozen=True)
class Attempt:
    """One login attempt: the (normalised, valid) user name or None, the client's address, and the id of a
    login-device cookie that this browser holds for this very user, if any."""

    user: str | None
    address: str
    device: str | None = None

    @property
    def client(self) -> tuple[str, str]:
        return ("device", self.device) if self.device else ("address", self.address)


@dataclass(frozen=True)
class Refusal:
    rule: str
    retry_after: int
    message: str


class LoginThrottle:
    """Strong per (user, client), loose per address and per user; the loose rules spare a known browser."""

    def __init__(self, pair: Policy, address: Policy, user: Policy, max_keys: int = 100_000,
                 clock: Callable[[], float] = time.monotonic):
        self.pair = FailureCounter(pair, max_keys, clock)
        self.address = FailureCounter(address, max_keys, clock)
        self.user = FailureCounter(user, max_keys, clock)

    def check(self, attempt: Attempt) -> Refusal | None:
        """None when the attempt may go to the directory, else why not and for how long."""
        if attempt.user is not None:
            wait = self.pair.wait((attempt.user, attempt.client))
            if wait:
                where = "this browser" if attempt.device else f"your address ({attempt.address})"
                return _refusal("user and client", wait, f"Too many failed logins for {attempt.user} from {where}")
        if attempt.device:
            return None  # a browser this user logged in from before: only its own failures count
        wait = self.address.wait(attempt.address)
        if wait:
            return _refusal("address", wait, f"Too many failed logins from your address ({attempt.address})")
        if attempt.user is not None:
            wait = self.user.wait(attempt.user)
            if wait:
                return _refusal("user", wait, f"Too many failed logins for {attempt.user} from browsers it has not "
                                "logged in from before; a browser you logged in with before is not held back")
        return None

    def failed(self, attempt: Attempt) -> None:
        if attempt.user is not None:
            self.pair.failed((attempt.user, attempt.client))
        if not attempt.device:
            self.address.failed(attempt.address)
            if attempt.user is not None:
                self.user.failed(attempt.user)

    def succeeded(self, attempt: Attempt) -> None:
        # Only the pair: an attacker's own successful logins must not wipe their address's failures.
        if attempt.user is not None:
            self.pair.forget((attempt.user, attempt.client))


def _refusal(rule: str, wait: float, why: str) -> Refusal:
    later = RetryLater.after(wait)  # the text's seconds are the Retry-After header's (portal.auth sends both)
    return Refusal(rule, later.seconds, f"{why}: {later.text}.")


class LdapBusy(Unavailable):
    """No directory slot became free in time."""


class LdapSlots:
    """At most `total` directory operations at once, at most `per_address` for one address; a caller waits at
    most `timeout` seconds for a slot. Slots are released by `release`, which the worker calls when it has really
    finished, so a thread that outlives its caller's deadline still holds its slot."""

    def __init__(self, total: int, per_address: int, timeout: float):
        self.total, self.per_address, self.timeout = total, per_address, timeout
        self._all: asyncio.Semaphore | None = None
        self._by_address: dict[str, tuple[asyncio.Semaphore, int]] = {}

    async def acquire(self, address: str) -> None:
        if self._all is None:
            self._all = asyncio.Semaphore(self.total)  # created on the hub's loop, when first used
        semaphore, users = self._by_address.get(address) or (asyncio.Semaphore(self.per_address), 0)
        self._by_address[address] = (semaphore, users + 1)
        deadline = time.monotonic() + self.timeout
        try:
            await asyncio.wait_for(semaphore.acquire(), self.timeout)
        except TimeoutError:
            self._unref(address)
            raise LdapBusy(f"no directory slot for {address} within {self.timeout:g} s") from None
        try:
            await asyncio.wait_for(self._all.acquire(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            semaphore.release()
            self._unref(address)
            raise LdapBusy(f"no directory slot within {self.timeout:g} s") from None

    def release(self, address: str) -> None:
        """Call on the event loop (e.g. with loop.call_soon_threadsafe from the worker thread)."""
        self._all.release()
        self._by_address[address][0].release()
        self._unref(address)

    def _unref(self, address: str) -> None:
        semaphore, users = self._by_address[address]
        if users <= 1:
            del self._by_address[address]
        else:
            self._by_address[address] = (semaphore, users - 1)


def client_address(peer: str | None, forwarded_for: str | None, trusted: Iterable[Network], proxy_hops: int = 1) -> str:
    """The client's address: the connection's peer, unless the peer is a trusted proxy; then the entry that the
    outermost of `proxy_hops` proxies appended to X-Forwarded-For (each proxy appends the address it saw). Entries
    further left were written by the client and are never trusted; X-Real-Ip is ignored for the same reason.
    A peer of None is a Unix socket, which only local processes (the proxy) reach."""
    if peer is not None and not _in(peer, trusted):
        return peer
    hops = [hop.strip() for hop in (forwarded_for or "").split(",") if hop.strip()]
    candidate = hops[-min(proxy_hops, len(hops))] if hops else ""
    return candidate if is_ip_address(candidate) else (peer or "local")


def is_ip_address(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def _in(address: str, networks: Iterable[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)
