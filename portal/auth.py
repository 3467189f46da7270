"""LDAP login through jupyterhub-ldapauthenticator, with the gaps its users hit closed here.

- The directory's certificate is verified against the configured CA (the upstream default does not verify).
- `allowed_groups` always applies: `allow_all`, which silently disables it, is refused.
- Usernames are normalised (trimmed, lower case) and must be safe Unix names before anything reaches LDAP, so
  filter or DN injection (`*)(uid=*`, `alice,ou=x`) never gets that far; empty passwords never bind, and a
  password longer than `max_password_bytes` (UTF-8) is refused with its own message without reaching LDAP.
- All of the user's groups (not only the allowed ones) become JupyterHub groups, which drive the admin flag
  and the GPU quota.
- Logins that hold (portal.login_limits): at most `ldap_concurrency` directory operations at once and
  `ldap_concurrency_per_address` for one client, in a pool of their own; a login that waits longer than
  `ldap_queue_timeout` for a slot is told "busy, try again" (429). ldap3's own connect and receive timeouts end the
  worker thread itself; the slot is freed only when it has ended, so abandoned work cannot pile up.
- Failed logins are throttled per (user, client), per address and per user (429 with the time to wait). A client
  is a browser holding a signed login-device cookie for that user, else its address; the loose per-address and
  per-user rules never hold back a browser the user has logged in from before, so a flood cannot lock them out.
  The address is the proxy's X-Forwarded-For entry when the connection comes from `trusted_proxies`.
- The user's bind checks the password and nothing else; the groups are read as the portal's own identity
  (ldap_search_user, portal.ldap_login), since the directory shows a user only their own entry. A bind refused
  because the directory's password policy locked the account (too many wrong passwords) gets a message of its own.
- A directory that is down or untrusted gives the login page a message (503) instead of a traceback. A dropped
  connection is told apart: the directory is probed with an anonymous bind, and if it answers, the request
  itself was refused (a failed login, 403), not the directory down.
- Every refused login is one line in the hub's log: the user, the client's address and why (wrong user name or
  password, account locked, in no allowed group, blocked, held back, directory busy or unavailable); never the
  password.
- The directory's address, TLS, bind and search settings, allowed groups and timeouts are portal settings, which
  `portal.accounts`' sync reads too: upstream's traits take them from portal.config, and a hub configuration that
  gives one of them (or a spawner trait that is a setting) another value stops the hub at startup (portal.traits).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import secrets
import ssl
from concurrent.futures import ThreadPoolExecutor
from inspect import isawaitable
from operator import attrgetter
from typing import Any

import ldap3
from ldap3 import Tls
from ldap3.core.exceptions import LDAPBindError, LDAPException
from ldapauthenticator import LDAPAuthenticator
from ldapauthenticator.ldapauthenticator import TlsStrategy
from tornado import web
from traitlets import Float, Instance, Integer, List, TraitError, Unicode, default, validate

from portal.config import ConfigError, PortalConfig, load
from portal.directory import DirectoryError, search_password
from portal.errors import Unavailable
from portal.hub_pages import spawn_handlers
from portal.ldap_login import AccountLocked, login
from portal.login_limits import Attempt, LdapBusy, LdapSlots, LoginThrottle, Policy, client_address, is_ip_address
from portal.retry import RetryLater
from portal.traits import class_conflicts, fixed_default, portal_default

DIRECTORY_UNAVAILABLE = (
    "The directory service (LDAP) is unavailable, so nobody can log in right now. "
    "Try again in a few minutes; if it lasts, tell your administrator."
)
LOGIN_BUSY = "The login service is busy (too many logins at once): {retry}."
PASSWORD_TOO_LONG = ("password: at most {limit} bytes (UTF-8) are allowed, and this one is longer, so it was not "
                     "checked. Enter your directory password.")
REQUEST_REFUSED = ("The directory refused this login request (it closed the connection while checking it); the "
                   "directory itself is up. Check the user name and password and try again.")
ACCOUNT_LOCKED = ("This account is locked: too many wrong passwords were tried for it. The directory unlocks it "
                  "by itself after a while; try again later, or ask your administrator to unlock it.")
DEVICE_COOKIE = "dsportal-login-device"
# ldap3's connection modes for each upstream TLS strategy: (use_ssl, auto_bind).
CONNECT_MODES = {
    TlsStrategy.on_connect: (True, ldap3.AUTO_BIND_NO_TLS),
    TlsStrategy.before_bind: (False, ldap3.AUTO_BIND_TLS_BEFORE_BIND),
    TlsStrategy.insecure: (False, ldap3.AUTO_BIND_NO_TLS),
}
TLS_STRATEGIES = {"starttls": TlsStrategy.before_bind, "ldaps": TlsStrategy.on_connect, "none": TlsStrategy.insecure}


class PortalLDAPAuthenticator(LDAPAuthenticator):
    """LDAPAuthenticator configured from portal.config, verifying TLS and reporting every group."""

    portal = Instance(PortalConfig, help="The portal's settings (portal.config).")

    @default("portal")
    def _portal_default(self) -> PortalConfig:
        return load()

    username_pattern = Unicode(
        r"^[a-z_][a-z0-9_-]{0,31}$", config=True,
        help="Login names must match this after trimming and lower-casing: a safe Unix user name.",
    )

    max_password_bytes = Integer(
        1024, config=True,
        help="Longest password (bytes of UTF-8) sent to the directory; a longer one is a failed login with its own "
             "message. slapd drops the connection on very large binds (256 KiB for anonymous sessions).",
    )
    ldap_concurrency = Integer(4, config=True, help="Directory operations (logins) running at once, at most.")
    ldap_concurrency_per_address = Integer(
        2, config=True, help="Directory operations at once for one client address, at most, so that one client "
                             "cannot take every slot.")
    ldap_queue_timeout = Float(
        5.0, config=True, help="Seconds a login waits for a free directory slot before it is told 'busy, try again'.")
    # ldap3's own timeouts, which end the worker thread itself: ldap_timeout's, not settings of their own (the
    # receive timeout takes only whole seconds). Code (the tests) may set them apart from ldap_timeout.
    ldap_connect_timeout = Float(help="Seconds to open a connection to the directory (ldap3 Server connect_timeout).")
    ldap_receive_timeout = Integer(help="Whole seconds to wait for each answer of the directory (ldap3 Connection "
                                        "receive_timeout).")
    failed_login_limit_per_user_client = Integer(
        5, config=True, help="Failed logins for one user from one client (a browser with that user's login-device "
                             "cookie, else an address) before that pair is held back.")
    failed_login_limit_per_address = Integer(
        50, config=True, help="Failed logins from one address (any user, browsers with a device cookie excepted) "
                              "before that address is held back.")
    failed_login_limit_per_user = Integer(
        50, config=True, help="Failed logins for one user from all clients without that user's device cookie "
                              "before such clients are held back; browsers the user logged in from before are not.")
    failed_login_delay = Float(
        10.0, config=True, help="Seconds a client is held back at the limit; doubles with each further failure.")
    failed_login_max_delay = Float(900.0, config=True, help="The longest a client is held back, in seconds.")
    failed_login_forget_after = Float(
        900.0, config=True, help="Seconds without a failure (after the hold ends) before failures are forgotten.")
    login_device_days = Integer(
        30, config=True, help="Days a login-device cookie (set on a successful login, path /hub/login only) is "
                              "valid; 0 turns device cookies off.")
    trusted_proxies = List(
        Unicode(), config=True,
        help="Networks whose connections may carry X-Forwarded-For (the configurable-http-proxy in front of the "
             "hub); default: loopback and the hub's own API address. X-Real-Ip is never trusted.")
    proxy_hops = Integer(
        1, config=True, help="Proxies in front of the hub that each append to X-Forwarded-For (1: only CHP).")

    @default("trusted_proxies")
    def _trusted_proxies_default(self) -> list[str]:
        # The proxy reaches the hub on its API address (the box's bridge) or on loopback.
        return ["127.0.0.1/32", "::1/128", *([self.portal.hub_api_address] if is_ip_address(self.portal.hub_api_address)
                                             else [])]

    @validate("trusted_proxies")
    def _check_trusted_proxies(self, proposal):
        for network in proposal["value"]:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise TraitError(f"trusted_proxies: {network[:64]!r} is not an IP address or network "
                                 "(allowed: e.g. 127.0.0.1, 10.0.0.0/8, ::1)") from None
        return proposal["value"]

    @default("valid_username_regex")
    def _valid_username_regex_default(self) -> str:
        return self.username_pattern

    # The traits that are portal settings (portal.traits): their values come from portal.config, which
    # portal.accounts' sync reads too; a different value in the hub's configuration stops the hub (__init__).
    _server_address_default = portal_default("server_address", "ldap_host")
    _server_port_default = portal_default("server_port", "ldap_port", "ldaps_port", "ldap_tls",
                                          read=attrgetter("ldap_server_port"))
    _tls_strategy_default = portal_default("tls_strategy", "ldap_tls", read=lambda cfg: TLS_STRATEGIES[cfg.ldap_tls])
    _use_ssl_default = portal_default("use_ssl", "ldap_tls", read=lambda cfg: cfg.ldap_tls == "ldaps")  # deprecated
    # ldap3 reads the CA file whenever it is named, TLS or not: none is named without TLS
    _tls_kwargs_default = portal_default("tls_kwargs", "ldap_ca_file", "ldap_tls", read=lambda cfg: {} if (
        cfg.ldap_tls == "none") else {"ca_certs_file": str(cfg.ca_file), "validate": ssl.CERT_REQUIRED})
    _bind_dn_template_default = portal_default("bind_dn_template", "ldap_bind_dn_template", "ldap_lookup_dn", read=(
        lambda cfg: [] if cfg.ldap_lookup_dn else [cfg.ldap_bind_dn_template]))
    _lookup_dn_default = portal_default("lookup_dn", "ldap_lookup_dn")
    _user_search_base_default = portal_default("user_search_base", "ldap_user_search_base")
    _user_attribute_default = portal_default("user_attribute", "ldap_user_attribute")
    _search_user_default = portal_default("lookup_dn_search_user", "ldap_search_user")
    _search_password_default = portal_default("lookup_dn_search_password", "ldap_search_password",
                                              "ldap_search_password_file", "ldap_search_user", read=search_password)
    _allowed_groups_default = portal_default("allowed_groups", "allowed_groups", "ldap_group_search_base", read=(
        lambda cfg: [cfg.group_dn(g) for g in cfg.allowed_groups]))
    _connect_timeout_default = portal_default("ldap_connect_timeout", "ldap_timeout",
                                              read=lambda cfg: float(cfg.ldap_timeout))
    _receive_timeout_default = portal_default("ldap_receive_timeout", "ldap_timeout",
                                              read=lambda cfg: max(1, int(cfg.ldap_timeout)))

    _manage_groups_default = fixed_default("manage_groups", True)

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._refuse_second_values()

    def _refuse_second_values(self) -> None:
        """The hub makes its authenticator once, at startup (a spawner only when a server starts): so this is where
        the hub's configuration is held against portal.config, for this class and the hub's spawner class. A trait
        given another value than its setting's stops the hub, naming both (portal.traits)."""
        spawner_class = getattr(self.parent, "spawner_class", None)
        classes = [type(self), *([spawner_class] if isinstance(spawner_class, type) else [])]
        problems = [problem for cls in classes for problem in class_conflicts(self.config, cls, self.portal)]
        for problem in problems:
            self.log.error("%s", problem)
        if problems:
            raise ConfigError("\n".join(problems))

    @validate("allow_all")
    def _refuse_allow_all(self, proposal):
        if proposal["value"]:
            raise TraitError("allow_all would let every directory user in and ignore allowed_groups; "
                             "list the groups that may log in in allowed_groups instead")
        return proposal["value"]

    @validate("tls_kwargs")
    def _require_verification(self, proposal):
        if self.portal.ldap_tls != "none" and proposal["value"].get("validate", ssl.CERT_NONE) == ssl.CERT_NONE:
            raise TraitError("tls_kwargs must verify the directory's certificate (validate=ssl.CERT_REQUIRED); "
                             "set ldap_tls=none to talk to a directory without TLS at all")
        return proposal["value"]

    def get_handlers(self, app) -> list:
        """The login page, and the spawn page decoding its input strictly (portal.hub_pages): the hub adds the
        authenticator's routes before its own, so these take the place of its SpawnHandler."""
        return [*super().get_handlers(app), *spawn_handlers()]

    def normalize_username(self, username: str) -> str:
        return username.strip().lower()

    def _limits(self) -> tuple[LoginThrottle, LdapSlots, ThreadPoolExecutor]:
        if not hasattr(self, "_login_limits"):
            policy = {"base_delay": self.failed_login_delay, "max_delay": self.failed_login_max_delay,
                      "forget_after": self.failed_login_forget_after}
            throttle = LoginThrottle(pair=Policy(self.failed_login_limit_per_user_client, **policy),
                                     address=Policy(self.failed_login_limit_per_address, **policy),
                                     user=Policy(self.failed_login_limit_per_user, **policy))
            slots = LdapSlots(self.ldap_concurrency, self.ldap_concurrency_per_address, self.ldap_queue_timeout)
            # A pool of its own: LDAP threads never take the hub's default executor from everything else.
            pool = ThreadPoolExecutor(self.ldap_concurrency, thread_name_prefix="ldap")
            self._login_limits = (throttle, slots, pool)
        return self._login_limits

    async def authenticate(self, handler, data):
        username = self.normalize_username(data.get("username") or "")
        password = data.get("password") or ""
        valid_name = bool(re.match(self.username_pattern, username))
        attempt = Attempt(username if valid_name else None, self._address(handler),
                          self._device(handler, username) if valid_name else None)
        throttle, _, _ = self._limits()
        refusal = throttle.check(attempt)
        if refusal:
            self._refused(attempt, "held back by the %s rule for %d s (too many failed logins)", refusal.rule,
                          refusal.retry_after, name=username)
            raise RetryLater(refusal.retry_after).http_error(refusal.message)
        try:
            result = await self._check_password(attempt, password, name=username)
            if result is not None and not await self._may_log_in(attempt, result):
                result = None
        except web.HTTPError as err:
            if err.status_code == 403:
                throttle.failed(attempt)
            raise
        if result is None:
            throttle.failed(attempt)
            return None
        throttle.succeeded(attempt)
        self._issue_device(handler, username)
        groups = result["auth_state"]["user_attributes"].pop("portal_groups", [])
        result["groups"] = groups
        result["admin"] = self.portal.is_admin(groups)
        return result

    def _refused(self, attempt: Attempt, reason: str, *args: Any, name: str = "") -> None:
        """The one log line of a refused login: who, from where, why (never the password). A name that is not a
        valid user name is shown quoted and cut short: it may be anything a client sent."""
        user = attempt.user or repr(name[:64])
        self.log.warning("Login refused for %s from %s: " + reason, user, attempt.address, *args)

    async def _may_log_in(self, attempt: Attempt, result: dict) -> bool:
        """The hub's own checks (blocked_users; allowed_groups or allowed_users), made here too so that a refusal
        is logged with its reason and the client; the hub makes them again after."""
        blocked = self.check_blocked_users(attempt.user, result)
        if not (await blocked if isawaitable(blocked) else blocked):
            self._refused(attempt, "in blocked_users")
            return False
        allowed = self.check_allowed(attempt.user, result)
        if not (await allowed if isawaitable(allowed) else allowed):
            self._refused(attempt, "in none of the allowed groups (%s)", ", ".join(self.portal.allowed_groups))
            return False
        return True

    async def _check_password(self, attempt: Attempt, password: str, name: str = "") -> dict | None:
        """The caps, then the directory: None for a failed login; HTTPError for one with a message of its own."""
        if attempt.user is None:
            self._refused(attempt, "not a valid user name", name=name)
            return None
        if not password.strip():
            self._refused(attempt, "empty password")
            return None
        if len(password.encode("utf-8", "surrogatepass")) > self.max_password_bytes:
            self._refused(attempt, "password of %d characters, over max_password_bytes", len(password))
            raise web.HTTPError(403, PASSWORD_TOO_LONG.format(limit=self.max_password_bytes))
        result = await self._in_worker(attempt, password)
        if result is None:
            self._refused(attempt, "wrong user name or password (the directory refused them)")
        return result

    async def _in_worker(self, attempt: Attempt, password: str) -> dict | None:
        """Upstream's (blocking) bind and searches in the LDAP pool, holding a slot until the thread has ended."""
        _, slots, pool = self._limits()
        try:
            await slots.acquire(attempt.address)
        except LdapBusy as err:
            self._refused(attempt, "directory busy: %s", err)
            # As long again as it waited for a slot: the logins holding them end within their timeouts.
            later = RetryLater.after(self.ldap_queue_timeout)
            raise later.http_error(LOGIN_BUSY.format(retry=later.text)) from None
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(pool, self._bind_and_read, attempt.user, password)
        # The thread may outlive the deadline below (up to a few receive timeouts): its slot waits for it.
        work.add_done_callback(lambda done: (slots.release(attempt.address), done.cancelled() or done.exception()))
        try:
            return await asyncio.wait_for(asyncio.shield(work), timeout=self.portal.ldap_timeout)
        except _RequestDropped as err:
            self._refused(attempt, "the directory dropped the request but answers a probe: %s", err)
            raise web.HTTPError(403, REQUEST_REFUSED) from None
        except AccountLocked:
            self._refused(attempt, "account locked by the directory's password policy (too many wrong passwords)")
            raise web.HTTPError(403, ACCOUNT_LOCKED) from None
        except (TimeoutError, LDAPException, OSError, DirectoryError) as err:
            self.log.error("Login refused for %s from %s: directory unavailable: LDAP at %s:%s: %s: %s", attempt.user,
                           attempt.address, self.server_address, self.server_port, type(err).__name__, err)
            raise web.HTTPError(503, DIRECTORY_UNAVAILABLE) from None

    def _bind_and_read(self, username: str, password: str) -> dict | None:
        """In a worker thread: the login in two binds (portal.ldap_login); a failure of the connection is the
        request's own fault when the directory still answers an anonymous bind."""
        try:
            return login(self, username, password, self._server(), self.ldap_receive_timeout,
                         self.portal.ldap_group_search_base)
        except (LDAPException, OSError) as err:
            if self._directory_answers():
                raise _RequestDropped(f"{type(err).__name__}: {err}") from err
            raise

    def _directory_answers(self) -> bool:
        try:
            conn = self.get_connection(None, None)  # anonymous, over the same TLS
        except (LDAPException, OSError):
            return False
        if conn:
            conn.unbind()
        return True  # a refused anonymous bind is an answer too

    def _server(self) -> ldap3.Server:
        use_ssl, _ = CONNECT_MODES[self.tls_strategy]
        return ldap3.Server(self.server_address, port=self.server_port, use_ssl=use_ssl, tls=Tls(**self.tls_kwargs),
                            connect_timeout=self.ldap_connect_timeout)

    def get_connection(self, userdn: str | None, password: str | None) -> ldap3.Connection | None:
        """Upstream's, with ldap3's own timeouts, so that a worker thread ends instead of waiting forever."""
        _, auto_bind = CONNECT_MODES[self.tls_strategy]
        try:
            return ldap3.Connection(self._server(), user=userdn, password=password, auto_bind=auto_bind,
                                    receive_timeout=self.ldap_receive_timeout)
        except LDAPBindError:
            return None

    def _address(self, handler) -> str:
        if handler is None:
            return "local"
        peer = getattr(getattr(handler.request.connection, "context", None), "address", None)
        peer_ip = peer[0] if isinstance(peer, tuple) and peer else None
        trusted = [ipaddress.ip_network(net, strict=False) for net in self.trusted_proxies]
        return client_address(peer_ip, handler.request.headers.get("X-Forwarded-For"), trusted, self.proxy_hops)

    def _device(self, handler, username: str) -> str | None:
        """The id of this browser's login-device cookie if it was issued to this user (signed with the hub's
        cookie secret), else None."""
        if handler is None or not self.login_device_days:
            return None
        value = handler.get_signed_cookie(DEVICE_COOKIE, max_age_days=self.login_device_days)
        user, _, device = (value or b"").decode("ascii", "replace").partition(":")
        return device if user == username and device else None

    def _issue_device(self, handler, username: str) -> None:
        if handler is None or not self.login_device_days:
            return
        handler.set_signed_cookie(DEVICE_COOKIE, f"{username}:{secrets.token_urlsafe(12)}",
                                  expires_days=self.login_device_days, path=handler.settings["login_url"],
                                  httponly=True, samesite="Strict", secure=handler.request.protocol == "https")


class _RequestDropped(Unavailable):
    """The directory closed the connection on one request but answers others: the request's fault."""
