"""What the dashboard asks the hub: a user's groups, admin flag and server, and (for admins) every user.

The OAuth identity alone does not carry groups or the admin flag, so the service asks with its own token (its role
grants read:users, read:users:groups, read:servers, list:users; and delete:servers, for the GPU watch's stops). It
asks for every user at once (the roster, paged) at most every ROSTER_S, for all requests together: a page view
asking `users/<name>` for itself cost the hub one request per view, 200 a second for 1,000 users refreshing every 5
s, more than the hub's one process answers (its queue timed out); and the hub spends about 2 ms per user model, so a
roster of 1,000 every 2 s would take a core of its own. Groups and the admin flag therefore reach the dashboard
within ROSTER_S (the hub's own HubAuth keeps a token's identity for 300 s). A roster past its age is still served
for STALE_GRACE_S while a fresh one is fetched in the background, so no page waits for it; older than that, or never
fetched, requests wait for the fetch (shared) and a hub that does not answer is a HubUnavailable. A user made after
the last roster, and `fresh` asks (a server's state on a job's page), are asked for by name and kept for the refresh
interval.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from portal.errors import Unavailable
from portal.service.hub_user import HubUser

T = TypeVar("T")
PAGE = 200  # the hub's api_page_max_limit (default): a longer list comes in pages
ROSTER_S = 30.0  # how long the roster of every user serves
STALE_GRACE_S = 10.0  # how long past its age the roster is served while a fresh one is fetched
log = logging.getLogger("portal.service")


class HubUnavailable(Unavailable, RuntimeError):
    """The hub's API did not answer as expected; the message says what was asked."""

    def user_message(self) -> str:
        return f"JupyterHub is unavailable: {self}"


class HubDirectory:
    def __init__(self, api_url: str | None = None, token: str | None = None, ttl_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, roster_s: float = ROSTER_S):
        if not api_url:
            api_url = os.environ.get("JUPYTERHUB_API_URL", "")
        if not token:
            token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        self.api_url, self.token = api_url.rstrip("/"), token
        self.ttl_s, self._clock, self.roster_s = ttl_s, clock, max(roster_s, ttl_s)
        self._cache: dict[str, tuple[float, object]] = {}
        self._asking: dict[str, asyncio.Future] = {}
        self._roster: tuple[float, dict[str, dict]] | None = None  # (asked at, name -> the hub's user model)
        self._refreshing: asyncio.Future | None = None
        self.calls = 0  # requests actually sent to the hub

    async def _shared(self, key: str, fetch: Callable[[], Awaitable[T]]) -> T:
        """fetch()'s answer; concurrent asks for the same key wait for the first one's answer (or error)."""
        if key in self._asking:
            return await asyncio.shield(self._asking[key])
        asking = self._asking[key] = asyncio.get_running_loop().create_future()
        try:
            data = await fetch()
        except asyncio.CancelledError:
            asking.cancel()
            raise
        except Exception as err:
            asking.set_exception(err)
            asking.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        else:
            asking.set_result(data)
            return data
        finally:
            del self._asking[key]

    async def _get(self, path: str) -> object:
        """One answer of the hub's, kept for the interval."""
        hit = self._cache.get(path)
        if hit and self._clock() - hit[0] < self.ttl_s:
            return hit[1]
        asked_at = self._clock()
        data = await self._shared(path, lambda: self._fetch(path))
        self._cache[path] = (asked_at, data)
        return data

    async def _fetch(self, path: str) -> object:
        self.calls += 1
        request = HTTPRequest(f"{self.api_url}/{path}", headers={"Authorization": f"token {self.token}"},
                              request_timeout=10)
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as err:
            raise HubUnavailable(f"the hub answered GET {path} with {err.code}") from None
        except OSError as err:
            raise HubUnavailable(f"the hub's API is unreachable: {err}") from None
        return json.loads(response.body)

    async def _fetch_roster(self) -> dict[str, dict]:
        asked_at = self._clock()  # the roster is as old as the moment it was asked for
        models: list = []
        while True:
            path = f"users?offset={len(models)}&limit={PAGE}"
            page = await self._fetch(path)
            if not isinstance(page, list):
                raise HubUnavailable(f"the hub answered GET {path} with no list of users")
            models.extend(page)
            if len(page) < PAGE:
                break
        roster = {str(m["name"]): m for m in models}
        self._roster = (asked_at, roster)
        return roster

    def _refresh_in_background(self) -> None:
        if self._refreshing is not None and not self._refreshing.done():
            return
        self._refreshing = asyncio.ensure_future(self._shared("roster", self._fetch_roster))
        self._refreshing.add_done_callback(_log_failure)

    async def roster(self) -> dict[str, dict]:
        """Every hub user's model by name: fresh, or stale by at most STALE_GRACE_S while refreshed (see above)."""
        if self._roster is not None:
            age = self._clock() - self._roster[0]
            if age < self.roster_s:
                return self._roster[1]
            if age < self.roster_s + STALE_GRACE_S:
                self._refresh_in_background()
                return self._roster[1]
        return await self._shared("roster", self._fetch_roster)

    async def user(self, name: str, fresh: bool = False) -> HubUser:
        """The user as the hub says; `fresh`: asked by name, at most a refresh interval old."""
        model = None if fresh else (await self.roster()).get(name)
        if model is None:  # made after the last roster was asked for, or asked for fresh
            path = f"users/{quote(name, safe='')}"
            answer = await self._get(path)
            if not isinstance(answer, dict):
                raise HubUnavailable(f"the hub answered GET {path} with no user model")
            model = answer
        return HubUser.from_model(model)

    async def stop_server(self, name: str) -> None:
        """Stop the user's server, as the hub's own "Stop My Server" does (the GPU watch, past an idle server's
        grace: portal.service.gpu_watch; the service's role has delete:servers)."""
        path = f"users/{quote(name, safe='')}/server"
        request = HTTPRequest(f"{self.api_url}/{path}", method="DELETE", request_timeout=60,
                              headers={"Authorization": f"token {self.token}"})
        try:
            await AsyncHTTPClient().fetch(request)
        except HTTPClientError as err:
            raise HubUnavailable(f"the hub answered DELETE {path} with {err.code}") from None
        except OSError as err:
            raise HubUnavailable(f"the hub's API is unreachable: {err}") from None

    async def everyone(self) -> list[HubUser]:
        """Every hub user, for an admin's views: at most a refresh interval (ttl_s) old, like every other answer
        an admin sees; a user made a moment ago is listed. Only the page viewers' own lookups take the roster up to
        ROSTER_S old (there are few admins, and each asks at most once per interval for all of them)."""
        if self._roster is None or self._clock() - self._roster[0] >= self.ttl_s:
            roster = await self._shared("roster", self._fetch_roster)
        else:
            roster = self._roster[1]
        return [HubUser.from_model(m) for m in roster.values()]


def _log_failure(refresh: asyncio.Future) -> None:
    """A background refresh has no request to answer: its failure is logged; the next request past the grace
    waits for a fetch of its own and gets the error."""
    if not refresh.cancelled() and refresh.exception() is not None:
        log.warning("refreshing the hub's user list failed: %s", refresh.exception())
