"""What every dashboard handler shares: who is asking (HubOAuth), XSRF, running blocking work, errors."""

from __future__ import annotations

import functools
import json
import logging
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from jupyterhub.utils import get_browser_protocol
from tornado.ioloop import IOLoop
from tornado.web import ErrorHandler, HTTPError, RequestHandler, StaticFileHandler

from portal import errors
from portal.inputs import MAX_BODY_BYTES, one_line
from portal.retry import RetryLater
from portal.scheduler.snapshot import ClusterCache
from portal.service.board import JobBoard
from portal.service.fairness import read_key
from portal.service.headers import SECURITY_HEADERS, content_security_policy, new_nonce, strict_transport_security
from portal.service.hub import HubDirectory
from portal.service.hub_user import HubUser
from portal.service.oauth import PortalOAuth
from portal.service.render import hub_namespace

T = TypeVar("T")
log = logging.getLogger("portal.service")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
COOKIE_SAMESITE = "Lax"  # Strict would drop the OAuth cookies on the redirect back from the hub's login
LOGIN_REFUSED = "log in to JupyterHub, or send Authorization: token <your API token>"
SERVICE_REFUSED = "a hub service's token reads the metrics alone (docs/operations.md); the pages and the API are users'"
XSRF_REFUSED_PAGE = "the form's XSRF token (_xsrf) is missing or does not match your session; reload the page " \
                    "and submit again"
XSRF_REFUSED_API = "the request's XSRF token (the _xsrf argument or the X-XSRFToken header) is missing or does not " \
                   "match the _xsrf cookie; send it with cookie requests, or use Authorization: token <API token>"


class SecurityHeaders(RequestHandler):
    """Security headers on every response (tornado sets default headers again for errors: a fresh nonce then, which
    the error page renders with) and SameSite, HttpOnly and, behind https, Secure on every cookie this service sets
    (OAuth state and token, _xsrf). What they say and why: portal.service.headers."""

    is_api = False
    csp_nonce: str | None = None  # this response's: the pages' templates put it on their inline <script>/<style>

    def set_default_headers(self) -> None:
        super().set_default_headers()
        hub_base_url = self.settings.get("hub_base_url", "/")
        self.csp_nonce = None if self.is_api else new_nonce()
        self.set_header("Content-Security-Policy", content_security_policy(hub_base_url, self.csp_nonce))
        for name, value in SECURITY_HEADERS.items():
            self.set_header(name, value)
        hsts = strict_transport_security(get_browser_protocol(self.request))
        if hsts:
            self.set_header("Strict-Transport-Security", hsts)

    # tornado names each cookie option as a parameter; they pass through **kwargs here, defaults filled in.
    def set_cookie(self, name: str, value: str | bytes, **kwargs: Any) -> None:  # type: ignore[override]
        kwargs.setdefault("samesite", COOKIE_SAMESITE)
        kwargs.setdefault("httponly", True)  # pages take the XSRF token from the page, never from the cookie
        if get_browser_protocol(self.request) == "https":  # as the proxy saw it (X-Forwarded-Proto)
            kwargs.setdefault("secure", True)
        super().set_cookie(name, value, **kwargs)

    def send_error(self, status_code: int = 500, **kwargs: Any) -> None:
        """What a handler raised, answered: one of the portal's errors (or a timeout) with its status and words
        (as_portal_error, the one mapping), anything else as tornado does (a bug: 500, never its words)."""
        raised = kwargs.get("exc_info", (None, None, None))[1]
        mapped = as_portal_error(raised) if isinstance(raised, Exception) else None
        if mapped is not None:
            kwargs["exc_info"] = (UserError, mapped, None)
            status_code = mapped.status_code
        super().send_error(status_code, **kwargs)

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """A refused or failed request is one line: who asked what, the status and why (a warning from 500 up, as
        the hub logs its own); the portal's errors are answers, not bugs, so without a traceback. A bug keeps
        tornado's (its traceback, at error)."""
        answered = value if isinstance(value, UserError) else \
            as_portal_error(value) if isinstance(value, Exception) else None
        if answered is None:
            super().log_exception(typ, value, tb)
            return
        user = getattr(getattr(self, "hub_user", None), "name", None) or "(not logged in)"
        log.log(logging.WARNING if answered.status_code >= 500 else logging.INFO, "%s %s for %s: %d %s",
                self.request.method, self.request.path, user, answered.status_code, one_line(answered.message))

    def error_parts(self, kwargs: dict) -> tuple[str, str | None]:
        error = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(error, UserError):
            for name, value in error.headers.items():  # after send_error's clear()
                self.set_header(name, value)
            return error.message, error.field
        if isinstance(error, HTTPError) and error.log_message:
            return error.log_message, None
        return self._reason, None  # never a traceback


