"""One small client of a JupyterHub, as a browser or a script drives it: the login form and its XSRF token, the REST
API, API tokens, the spawn form, the progress stream, and waiting until something is ready.

The tests (tests/conftest.py's `Hub`) and the benchmarks use it; nothing in the product does.
"""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Callable
from typing import Any

import requests

XSRF_FIELD = re.compile(r'name="_xsrf" value="([^"]+)"')
SPAWN_FORM_ACTION = re.compile(r'<form[^>]*id="spawn_form"[^>]*action="([^"]+)"')


class HubError(RuntimeError):
    """The hub answered, but not as a working hub does (a login refused, a spawn that failed)."""


class NotYet(Exception):
    """An answer that is not (yet) what a wait asks for: a predicate may raise it to say why, and the wait names it
    when it times out."""


# What a wait counts as "not yet", never as its end: a question that could not be asked (a refused connection, a
# read timeout while a server restarts), an answer that is not a success (an error status: raise_for_status's
# HTTPError; a proxy's plain "Service Unavailable" where JSON was asked: requests' JSONDecodeError) and a body
# without the part asked for (KeyError, TypeError on None, IndexError) while a restarted service catches up. A
# predicate that must end the wait at once raises something else (AssertionError, HubError).
NOT_YET: tuple[type[BaseException], ...] = (NotYet, requests.RequestException, OSError, ValueError, LookupError,
                                            TypeError)
try:  # the Kubernetes client's errors, where it is installed (the venv's [k8s] extra): its API and its transport
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as TransportError
    NOT_YET += (ApiException, TransportError)
except ImportError:  # pragma: no cover - a venv without the Kubernetes client
    pass


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.5, what: str = "condition") -> Any:
    """predicate()'s first true value, asked every `interval` s; TimeoutError naming `what` after `timeout` s.

    Any non-success (NOT_YET: transport, status, body) counts as false until the deadline, and the last one is
    named in the TimeoutError."""
    deadline = time.monotonic() + timeout
    unasked = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except NOT_YET as err:
            value, unasked = None, err
        if value:
            return value
        time.sleep(interval)
    last = f" (its last answer was not a success: {type(unasked).__name__}: {unasked})" if unasked else ""
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{last}")


def xsrf_of(page: str) -> str:
    """The _xsrf token a hub page's form carries."""
    found = XSRF_FIELD.search(page)
    if not found:
        raise HubError(f"no _xsrf field in the page: {page[-300:]!r}")
    return found.group(1)


def wait_until_up(url: str, timeout: float, alive: Callable[[], bool] = lambda: True) -> None:
    """Wait until the hub at `url` answers its API root; `alive()` false (its process exited) stops the wait."""
    def up() -> bool:
        if not alive():
            raise HubError(f"{url}: the hub exited while starting")
        try:
            return requests.get(f"{url}/hub/api/", timeout=2).ok
        except requests.ConnectionError:
            return False
    wait_for(up, timeout, interval=0.2, what=f"the hub at {url} to answer")


def trusting(session: requests.Session, ca: str) -> requests.Session:
    """The session checks the hub's certificate against `ca`. Not from the environment: requests lets
    REQUESTS_CA_BUNDLE (set on many machines, this one too) win over a session's own `verify`."""
    session.verify, session.trust_env = ca, False
    return session


