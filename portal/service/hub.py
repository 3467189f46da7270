"""What the dashboard asks the hub: a user's groups, admin flag and server, and (for admins) every user.

The OAuth identity alone does not carry groups or the admin flag, so the service asks with its own token (its
role grants read:users, read:users:groups, read:servers, list:users). Answers are kept for the refresh interval,
and concurrent requests for the same answer share one call to the hub.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from portal.service.board import HubUser

PAGE = 200  # the hub's api_page_max_limit (default): a longer list comes in pages


class HubUnavailable(RuntimeError):
    """The hub's API did not answer as expected; the message says what was asked."""


class HubDirectory:
    def __init__(self, api_url: str | None = None, token: str | None = None, ttl_s: float = 2.0):
        self.api_url = (api_url or os.environ.get("JUPYTERHUB_API_URL", "")).rstrip("/")
        self.token = token or os.environ.get("JUPYTERHUB_API_TOKEN", "")
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, object]] = {}
        self._asking: dict[str, asyncio.Future] = {}
        self.calls = 0  # requests actually sent to the hub

    async def _get(self, path: str) -> object:
        hit = self._cache.get(path)
        if hit and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1]
        if path in self._asking:  # someone asks already: wait for their answer
            return await asyncio.shield(self._asking[path])
        asking = self._asking[path] = asyncio.get_running_loop().create_future()
        try:
            data = await self._fetch(path)
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
            del self._asking[path]

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
        data = json.loads(response.body)
        self._cache[path] = (time.monotonic(), data)
        return data

    async def user(self, name: str) -> HubUser:
        return HubUser.from_model(await self._get(f"users/{quote(name, safe='')}"))

    async def everyone(self) -> list[HubUser]:
        models: list = []
        while True:
            page = await self._get(f"users?offset={len(models)}&limit={PAGE}")
            models.extend(page)
            if len(page) < PAGE:
                return [HubUser.from_model(m) for m in models]