class StaticFiles(SecurityHeaders, StaticFileHandler):
    """The portal's stylesheet and script, with the headers."""


class OAuthCallbackHandler(HubOAuthCallbackHandler, SecurityHeaders):
    """The end of the hub's OAuth login, which sets the login cookie: with the headers and the cookie policy."""

    hub_auth_class = PortalOAuth


class UserError(HTTPError):
    """An error a user sees: status, a message, and the field it is about (for a spec that is not allowed).
    What the portal's errors (portal.errors) become: user_error, as_portal_error."""

    def __init__(self, status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(status, reason=None)
        self.message, self.field, self.headers = message, field, headers or {}


def user_error(err: errors.PortalError) -> UserError:
    """The user-facing error for one of the portal's errors: its status, words and field as portal.errors says (the
    one mapping to HTTP), with a Retry-After where it says when to ask again."""
    status, message, field = err.http_status, err.user_message(), err.field
    if err.retry_after_s is not None:
        later = RetryLater(err.retry_after_s)
        return UserError(status, f"{message}; {later.text}", field, headers=later.headers)
    return UserError(status, message, field)


def as_portal_error(err: Exception) -> UserError | None:
    """The user-facing error for what portal.jobs, the scheduler or the hub raised; None for a bug (logged, 500)."""
    if isinstance(err, errors.PortalError):
        return user_error(err)
    if isinstance(err, subprocess.TimeoutExpired):
        return UserError(503, "the scheduler or the file system did not answer in time; try again shortly")
    return None


class PortalHandler(HubOAuthenticated, SecurityHeaders):
    """Base of pages and API: the hub user (with groups and admin flag) is `self.hub_user` after `prepare`."""

    hub_user: HubUser
    hub_auth_class = PortalOAuth  # a state cookie of its own for every login (portal.service.oauth)
    checks_own_body = False  # a form that shows a body over the limit beside its fields (the submit form)

    @property
    def board(self) -> JobBoard:
        return self.settings["board"]

    @property
    def cluster(self) -> ClusterCache:
        return self.settings["cluster"]

    @property
    def directory(self) -> HubDirectory:
        return self.settings["directory"]

    @property
    def executor(self) -> ThreadPoolExecutor:
        return self.settings["executor"]

    async def prepare(self) -> None:
        if len(self.request.body or b"") > MAX_BODY_BYTES and not self.checks_own_body:  # no call takes more
            raise UserError(413, f"the request's body is {len(self.request.body)} bytes; allowed: at most "
                                 f"{MAX_BODY_BYTES}", "body")
        identity = await self.identify()  # the cookie or the token, checked with the hub
        if not identity:
            if self.request.method not in SAFE_METHODS and self.login_cookie_sent():
                self.check_form_token()  # HubOAuth ignores a login cookie without its token: say that, not "log in"
            if self.is_api or self.request.method not in SAFE_METHODS:
                raise UserError(403, LOGIN_REFUSED)
            self.redirect(self.get_login_url())
            return
        if identity.get("kind") == "service":  # a hub service's token (a site's Prometheus) is never a user's
            raise UserError(403, SERVICE_REFUSED)
        # After identifying: token requests are exempt (HubOAuth marks them), cookie requests need _xsrf.
        if self.request.method not in SAFE_METHODS:
            self.check_form_token()
        # A request that acts (a submit, a cancel) is decided on the hub's word now: a group just given or taken (the
        # quota, the weekly budget) counts at once, not after the roster's age. HubUnavailable: a 503, by send_error.
        self.hub_user = await self.directory.user(identity["name"], fresh=self.request.method not in SAFE_METHODS)

    async def identify(self) -> dict | None:
        """HubOAuth's identity, asked without blocking the service. HubAuthenticated's own get_current_user waits
        for the hub's answer on the event loop (its sync path hands the lookup to one background thread and
        blocks on it), so every token its cache did not know yet held up every request in flight: 1,000 users'
        first page views queued one hub round trip after the other. Kept where get_current_user finds it."""
        user_model = await self.hub_auth.get_user(self, sync=False)
        identity = None
        if user_model:
            try:
                identity = self.check_hub_user(user_model)
            except UserNotAllowed:
                identity = None
        self._hub_auth_user_cache = identity
        self.current_user = identity
        return identity

    async def server_ready(self) -> bool:
        """Whether the user's own server runs now: asked fresh (the roster that identified them may be
        portal.service.hub.ROSTER_S old; a server starts in seconds)."""
        return (await self.directory.user(self.hub_user.name, fresh=True)).server_ready

    _identifying = False

    def get_current_user(self) -> dict | None:
        """HubOAuth's identity, made safe to re-enter: for a cookie POST whose _xsrf does not match, its XSRF
        check sets a fresh _xsrf cookie, which asks `current_user` again from inside the first lookup, on the
        one thread HubAuth runs lookups on: the service hung for good (JupyterHub 6.1.1). The inner question is
        answered "nobody yet", which only shortens that cookie's life; the request is refused all the same."""
        if self._identifying:
            return None
        self._identifying = True
        try:
            return super().get_current_user()
        finally:
            self._identifying = False

    def login_cookie_sent(self) -> bool:
        """Whether the request carries this service's login cookie (valid or not: the hub decides that)."""
        return bool(self.hub_auth._get_token_cookie(self))

    def check_form_token(self) -> None:
        """The XSRF check of a cookie request (token requests pass), refused with what to do about it."""
        try:
            self.check_xsrf_cookie()
        except HTTPError:
            raise UserError(403, XSRF_REFUSED_API if self.is_api else XSRF_REFUSED_PAGE, "_xsrf") from None

    async def everyone(self) -> list[HubUser]:
        """Every hub user, only for an admin (whose lists and lookups span users)."""
        return await self.directory.everyone() if self.hub_user.admin else []

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call (Slurm, files read as the user) in the pool, within the user's share of it (the
        same read asked again while it runs is joined: portal.service.fairness); map its errors to what users
        see."""
        call = functools.partial(fn, *args, **kwargs)
        return await self.settings["read_shares"].run(self._share_name(), lambda: self._in_pool(self.executor, call),
                                                      key=read_key(fn, args, kwargs))

    async def acting(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`blocking` for a submit or cancel (and the submit form's limits): in the actions' own pool, so that a
        burst of them never holds up page views (portal.service.app.ACTION_WORKERS); never joined."""
        call = functools.partial(fn, *args, **kwargs)
        return await self.settings["action_shares"].run(
            self._share_name(), lambda: self._in_pool(self.settings["action_executor"], call))

    def _share_name(self) -> str:
        user = getattr(self, "hub_user", None)
        return user.name if user is not None else ""

    async def _in_pool(self, pool: ThreadPoolExecutor, call: Callable[[], T]) -> T:
        """`call` in `pool`; what it raises is raised as it is (a handler may catch the portal's errors; what it does
        not catch is answered by send_error)."""
        return await IOLoop.current().run_in_executor(pool, call)

