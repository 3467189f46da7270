"""The JSON API under /services/portal/api/: the same jobs as the pages, for scripts (token) and the browser
(cookie + X-XSRFToken). A JobSpec in, the job's dict out; errors are `{"error": ..., "field": ...}`."""

from __future__ import annotations

import time
from typing import Any

from portal.inputs import InputError, read_json_object
from portal.records.account import RUNUSER_CALLS, every_scheduler_calls
from portal.records.spec import WHOLE, input_fields
from portal.service.base import APIHandler
from portal.service.gpu_pages import ledger_of, with_busy
from portal.service.sweep_page import sweep_summary


def posted_spec(body: bytes | None) -> dict:
    """The JobSpec fields of a POST to api/jobs: one JSON object (size, encoding and depth capped by
    portal.inputs) with at least one field. An empty body or `{}` submits nothing: a job with every default is
    asked for explicitly, `{"template": "chexnet"}`."""
    spec = read_json_object(body, WHOLE)
    if not spec:
        raise InputError("template", 'required when no other field is sent; allowed: {"template": "chexnet"} '
                                     f"for a job with every default, or any of: {', '.join(input_fields())}")
    return spec


class JobsAPIHandler(APIHandler):
    async def get(self) -> None:
        everyone = await self.everyone()
        # An admin's: every user's part within its deadline; `late` names whose rows are stale or unread (views.py).
        self.write_json(await self.blocking(self.board.job_list, self.hub_user, everyone))

    async def post(self) -> None:
        spec = posted_spec(self.request.body)  # InputError: a 400 naming the field, by send_error
        self.write_json(await self.acting(self.board.submit, self.hub_user, spec), status=201)


class JobAPIHandler(APIHandler):
    async def get(self, job_id: str) -> None:
        everyone = await self.everyone()
        job = await self.blocking(self.board.get, self.hub_user, job_id, everyone)
        summary = await self.blocking(self.board.summary, job, viewer=self.hub_user.name)
        detail: dict[str, object] = {"per_class_auroc": {}, "best_epoch": None}
        if summary["state"] != "PENDING":  # nothing written yet; spares a process run as the user
            metrics = await self.blocking(self.board.metrics_of, job, summary["state"])
            detail = {"per_class_auroc": metrics.per_class_auroc, "best_epoch": metrics.best_epoch}
        history = await self.blocking(self.board.history, job)
        sweep = await self.blocking(self.board.sweep_of, job, summary["state"])
        shown = {"sweep": sweep_summary(sweep, summary["state"], time.time())} if sweep else {}
        self.write_json({**summary, **detail, "history": history, **shown})

    async def delete(self, job_id: str) -> None:
        everyone = await self.everyone()
        await self.acting(self.board.cancel, self.hub_user, job_id, everyone)
        self.set_status(204)
        self.finish()


class SettingsAPIHandler(APIHandler):
    """The user's own settings (portal.settings): GET them; POST a JSON object of the ones to change."""

    async def get(self) -> None:
        found = await self.blocking(self.board.user_settings, self.hub_user)
        self.write_json({**found.to_dict(), "problem": found.problem})

    async def post(self) -> None:
        given = read_json_object(self.request.body, "settings")  # InputError, SettingsNotSaved: by send_error
        saved = await self.acting(self.board.save_user_settings, self.hub_user, given)
        self.write_json(saved.to_dict())


class UsageAPIHandler(APIHandler):
    async def get(self) -> None:
        everyone = await self.everyone()
        usage = await self.blocking(self.board.usage, self.hub_user, everyone)
        self.write_json(with_busy(usage, ledger_of(self.settings)))


def cluster_answer(view: dict[str, Any], counters: dict[str, Any], admin: bool) -> dict[str, Any]:
    """GET api/cluster's answer: the cluster's view for everyone; the portal's internal command counters for
    admins only. The counters show how hard the dashboard works and which commands it runs as users: the
    operators' to read (the load benchmark reads them with the admin's token), nothing a user needs."""
    return {**view, **counters} if admin else dict(view)


class ClusterAPIHandler(APIHandler):
    async def get(self) -> None:
        snapshot = await self.blocking(self.cluster.snapshot)
        # page_refresh_s: how often an open jobs page reloads itself now (portal.service.pace: longer as more pages
        # are open), what a load test simulates; open_pages: how many users have one open.
        view = {**snapshot.to_dict(), "refresh_s": self.cluster.interval_s,
                "page_refresh_s": self.settings["pace"].poll_s(), "open_pages": self.settings["pace"].open_pages()}
        # What this process has asked so far (the load benchmark reads the difference over its run): the shared
        # snapshot's squeue/scontrol, each scheduler's commands run as users (user_<name>_calls: Slurm's
        # user_slurm_calls), every command run as a user, hub requests.
        counters = {"squeue_calls": self.cluster.squeue_calls, "scontrol_calls": self.cluster.scontrol_calls,
                    **{f"user_{name}_calls": calls for name, calls in every_scheduler_calls().items()},
                    "runuser_calls": RUNUSER_CALLS.as_dict(), "hub_calls": getattr(self.directory, "calls", 0)}
        self.write_json(cluster_answer(view, counters, self.hub_user.admin))
