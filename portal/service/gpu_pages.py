"""The GPUs page and its API: a user's idle warnings with "Keep it", and their history of warnings, stops and flags
(portal.service.gpu_watch decides them; docs/gpus.md), and the GPUs their own JupyterLab server holds now, node by
node (what the lab shows: deploy/jupyterlab/gpu-notice). Each user sees and keeps only their own; an admin's history
lists everyone's.

    GET  gpus                the page
    POST gpus                form field `holder`: keep that server of the user's ("Keep it")
    GET  api/gpus            {"watched": bool, "warnings": [...], "history": [...], "server_gpus": [...]}
    POST api/gpus/keep       {"holder": "<id>"}: as the form

and the Usage page's busy GPU-hours beside the held ones (`with_busy`).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

from portal.errors import SchedulerError
from portal.gpus.idle import Watched
from portal.gpus.ledger import Ledger
from portal.gpus.readings import HOLDER
from portal.gpus.view import OwnGpu, own_now
from portal.gpus.watch import Event, Watch
from portal.inputs import InputError, decode_form, read_json_object
from portal.service.base import APIHandler, PageHandler, PortalHandler, UserError

NOT_WARNED = "{holder} is not a server or job of yours with an idle warning now (kept already, busy again, or ended)"


def warning_view(watch: Watch, watched: Watched, now: float) -> dict[str, Any]:
    deadline = watch.deadline(watched)
    return {"holder": watched.holder, "server": watched.server, "idle_since": watched.idle_since,
            "warned_at": watched.warned_at, "deadline": deadline,
            "left_s": None if deadline is None else max(0.0, deadline - now)}


def ledger_of(settings: dict[str, Any]) -> Ledger | None:
    """The dashboard's ledger of held and busy GPU-seconds; None where the service runs no GPU watch (a test's app)."""
    return getattr(settings.get("gpu_watch"), "ledger", None)


def with_busy(usage: dict[str, Any], ledger: Ledger | None) -> dict[str, Any]:
    """The Usage report with what each job's GPUs did beside what it held (portal.gpus.ledger): `busy_gpu_hours`
    and `efficiency` (busy over what was known held; None where nothing was read) per job, and the week's busy
    GPU-hours. Unchanged where the portal has no ledger, or the report no jobs."""
    if ledger is None or not usage.get("jobs"):
        return usage
    accounts = ledger.of(str(job["job_id"]) for job in usage["jobs"])
    jobs = []
    for job in usage["jobs"]:
        account = accounts.get(str(job["job_id"]))
        jobs.append({**job, "busy_gpu_hours": account.busy_s / 3600 if account else None,
                     "efficiency": account.efficiency if account else None})
    known = [a for a in accounts.values() if a.efficiency is not None]
    held = sum(a.held_s - a.unknown_s for a in known)
    return {**usage, "jobs": jobs, "gpu_hours_busy": sum(a.busy_s for a in known) / 3600,
            "efficiency": sum(a.busy_s for a in known) / held if held else None}


class GpuReads(PortalHandler):
    @property
    def watch(self) -> Watch | None:
        """The dashboard's watch; None where the service runs none (a test's app)."""
        watcher = self.settings.get("gpu_watch")
        return watcher.watch if watcher is not None else None

    async def mine(self) -> dict[str, Any]:
        watch, user = self.watch, self.hub_user
        if watch is None:
            return {"watched": False, "warnings": [], "history": [], "server_gpus": []}
        now = time.time()
        return {"watched": True, "warnings": [warning_view(watch, w, now) for w in watch.warnings(user.name)],
                "history": [asdict(e) for e in watch.history(None if user.admin else user.name)],
                "server_gpus": [asdict(gpu) for gpu in await self.server_gpus()]}

    async def server_gpus(self) -> list[OwnGpu]:
        """The GPUs the user's own JupyterLab server holds now (from the cluster's cached snapshot: whose server is
        which job), each node's latest reading; none while the scheduler does not answer."""
        try:
            snapshot = await self.blocking(self.cluster.snapshot)
        except SchedulerError:
            return []
        name = self.hub_user.name
        servers = {job.id for job in snapshot.queue.values() if job.server and job.user == name}
        return await self.blocking(own_now, self.settings["gpu_readings"], servers, name) if servers else []

    def keep(self, holder: str) -> Event:
        if not HOLDER.fullmatch(holder):
            raise InputError("holder", "not a server's or job's id")
        event = self.watch.keep(self.hub_user.name, holder) if self.watch is not None else None
        if event is None:
            raise UserError(404, NOT_WARNED.format(holder=holder), "holder")
        return event


class GpusPageHandler(PageHandler, GpuReads):
    async def get(self) -> None:
        kept = self.get_argument("kept", "")
        self.render_page("gpus.html", **await self.mine(), now=time.time(),
                         kept=kept if HOLDER.fullmatch(kept) else "")

    def post(self) -> None:
        holder = decode_form(self.request.body_arguments, ("holder",), "keep").get("holder", [""])[0]
        self.keep(holder)  # InputError, UserError: the error page, by send_error
        self.redirect(f"{self.settings['service_prefix']}gpus?kept={quote(holder, safe='')}")


class GpusAPIHandler(APIHandler, GpuReads):
    async def get(self) -> None:
        self.write_json(await self.mine())


class KeepAPIHandler(APIHandler, GpuReads):
    def post(self) -> None:
        holder = read_json_object(self.request.body, "keep").get("holder")
        if not isinstance(holder, str):
            raise InputError("holder", "missing, or not text; allowed: the id of your server or job")
        self.write_json(asdict(self.keep(holder)))