class APIHandler(PortalHandler):
    is_api = True

    async def prepare(self) -> None:
        """The user's request rate first (a token bucket per user: portal.service.fairness.RateLimits): beyond it
        429 with Retry-After, before any work."""
        await super().prepare()
        if getattr(self, "hub_user", None) is None:
            return
        limits = self.settings["rate_limits"]
        wait_s = limits.take(self.hub_user.name)
        if wait_s:
            later = RetryLater.after(wait_s)  # the text's seconds are the header's
            raise UserError(429, f"too many requests from {self.hub_user.name}: at most {limits.rate:g} a second "
                                 f"({limits.burst} at once); {later.text}", headers=later.headers)

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        message, field = self.error_parts(kwargs)
        body = {"error": message}
        if field:
            body["field"] = field
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))


class PageRendering(SecurityHeaders):
    """Pages and their errors: Jinja2 templates on the hub's page.html (portal.service.render)."""

    def render_page(self, name: str, http_status: int | None = None, **values: Any) -> None:
        user = getattr(self, "hub_user", None)
        settings = self.settings
        namespace = hub_namespace(settings["hub_base_url"], settings["hub_static_url"], user,
                                  self.xsrf_token.decode("ascii"), self.xsrf_form_html())
        pace = settings["pace"]
        if user is not None:
            pace.seen(user.name)
        poll_s = pace.poll_s()
        self.set_header("X-Poll-S", f"{poll_s:g}")  # an open page's script follows it (portal.service.pace)
        namespace.update(portal_url=settings["service_prefix"], root_url=settings["hub_base_url"],
                         portal_static=self.static_url, csp_nonce=self.csp_nonce,
                         poll_s=f"{poll_s:g}", page=name.removesuffix(".html"), **values)
        if http_status is not None:
            self.set_status(http_status)
        shown = values.get("error")
        if isinstance(shown, UserError):  # an error shown in a page (the submit form's 429): its Retry-After too
            for header, value in shown.headers.items():
                self.set_header(header, value)
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.finish(settings["pages"].get_template(name).render(namespace))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        message, field = self.error_parts(kwargs)
        self.render_page("error.html", status=status_code, message=message, field=field)


class PageHandler(PortalHandler, PageRendering):
    """A page for the logged-in user."""


class NotFoundHandler(PageRendering, ErrorHandler):
    """Paths under the service prefix that name no page: the portal's 404 page (no login needed), with the
    headers."""
