"""What both portal spawners share: the portal's settings as trait defaults, the spawn options form, its REST twin,
and what a refusal leaves behind.

JupyterHub (6.1, `User.spawn`) stores a request's options in its database *before* `apply_user_options` checks
them. Refused options would then stay stored, and every later start without options (the REST API with no
body, a restart from the admin page) would be refused again until someone sent valid ones. So a refusal puts back
the options that were stored before the request: a refused request changes nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tornado import web
from traitlets import HasTraits, Instance, default

from portal.config import SERVER_DASHBOARD_ENV, PortalConfig, load
from portal.errors import SchedulerError
from portal.inputs import one_line
from portal.jobs.budget import budgeted
from portal.mlflow_accounts import for_job, tracking_uri
from portal.records.budget import GpuBudget
from portal.records.limits import JobLimits
from portal.scheduler.protocol import Scheduler
from portal.scheduler.registry import scheduler_for
from portal.scheduler.snapshot import ClusterCache, ClusterSnapshot
from portal.traits import portal_default
from spawners.forms import OptionsError, ServerOptions, form_options, parse_server_options, render_form

HUB_FORM_FIELDS = ("_xsrf",)  # the hub's own, never an option
# How long one look at the cluster serves a user's spawn requests: a burst of them (the form and its submit, a
# client's retries, a flood through the REST API) asks the scheduler at most once a second, not once each (Slurm:
# one squeue and two scontrol as root). Shorter than the scheduler's own lag: a stopped server's Slurm job stays
# COMPLETING, holding its GPUs, for longer.
SPAWN_SNAPSHOT_S = 1.0
# How long one read of the user's week in the scheduler's accounting (Slurm: sacct, as the user) serves their spawn:
# the form's submit checks the options and the start checks them again, a moment apart; a form rendered before it
# is older than this, so what it weighed is read again.
SPAWN_BUDGET_S = 10.0


def tensorboard_proxy_url(spawner) -> str:
    """`<server URL>proxy/%PORT%/`: where `%tensorboard` (TensorBoard's notebook magic) finds the TensorBoard it
    starts, through jupyter-server-proxy; TensorBoard puts its port in place of %PORT%."""
    return f"{spawner.user.url}proxy/%PORT%/"


async def accepts_connections(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """Whether a server's port takes a TCP connection now (within `timeout_s`): both spawners hand the hub a server
    the moment it listens."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=timeout_s)
    except (TimeoutError, OSError):
        return False
    writer.close()
    return True


def server_environment(portal: PortalConfig, home_of: Callable[[Any], str]) -> dict[str, Callable[[Any], str]]:
    """The site's `server_environment` items as Spawner.environment values: each called with the spawner (as
    JupyterHub calls callable values), {home} replaced by `home_of(spawner)`, the user's home as the server sees
    it."""
    found = {}
    for item in portal.server_environment:
        name, _, value = item.partition("=")
        found[name] = lambda spawner, value=value: value.replace("{home}", home_of(spawner).rstrip("/"))
    return found


def refusal(err: OptionsError | SchedulerError) -> web.HTTPError:
    """The spawn form's error, with the status portal.errors gives it (400 for options that are not allowed, 503 for
    a scheduler that failed). The message is exactly the error's: the hub shows `jupyterhub_message` on the
    re-rendered form and in the REST API's JSON, instead of "HTTP 400: Bad Request (...)"."""
    error = web.HTTPError(err.http_status, "%s", str(err))
    error.jupyterhub_message = str(err)
    return error


class ServerOptionsMixin(HasTraits):
    """`options_form`, `options_from_form` and `apply_user_options` through `spawners.forms`, for a spawner that
    names its scheduler (`portal_scheduler`, as portal.scheduler.registry knows it: the form is a view of that
    scheduler's `limits`) and provides `apply_server_options(options)`; and the settings both spawners take from
    the portal. Put it before the Spawner class in the bases."""

    portal = Instance(PortalConfig, help="The portal's settings (portal.config).")
    pool_label = "Partition"
    portal_scheduler = ""  # the registered scheduler whose servers this spawner starts

    @default("portal")
    def _portal_default(self) -> PortalConfig:
        return load()

    @default("cmd")
    def _cmd_default(self) -> list[str]:
        return [str(self.portal.venv / "bin" / "jupyterhub-singleuser")]

    _start_timeout_default = portal_default("start_timeout", "start_timeout")
    # Functions of the spawner (the hub calls them with it): the class's own, whatever subclass this is.
    _options_form_default = default("options_form")(lambda spawner: ServerOptionsMixin._render_options_form)
    _apply_user_options_default = default("apply_user_options")(
        lambda spawner: ServerOptionsMixin._apply_server_options)
    _options_change: tuple[Any, Any] | None = None
    _cluster: ClusterCache | None = None  # this spawner's look at the cluster (limits)
    _budget: tuple[float, GpuBudget | None] = (-SPAWN_BUDGET_S, None)  # (when, the budget accounting gave then)

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        # Observed from here on: the options loaded from the hub's database at construction are no request.
        self.observe(self._remember_stored_options, names="user_options")

    # The user's MLflow account, made or found (off the event loop) as their server starts: MLflow's own variables
    # in its environment, so that a notebook's `mlflow` client logs and reads as them (docs/mlflow.md).
    mlflow_environment: dict[str, str] = {}

    async def prepare_mlflow(self) -> None:
        """Called first in each spawner's `start`. No MLflow (mlflow_url empty): nothing. A server that does not
        answer: the server starts without it, and the hub's log says why."""
        name = getattr(self.user, "name", "")
        if not name or not tracking_uri(self.portal):
            self.mlflow_environment = {}
            return
        account, why_not = await asyncio.to_thread(for_job, self.portal, name)
        self.mlflow_environment = account.environment() if account is not None else {}
        if why_not:
            self.log.warning("MLflow for %s's server: %s", name, why_not)

    def get_env(self) -> dict[str, str]:
        # The dashboard as the server reaches it: the lab's GPU figures go through the server (portal.lab_gpus).
        return {**super().get_env(), **self.mlflow_environment, SERVER_DASHBOARD_ENV: self.portal.dashboard_for_servers}

    def scheduler(self) -> Scheduler[Any]:
        """The scheduler this spawner's servers run on (`portal_scheduler`, made from the portal's settings)."""
        return scheduler_for(self.portal, self.portal_scheduler)

    async def limits(self) -> JobLimits:
        """What the user may ask for now, as their scheduler answers every caller (Scheduler.limits, from one
        snapshot of the cluster as the portal sees it, at most SPAWN_SNAPSHOT_S old), asked off the event loop:
        the pools, the quota with what their server and jobs hold, the GPU profiles, and what is left of their
        weekly GPU-hours (portal.jobs.budget: the scheduler's accounting, as submit reads it, at most
        SPAWN_BUDGET_S old)."""
        scheduler, look = self.scheduler(), self.cluster_look
        groups = tuple(sorted(g.name for g in self.user.groups))
        read_at, known = self._budget
        known = known if time.monotonic() - read_at < SPAWN_BUDGET_S else None

        def ask() -> tuple[JobLimits, bool]:  # with the weekly budget where the user's groups have one (as submit's)
            who = scheduler.person(self.user.name, groups)
            limits = scheduler.limits(who, look())
            if known is not None:  # the week's use as read a moment ago; what is held ahead as the queue says now
                return replace(limits, budget=replace(known, ahead_minutes=limits.gpu_minutes_ahead)), False
            return budgeted(self.portal, scheduler, who, limits), True
        limits, read = await asyncio.to_thread(ask)
        if read and limits.budget is not None:
            self._budget = (time.monotonic(), limits.budget)
        return limits

    def cluster_look(self) -> ClusterSnapshot:
        """This spawner's look at the cluster, at most SPAWN_SNAPSHOT_S old: the limits the request was checked
        against and what the start says it will wait for share it. Blocks (call it in a thread); SchedulerError."""
        if self._cluster is None:
            self._cluster = ClusterCache(self.portal, self.scheduler(), interval_s=SPAWN_SNAPSHOT_S)
        return self._cluster.snapshot()

    async def _limits(self) -> JobLimits:
        """`limits()`, with a scheduler that failed as an HTTP 503 naming what failed."""
        try:
            return await self.limits()
        except SchedulerError as err:
            self.log.warning("spawn options for %s: %s", self._log_name, one_line(err))
            raise refusal(err) from None

    def apply_server_options(self, options: ServerOptions) -> None:
        raise NotImplementedError

    def _remember_stored_options(self, change: dict) -> None:
        # User.spawn sets the request's options here right after storing them: `old` is what was stored before.
        self._options_change = (change["old"], change["new"])

    async def _render_options_form(self) -> str:
        limits = await self._limits()
        try:  # offer the user's last choices again where they still fit
            previous = parse_server_options(self.user_options, limits) if self.user_options else None
        except OptionsError:
            previous = None
        return render_form(limits, previous, pool_label=self.pool_label)

    async def options_from_form(self, formdata: dict) -> dict:
        """Validate the form before the hub stores anything; a 400 re-renders it with the field in error."""
        fields = {k: v for k, v in formdata.items() if k not in HUB_FORM_FIELDS}
        try:
            return form_options(fields, await self._limits()).to_dict()
        except OptionsError as err:
            raise refusal(err) from None

    async def _apply_server_options(self, user_options: dict) -> None:
        """Validate (again: the REST API skips the form) and put only checked values into the job or pod."""
        try:
            options = parse_server_options(user_options if user_options is not None else {}, await self._limits())
        except OptionsError as err:
            self.log.warning("spawn of %s refused: %s", self._log_name, one_line(err))
            self._restore_stored_options(user_options)
            raise refusal(err) from None
        self.apply_server_options(options)
        self._options_change = None

    def _restore_stored_options(self, refused: Any) -> None:
        change, self._options_change = self._options_change, None
        if change is None or change[1] != refused:
            return  # the refused options are the ones stored already: nothing new to take back
        previous = change[0] or {}
        self.user_options = previous
        self._options_change = None
        if self.orm_spawner is not None:
            self.orm_spawner.user_options = previous
            if self.db is not None:
                self.db.commit()
        self.log.info("Refused server options; the options stored before the request stay")