class HubClient:
    """One cookie session (one user) with one hub."""

    def __init__(self, url: str, session: requests.Session | None = None, ca: str | None = None):
        """`ca`: the CA file that signs an https hub's certificate (None: the system's)."""
        self.url, self.session, self.ca = url, session or requests.Session(), ca
        if ca:
            trusting(self.session, ca)

    def login_xsrf(self) -> str:
        page = self.session.get(f"{self.url}/hub/login", timeout=10)
        page.raise_for_status()
        return xsrf_of(page.text)

    def post_login(self, username: str, password: str) -> requests.Response:
        """The login form's POST, as a browser sends it; the hub's answer (302 when it let the user in)."""
        return self.session.post(f"{self.url}/hub/login?next=", allow_redirects=False, timeout=30,
                                 data={"username": username, "password": password, "_xsrf": self.login_xsrf()})

    def login(self, username: str, password: str) -> HubClient:
        answer = self.post_login(username, password)
        if answer.status_code != 302:
            raise HubError(f"{self.url}: {username} could not log in ({answer.status_code})")
        # The hub's API takes the _xsrf cookie back as a header from a cookie session.
        self.session.headers["X-XSRFToken"] = self.session.cookies.get("_xsrf", path="/hub/")
        return self

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 30)
        return self.session.request(method, f"{self.url}/hub/api/{path}", **kwargs)

    def new_token(self, username: str, note: str, expires_in: int | None = None) -> str:
        """A new API token of `username` (this session's user, or any user's when it is an admin's)."""
        body: dict[str, Any] = {"note": note}
        if expires_in:
            body["expires_in"] = expires_in
        answer = self.api("POST", f"users/{username}/tokens", json=body)
        if answer.status_code != 201:
            raise HubError(f"{self.url}: no token for {username}: {answer.status_code} {answer.text[-300:]}")
        return answer.json()["token"]

    def token_session(self, username: str, note: str) -> requests.Session:
        """A plain API client (no cookies) carrying a new API token of `username`."""
        client = requests.Session()
        if self.ca:
            trusting(client, ca=self.ca)
        client.headers["Authorization"] = f"token {self.new_token(username, note)}"
        return client

    def spawn_form_action(self) -> str | None:
        """The spawn form's target, or None when the hub offers no form (stock batchspawner, a running server)."""
        page = self.session.get(f"{self.url}/hub/spawn", timeout=30, allow_redirects=False)
        action = SPAWN_FORM_ACTION.search(page.text)
        return html.unescape(action.group(1)) if action else None

    def post_spawn_form(self, action: str, fields: dict[str, Any]) -> requests.Response:
        """Submit the spawn form as a browser does (multipart); the page or redirect the hub answers with."""
        return self.session.post(f"{self.url}{action}", allow_redirects=False, timeout=60,
                                 files={k: (None, str(v)) for k, v in fields.items()})

    def server(self, username: str) -> dict | None:
        """The user's default server as the REST API describes it, or None when there is none."""
        answer = self.api("GET", f"users/{username}")
        answer.raise_for_status()  # an error page is no description of a server: in a wait, a "not yet"
        return answer.json().get("servers", {}).get("")

    def progress_events(self, username: str, timeout: float) -> list[dict[str, Any]]:
        """The progress event stream, as the spawn-pending page reads it, until its last event (ready or failed)."""
        url = f"{self.url}/hub/api/users/{username}/server/progress"
        events = []
        with self.session.get(url, stream=True, timeout=timeout) as stream:
            for line in stream.iter_lines(decode_unicode=True):
                if line and line.startswith("data:"):
                    events.append(json.loads(line[5:]))
                    if events[-1].get("failed") or events[-1].get("ready"):
                        break
        return events

    def follow_progress(self, username: str, timeout: float) -> None:
        """Follow the progress event stream until it says ready."""
        events = self.progress_events(username, timeout)
        if events and events[-1].get("failed"):
            raise HubError(f"{self.url}: the spawn failed: {events[-1].get('message')}")
        if not (events and events[-1].get("ready")):
            raise HubError(f"{self.url}: the progress stream ended without ready")

    def stop(self, username: str, timeout: float = 60) -> None:
        """Stop the user's server and wait until the hub no longer lists it (400: it was not running)."""
        answer = self.api("DELETE", f"users/{username}/server", timeout=60)
        if answer.status_code not in (202, 204, 400):
            raise HubError(f"{self.url}: stopping {username}'s server: {answer.status_code} {answer.text[-300:]}")
        wait_for(lambda: self.server(username) is None, timeout, what=f"{username}'s server on {self.url} to stop")
