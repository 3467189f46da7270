"""The login limits: throttle, LDAP slots, client address, the caps applied before anything reaches LDAP, and the
log line of every refused login."""

import asyncio
import ipaddress
import logging

import pytest
from tornado import web

from portal.auth import PASSWORD_TOO_LONG, PortalLDAPAuthenticator
from portal.config import PortalConfig
from portal.login_limits import Attempt, LdapBusy, LdapSlots, LoginThrottle, Policy, client_address


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def throttle(clock: Clock, pair: int = 3, address: int = 10, user: int = 6) -> LoginThrottle:
    policy = {"base_delay": 10, "max_delay": 60, "forget_after": 100}
    return LoginThrottle(Policy(pair, **policy), Policy(address, **policy), Policy(user, **policy), clock=clock)


def fail(limits: LoginThrottle, attempt: Attempt, times: int) -> None:
    for _ in range(times):
        assert limits.check(attempt) is None
        limits.failed(attempt)


def test_a_pair_is_held_back_after_its_limit_with_a_growing_delay():
    clock = Clock()
    limits = throttle(clock)
    mallory_at_alice = Attempt("alice", "203.0.113.9")
    fail(limits, mallory_at_alice, 2)
    assert limits.check(mallory_at_alice) is None
    limits.failed(mallory_at_alice)  # the 3rd: held back 10 s
    refusal = limits.check(mallory_at_alice)
    assert refusal.rule == "user and client" and refusal.retry_after == 10
    assert "alice" in refusal.message and "try again in 10 s" in refusal.message
    clock.now += 10
    fail(limits, mallory_at_alice, 1)  # the 4th: 20 s
    assert limits.check(mallory_at_alice).retry_after == 20
    clock.now += 20
    fail(limits, mallory_at_alice, 1)
    assert limits.check(mallory_at_alice).retry_after == 40
    clock.now += 40
    fail(limits, mallory_at_alice, 1)
    assert limits.check(mallory_at_alice).retry_after == 60  # capped at max_delay


def test_others_are_not_held_back_by_a_pair():
    clock = Clock()
    limits = throttle(clock)
    fail(limits, Attempt("alice", "203.0.113.9"), 3)
    assert limits.check(Attempt("alice", "203.0.113.9")) is not None
    assert limits.check(Attempt("bob", "203.0.113.9")) is None  # another user, same address
    assert limits.check(Attempt("alice", "198.51.100.7")) is None  # the same user elsewhere


def test_failures_are_forgotten_after_a_quiet_window_and_a_success_clears_the_pair():
    clock = Clock()
    limits = throttle(clock)
    attempt = Attempt("alice", "203.0.113.9")
    fail(limits, attempt, 3)
    clock.now += 10 + 100 + 1  # the hold, then forget_after without failures
    fail(limits, attempt, 2)
    assert limits.check(attempt) is None  # counting restarted
    limits.succeeded(attempt)
    fail(limits, attempt, 2)
    assert limits.check(attempt) is None


def test_an_address_spraying_many_users_is_held_back():
    clock = Clock()
    limits = throttle(clock)
    for i in range(10):
        fail(limits, Attempt(f"user{i}", "203.0.113.9"), 1)
    refusal = limits.check(Attempt("user99", "203.0.113.9"))
    assert refusal.rule == "address" and "203.0.113.9" in refusal.message
    assert limits.check(Attempt("user99", "198.51.100.7")) is None
    # Invalid names (never sent to LDAP) count for the address too.
    other = Attempt(None, "192.0.2.1")
    fail(limits, other, 10)
    assert limits.check(other).rule == "address"


def test_a_distributed_flood_holds_back_new_clients_but_never_a_known_browser():
    clock = Clock()
    limits = throttle(clock)
    for i in range(6):
        fail(limits, Attempt("alice", f"203.0.113.{i}"), 1)
    assert limits.check(Attempt("alice", "198.51.100.7")).rule == "user"
    assert limits.check(Attempt("alice", "198.51.100.7", device="her-laptop")) is None
    assert limits.check(Attempt("bob", "198.51.100.7")) is None


def test_a_device_cookie_escapes_the_address_rule_but_has_its_own_pair_count():
    clock = Clock()
    limits = throttle(clock)
    for i in range(10):
        fail(limits, Attempt(f"user{i}", "203.0.113.9"), 1)
    laptop = Attempt("alice", "203.0.113.9", device="her-laptop")  # alice behind the attacker's NAT
    assert limits.check(laptop) is None
    fail(limits, laptop, 3)  # a stolen cookie buys only the pair's few guesses
    assert limits.check(laptop).rule == "user and client" and "this browser" in limits.check(laptop).message


def test_memory_stays_bounded():
    clock = Clock()
    policy = Policy(3, 10, 60, 100)
    limits = LoginThrottle(policy, policy, policy, max_keys=50, clock=clock)
    for i in range(1000):
        limits.failed(Attempt(f"u{i}", f"10.0.{i // 256}.{i % 256}"))
    assert max(len(limits.pair._records), len(limits.address._records), len(limits.user._records)) <= 50


