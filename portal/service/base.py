"""What every dashboard handler shares: who is asking (HubOAuth), XSRF, running blocking work, errors."""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from jupyterhub.services.auth import HubOAuthenticated
from tornado.ioloop import IOLoop
from tornado.web import HTTPError, RequestHandler

from portal.jobs import BackendError, JobAccessError, JobNotFound, JobSpecError, KubernetesError, SlurmError
from portal.service.board import HubUser, JobBoard
from portal.service.cluster import ClusterCache
from portal.service.hub import HubDirectory, HubUnavailable

T = TypeVar("T")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class PortalError(HTTPError):
    """An error a user sees: status, a message, and the field it is about (for a spec that is not allowed)."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(status, reason=None)
        self.message, self.field = message, field


def as_portal_error(err: Exception) -> PortalError | None:
    """The user-facing error for what portal.jobs, Slurm or the hub raised; None for a bug (logged, 500)."""
    if isinstance(err, JobSpecError):
        return PortalError(400, str(err), err.field)
    if isinstance(err, BackendError):
        return PortalError(400, str(err), "backend")
    if isinstance(err, JobNotFound):
        return PortalError(404, str(err))
    if isinstance(err, JobAccessError):
        return PortalError(403, str(err))
    if isinstance(err, SlurmError):
        return PortalError(503, f"Slurm is unavailable: {err}")
    if isinstance(err, KubernetesError):
        # Refused (a quota, an admission rule): the user's request; anything else: the API server is not there.
        return PortalError(400 if err.status in (403, 409, 422) else 503, str(err))
    if isinstance(err, subprocess.TimeoutExpired):
        return PortalError(503, "Slurm or the file system did not answer in time; try again shortly")
    if isinstance(err, HubUnavailable):
        return PortalError(503, f"JupyterHub is unavailable: {err}")
    return None


class PortalHandler(HubOAuthenticated, RequestHandler):
    """Base of pages and API: the hub user (with groups and admin flag) is `self.hub_user` after `prepare`."""

    hub_user: HubUser
    is_api = False

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
        identity = self.current_user  # the cookie or the token, checked with the hub
        if not identity:
            if self.is_api or self.request.method not in SAFE_METHODS:
                raise PortalError(403, "log in to JupyterHub, or send Authorization: token <your API token>")
            self.redirect(self.get_login_url())
            return
        # After identifying: token requests are exempt (HubOAuth marks them), cookie requests need _xsrf.
        if self.request.method not in SAFE_METHODS:
            self.check_xsrf_cookie()
        try:
            self.hub_user = await self.directory.user(identity["name"])
        except HubUnavailable as err:
            raise as_portal_error(err) from None

    async def everyone(self) -> list[HubUser]:
        """Every hub user, only for an admin (whose lists and lookups span users)."""
        return await self.directory.everyone() if self.hub_user.admin else []

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call (Slurm, files read as the user) in the pool; map its errors to what users see."""
        try:
            return await IOLoop.current().run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))
        except (JobSpecError, BackendError, JobNotFound, JobAccessError, SlurmError, KubernetesError,
                subprocess.TimeoutExpired) as err:
            raise as_portal_error(err) from None

    def error_parts(self, kwargs: dict) -> tuple[str, str | None]:
        error = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(error, PortalError):
            return error.message, error.field
        if isinstance(error, HTTPError) and error.log_message:
            return error.log_message, None
        return self._reason, None  # never a traceback


class APIHandler(PortalHandler):
    is_api = True

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


class PageHandler(PortalHandler):
    def render_page(self, name: str, **values: Any) -> None:
        self.render(name, user=self.hub_user, base_url=self.settings["hub_base_url"],
                    prefix=self.settings["service_prefix"], poll_s=self.settings["poll_s"], **values)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        message, field = self.error_parts(kwargs)
        self.render("error.html", status=status_code, message=message, field=field,
                    user=getattr(self, "hub_user", None), base_url=self.settings["hub_base_url"],
                    prefix=self.settings["service_prefix"])