TRUSTED = [ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("198.18.0.33/32")]


@pytest.mark.parametrize(("peer", "forwarded", "expected"), [
    ("198.18.0.33", "203.0.113.9", "203.0.113.9"),  # through the proxy
    ("198.18.0.33", "6.6.6.6, 203.0.113.9", "203.0.113.9"),  # the client's own entries are not trusted
    ("127.0.0.1", "6.6.6.6, 127.0.0.1", "127.0.0.1"),  # a local client forging the header
    ("198.18.0.34", "6.6.6.6", "198.18.0.34"),  # straight to the hub from a node: the header is ignored
    ("198.18.0.33", None, "198.18.0.33"),
    ("198.18.0.33", "not-an-address", "198.18.0.33"),
    (None, "203.0.113.9", "203.0.113.9"),  # a Unix socket: only local processes reach it
    (None, "garbage", "local"),
])
def test_client_address_trusts_only_the_proxy_entry(peer, forwarded, expected):
    assert client_address(peer, forwarded, TRUSTED) == expected


def test_client_address_with_two_proxies():
    assert client_address("127.0.0.1", "6.6.6.6, 203.0.113.9, 10.1.2.3", TRUSTED, proxy_hops=2) == "203.0.113.9"


def test_slots_bound_the_work_per_address_and_in_all():
    async def scenario():
        slots = LdapSlots(total=3, per_address=2, timeout=0.2)
        await slots.acquire("a")
        await slots.acquire("a")
        with pytest.raises(LdapBusy):
            await slots.acquire("a")  # a third for the same address waits, then is told busy
        await slots.acquire("b")
        with pytest.raises(LdapBusy):
            await slots.acquire("c")  # all three taken
        slots.release("a")
        await slots.acquire("c")
        slots.release("a")
        slots.release("b")
        slots.release("c")
        assert slots._by_address == {}  # nothing kept for idle addresses
    asyncio.run(scenario())


def authenticator(**traits) -> PortalLDAPAuthenticator:
    # An address where nothing listens: a test that reached LDAP would fail with 503, not with what it expects.
    return PortalLDAPAuthenticator(portal=PortalConfig(ldap_host="127.0.0.1", ldap_port=9, ldap_tls="none"), **traits)


def test_a_long_password_is_refused_before_ldap_with_its_own_message():
    auth = authenticator()
    with pytest.raises(web.HTTPError) as err:
        asyncio.run(auth.authenticate(None, {"username": "alice", "password": "x" * 1025}))
    assert err.value.status_code == 403
    assert err.value.log_message == PASSWORD_TOO_LONG.format(limit=1024) and "password" in err.value.log_message
    multibyte = "é" * 513  # 1026 bytes of UTF-8 in 513 characters
    with pytest.raises(web.HTTPError, match="1024 bytes"):
        asyncio.run(auth.authenticate(None, {"username": "alice", "password": multibyte}))


def test_the_cap_is_where_ldap_starts():
    with pytest.raises(web.HTTPError) as err:  # 1024 bytes pass the cap and reach the (absent) directory
        asyncio.run(authenticator(ldap_connect_timeout=1).authenticate(
            None, {"username": "alice", "password": "x" * 1024}))
    assert err.value.status_code == 503


def test_refusals_count_and_then_hold_back_before_ldap():
    auth = authenticator(failed_login_limit_per_user_client=2)
    for _ in range(2):
        with pytest.raises(web.HTTPError, match="1024 bytes"):
            asyncio.run(auth.authenticate(None, {"username": "Alice", "password": "x" * 5000}))
    with pytest.raises(web.HTTPError) as err:
        asyncio.run(auth.authenticate(None, {"username": "alice", "password": "right"}))
    assert err.value.status_code == 429 and "try again in 10 s" in err.value.log_message
    assert err.value.headers == {"Retry-After": "10"}  # the text's seconds (the hub's write_error sends it)
    assert asyncio.run(auth.authenticate(None, {"username": "*)(uid=*", "password": "x"})) is None


def test_trusted_proxies_must_be_addresses():
    from traitlets import TraitError
    with pytest.raises(TraitError, match="trusted_proxies"):
        authenticator(trusted_proxies=["proxy.example.org"])
    assert "198.18.0.1" in PortalLDAPAuthenticator(portal=PortalConfig()).trusted_proxies


def test_a_directory_that_never_answers_ends_the_thread_and_frees_its_slot():
    """A listener that accepts and never answers: ldap3's receive timeout ends the worker itself; a caller that
    gave up earlier gets 503 at its deadline, and the slot stays taken until the thread has really ended."""
    import socket
    import time

    with socket.create_server(("127.0.0.1", 0), backlog=16) as silent:
        portal = PortalConfig(ldap_host="127.0.0.1", ldap_port=silent.getsockname()[1], ldap_tls="none", ldap_timeout=1)
        auth = PortalLDAPAuthenticator(portal=portal, ldap_receive_timeout=2)
        _, slots, _ = auth._limits()

        async def scenario() -> tuple[float, bool, float]:
            started = time.monotonic()
            with pytest.raises(web.HTTPError) as err:
                await auth.authenticate(None, {"username": "alice", "password": "wonderland"})
            assert err.value.status_code == 503
            gave_up, held = time.monotonic() - started, bool(slots._by_address)
            while slots._by_address and time.monotonic() - started < 10:
                await asyncio.sleep(0.1)
            return gave_up, held, time.monotonic() - started

        gave_up, held, freed = asyncio.run(scenario())
    assert gave_up < 1.5 and held  # the caller's deadline (ldap_timeout), the thread still running
    assert 2 <= freed < 6  # bind timed out (2 s), the probe too (2 s): the thread ended and gave its slot back


# --- every refused login is one line in the hub's log: the user, the client's address and why -------------------

def logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "hub-login" and "Login refused" in r.getMessage()]


def login(auth: PortalLDAPAuthenticator, username: str, password: str):
    return asyncio.run(auth.authenticate(None, {"username": username, "password": password}))


def directory_answers(auth: PortalLDAPAuthenticator, groups: list[str] | None) -> None:
    """The directory as upstream's bind and searches see it: None (the bind failed), else the user's groups."""
    allowed = {"datascientists": "cn=datascientists,ou=groups,dc=dsportal,dc=local"}
    result = None if groups is None else {"name": "someone", "auth_state": {
        "ldap_groups": [allowed[g] for g in groups if g in allowed], "user_attributes": {"portal_groups": groups}}}
    auth._bind_and_read = lambda username, password: result


@pytest.mark.parametrize(("username", "password", "groups", "line"), [
    ("alice", "not-her-password", None,
     "Login refused for alice from local: wrong user name or password (the directory refused them)"),
    ("mallory", "her-password", [],
     "Login refused for mallory from local: in none of the allowed groups (datascientists, portal-admins)"),
    ("Alice ", "   ", ["datascientists"], "Login refused for alice from local: empty password"),
    ("alice\nforged", "x", ["datascientists"], "Login refused for 'alice\\nforged' from local: not a valid user name"),
    ("alice", "x" * 1025, ["datascientists"], "Login refused for alice from local: password of 1025 characters, over "
                                              "max_password_bytes"),
])
def test_a_refused_login_is_one_line_with_user_client_and_reason(caplog, username, password, groups, line):
    auth = authenticator(log=logging.getLogger("hub-login"))
    directory_answers(auth, groups)
    with caplog.at_level(logging.INFO, logger="hub-login"):
        try:
            assert login(auth, username, password) is None
        except web.HTTPError as err:
            assert err.status_code == 403  # the long password: a message of its own
    assert logged(caplog) == [line]
    assert password.strip() == "" or password not in caplog.text


def test_an_allowed_login_logs_no_refusal_and_a_blocked_user_is_refused(caplog):
    auth = authenticator(log=logging.getLogger("hub-login"), blocked_users={"bob"})
    directory_answers(auth, ["datascientists"])
    with caplog.at_level(logging.INFO, logger="hub-login"):
        assert login(auth, "alice", "wonderland")["groups"] == ["datascientists"]
        assert login(auth, "bob", "builder") is None
    assert logged(caplog) == ["Login refused for bob from local: in blocked_users"]


def test_held_back_busy_and_unavailable_are_logged_with_their_reason(caplog):
    log = logging.getLogger("hub-login")
    held_back = authenticator(log=log, failed_login_limit_per_user_client=1)
    directory_answers(held_back, None)
    unavailable = authenticator(log=log, ldap_connect_timeout=1)  # port 9: nothing listens
    busy = authenticator(log=log)

    async def no_slot(address: str) -> None:
        raise LdapBusy(f"no directory slot for {address} within 5 s")
    busy._limits()[1].acquire = no_slot
    with caplog.at_level(logging.INFO, logger="hub-login"):
        assert login(held_back, "alice", "guess-1") is None
        with pytest.raises(web.HTTPError, match="try again in 10 s"):
            login(held_back, "alice", "guess-2")
        for auth, status in ((unavailable, 503), (busy, 429)):
            with pytest.raises(web.HTTPError) as err:
                login(auth, "bob", "builder-pw")
            assert err.value.status_code == status
            if status == 429:  # busy: as long again as ldap_queue_timeout, said in the text and the header
                assert err.value.headers == {"Retry-After": "5"} and "try again in 5 s" in err.value.log_message
    wrong, held, down, refused = logged(caplog)
    assert held == "Login refused for alice from local: held back by the user and client rule for 10 s (too many " \
                   "failed logins)"
    assert down.startswith("Login refused for bob from local: directory unavailable: LDAP at 127.0.0.1:9: ")
    assert refused == "Login refused for bob from local: directory busy: no directory slot for local within 5 s"
    assert not any(password in caplog.text for password in ("guess-1", "guess-2", "builder-pw"))
