"""The dashboard's HTML pages: templates, jobs, one job (log tail, TensorBoard), the submit form, the cluster.

Forms post with `_xsrf`; errors in the submit form are shown beside the field they name.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from portal import settings as user_settings
from portal.errors import PortalError
from portal.gpus.view import held_now, holder_gpus
from portal.inputs import MAX_BODY_BYTES, MAX_PATH, InputError, decode_form, shown, whole_number
from portal.jobs import Job
from portal.logview import filter_log
from portal.records.programs import registry
from portal.records.record import ENDED_STATES, UNREADABLE
from portal.records.spec import WHOLE
from portal.records.sweep import MAX_TRIALS, PRUNERS, SAMPLERS, SweepView
from portal.reference import AurocTable
from portal.scheduler.home import ModelCardError
from portal.service.base import PageHandler, UserError, user_error
from portal.service.gpu_pages import ledger_of, with_busy
from portal.service.job_notebooks import NOTEBOOK_ELSEWHERE, write_job_notebook
from portal.service.submit_form import (
    checkbox,
    form_fields,
    form_spec,
    form_summary,
    form_values,
    sweep_form_field,
    sweep_form_values,
)
from portal.service.sweep_page import sweep_summary
from portal.tensorboard import lab_url

# The jobs list's filter: these first (in this order) when a job has them, then any other state a job is in.
FILTER_ORDER = ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
STATE_NAME = re.compile(r"[A-Z][A-Z_]{0,31}")  # Slurm's spelling (COMPLETED, OUT_OF_MEMORY) and ours (UNREADABLE)
MAX_TAIL_LINES = 10_000


def notebook_templates(directory: Path) -> list[str]:
    """The template notebooks users open in JupyterLab, by file name."""
    return sorted(p.name for p in directory.glob("*.ipynb")) if directory.is_dir() else []


# The form's sweep fields (kind "sweep"), each to its place in the request's "sweep" (portal.records.sweep); the lists
# ("8, 16") are searched as choices, an empty one is not searched; the learning rate is a range on a log scale.
class HomeHandler(PageHandler):
    async def get(self) -> None:
        self.redirect(f"{self.settings['service_prefix']}jobs")


class TemplatesHandler(PageHandler):
    async def get(self) -> None:
        base = self.settings["hub_base_url"]
        folder = self.board.cfg.user_notebooks_dir  # where each server copies them, in the home
        notebooks = [(name, lab_url(self.hub_user.name, f"{folder}/{name}", base))
                     for name in notebook_templates(self.settings["notebooks_dir"])]
        self.render_page("templates.html", notebooks=notebooks)


def state_filter(value: str | None) -> str:
    """The jobs list's `state` argument: "" for every job, else one of the states jobs are in."""
    if not value:
        return ""
    if not STATE_NAME.fullmatch(value):
        raise UserError(400, f"state: {shown(value)} is not a job state; allowed: a state in capitals "
                          "(PENDING, RUNNING, COMPLETED, ...) or empty for every job", "state")
    return value


def state_counts(jobs: list[dict]) -> list[tuple[str, int]]:
    """("ALL", n) then (state, n) for each state the jobs are in, the common ones first: the filter's tabs."""
    counts = Counter(job["state"] for job in jobs)
    order = [s for s in FILTER_ORDER if s in counts] + sorted(set(counts) - set(FILTER_ORDER))
    return [("ALL", len(jobs)), *((s, counts[s]) for s in order)]


def part(handler: PageHandler, allowed: str) -> bool:
    """Whether the page was asked for its live part alone (`?part=<allowed>`), which its script fetches."""
    value = handler.get_argument("part", "")
    if value and value != allowed:
        raise UserError(400, f"part: {shown(value)} is not a part of this page; allowed: {allowed} or empty",
                          "part")
    return bool(value)


def usage_panel(usage: dict, user: str) -> dict:
    """The jobs page's usage panel from what the board knows now: the user's GPUs against their quota, and this
    week's GPU-hours (None while accounting is being read; an admin's are everyone's)."""
    quota = next((q for q in usage["quotas"] if q["user"] == user), {"gpus_in_use": 0, "gpu_quota": 0})
    return {"quota": quota, "gpu_hours": usage.get("gpu_hours"),
            "history_unavailable": usage.get("history_unavailable", "")}


class JobsPageHandler(PageHandler):
    async def get(self) -> None:
        state = state_filter(self.get_argument("state", None))
        rows_only = part(self, "rows")
        everyone = await self.everyone()
        listed = await self.blocking(self.board.job_list, self.hub_user, everyone)
        jobs = listed["jobs"]
        usage = usage_panel(await self.blocking(self.board.known_usage, self.hub_user), self.hub_user.name)
        shown_jobs = [job for job in jobs if job["state"] == state] if state else jobs
        self.render_page("jobs_live.html" if rows_only else "jobs.html", jobs=shown_jobs, state=state,
                         counts=state_counts(jobs), usage=usage, late=listed["late"])


class JobPageHandler(PageHandler):
    async def get(self, job_id: str) -> None:
        figures_only = part(self, "figures")
        everyone = await self.everyone()
        job = await self.blocking(self.board.get, self.hub_user, job_id, everyone)
        summary = await self.blocking(self.board.summary, job, viewer=self.hub_user.name)
        history = await self.blocking(self.board.history, job)
        sweep = await self.blocking(self.board.sweep_of, job, summary["state"])
        best_epoch, auroc, gpus = None, None, []
        if summary["state"] not in ("PENDING", UNREADABLE) and sweep is None:  # nothing written yet / per trial
            metrics = await self.blocking(self.board.metrics_of, job, summary["state"])
            best_epoch = metrics.best_epoch
            auroc = AurocTable(metrics.per_class_auroc) if metrics.per_class_auroc else None
            gpus = await self.blocking(holder_gpus, self.settings["gpu_readings"], job.id)
        watcher = self.settings.get("gpu_watch")  # a flag of the GPU watch's: its GPUs idle (portal.gpus.watch)
        flag = watcher.watch.state.get(job.id) if watcher is not None else None
        figures: dict[str, Any] = {"job": summary, "history": history, "best_epoch": best_epoch, "auroc": auroc,
                   "sweep": sweep_summary(sweep, summary["state"], time.time()) if sweep else None, "gpus": gpus,
                   "gpu_flag": flag if flag is not None and flag.warned_at is not None else None, "now": time.time()}
        if figures_only:
            self.render_page("job_figures.html", **figures)
            return
        # A sweep's page shows its best trial's card and output (else the first running or last started task's).
        task = shown_task(sweep)
        card, card_problem = None, ""
        if summary["state"] in ENDED_STATES and summary["state"] != UNREADABLE or task is not None:
            try:
                card = await self.blocking(job.model_card, task)
            except ModelCardError as err:
                card_problem = str(err)
        log, hidden = filter_log(await self.blocking(self.board.log_tail, job, None, task))
        owner = job.owner
        server_ready = await self.server_ready() if owner == self.hub_user.name else False
        self.render_page("job.html", **figures, log=log, log_hidden=hidden, server_ready=server_ready,
                         notebook_here=job.scheduler.records_in_home if isinstance(job, Job) else False,
                         NOTEBOOK_ELSEWHERE=NOTEBOOK_ELSEWHERE,
                         card=card, card_problem=card_problem, task=task,
                         options=job.spec.options if isinstance(job, Job) else (),  # the program's own fields
                         owner_is_me=owner == self.hub_user.name, log_lines=self.settings["log_lines"],
                         tensorboard=summary["links"]["tensorboard"],
                         start_url=f"{self.settings['hub_base_url']}hub/spawn/{owner}")


def shown_task(sweep: SweepView | None) -> int | None:
    """The task whose card and output a sweep's page shows: the best trial's, else the first running, else the
    last that started; None for a single run (or a sweep none of whose tasks has started)."""
    if sweep is None:
        return None
    if sweep.best is not None:
        return sweep.best.task
    started = [row for row in sweep.rows if row.number is not None]
    running = [row for row in started if row.state == "RUNNING"]
    return (running or started)[0 if running else -1].task if started else None


def task_argument(value: str | None) -> int | None:
    """The `task` argument of a sweep's log and card: a task index of the job array."""
    if value is None:
        return None
    return whole_number(value, "task", 0, MAX_TRIALS - 1, " (a task of the sweep)")


def tail_lines(value: str | None) -> int | None:
    """The `tail` argument of the log page: None for the whole log, else 1-MAX_TAIL_LINES lines."""
    if value is None:
        return None
    return whole_number(value, "tail", 1, MAX_TAIL_LINES, " (lines)")


def flag(value: str | None, name: str) -> bool:
    """A yes/no argument: 1 or 0 (absent: no)."""
    if value in (None, "", "0"):
        return False
    if value == "1":
        return True
    raise UserError(400, f"{name}: {shown(value)} is not allowed; allowed: 1 or 0", name)


class JobLogHandler(PageHandler):
    """The log as text: whole (no `tail`), or its last lines with framework warnings hidden unless `framework=1`
    (the job page's live tail), how many in `X-Log-Hidden`."""

    async def get(self, job_id: str) -> None:
        lines = tail_lines(self.get_argument("tail", None))
        framework = flag(self.get_argument("framework", None), "framework")
        task = task_argument(self.get_argument("task", None))
        everyone = await self.everyone()
        job = await self.blocking(self.board.get, self.hub_user, job_id, everyone)
        text = await self.blocking(job.logs, lines, task)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        if framework or lines is None:
            self.finish(text)
            return
        shown, hidden = filter_log(text)
        self.set_header("X-Log-Hidden", str(hidden))
        self.finish(shown)


class ModelCardHandler(PageHandler):
    """The run's model_card.json, to download: the card as read and checked, written out again (never the bytes
    of whatever file is at its path)."""

    async def get(self, job_id: str) -> None:
        task = task_argument(self.get_argument("task", None))
        everyone = await self.everyone()
        job = await self.blocking(self.board.get, self.hub_user, job_id, everyone)
        card = await self.blocking(job.model_card, task)  # ModelCardError: a 409 saying why, by send_error
        if card is None:
            which = f"job {job.id}" if task is None else f"task {task} of sweep {job.id}"
            raise UserError(404, f"{which} has no model card yet: its run writes one when training ends"
                                 + (" (a sweep's card is its trial's: add ?task=N)" if job.plan and task is None
                                    else ""))
        self.set_header("Content-Type", "application/json; charset=utf-8")
        name = job.id if task is None else f"{job.id}-task{task}"
        self.set_header("Content-Disposition", f'attachment; filename="model_card-{name}.json"')
        self.finish(json.dumps(card, indent=1) + "\n")


class CancelHandler(PageHandler):
    async def post(self, job_id: str) -> None:
        everyone = await self.everyone()
        await self.acting(self.board.cancel, self.hub_user, job_id, everyone)
        self.redirect(f"{self.settings['service_prefix']}jobs")


class JobNotebookHandler(PageHandler):
    """"Open in a notebook": the owner's own job, in their JupyterLab (which the hub starts if it is not up)."""

    async def post(self, job_id: str) -> None:
        job = await self.blocking(self.board.get, self.hub_user, job_id)  # the user's own jobs only
        if not isinstance(job, Job):
            raise UserError(409, f"job {job_id}'s record is unreadable: there is no job to load in a notebook")
        if not job.scheduler.records_in_home:
            raise UserError(409, NOTEBOOK_ELSEWHERE.format(id=job.id))
        path = await self.blocking(write_job_notebook, job)
        self.redirect(lab_url(job.owner, path, self.settings["hub_base_url"]))


class SubmitPageHandler(PageHandler):
    async def _show(self, values: dict, error: UserError | None = None, again_of: str = "",
                    saved: bool = False) -> None:
        limits = await self.acting(self.board.limits, self.hub_user)
        mine = await self.acting(self.board.user_settings, self.hub_user) if limits.mail else None
        if mine is not None and "mail" not in values:  # what a submit leaving `mail` out uses: the user's default
            values = {**values, "mail": mine.job_mail}
        shown_values, sweep_values = form_values(limits, values), sweep_form_values(values, limits)
        kind = "sweep" if isinstance(values.get("sweep"), Mapping) else "single"
        self.render_page("submit.html", http_status=error.status_code if error else None, limits=limits,
                         values=shown_values, summary=form_summary(shown_values, limits, kind, sweep_values),
                         error=error, fields=form_fields(limits), again_of=again_of, mine=mine, saved=saved,
                         kind=kind, sweep_values=sweep_values, sampler_choices=SAMPLERS,
                         pruner_choices=PRUNERS, programs=registry().programs,
                         model_choices=tuple(dict.fromkeys(m for p in registry().programs for m in p.models)),
                         sweep_error=sweep_form_field(error.field if error else None),
                         sweeps=self.board.scheduler.sweeps)  # "Sweep" beside "Single run"

    checks_own_body = True  # _posted_spec: a body over the limit is said beside the form

    async def get(self) -> None:
        """The form, empty, or holding job `from`'s settings ("run again with changes")."""
        job_id = self.get_argument("from", None)
        if not job_id:
            await self._show({}, saved=self.get_argument("saved", "") == "1")
            return
        job = await self.blocking(self.board.get, self.hub_user, job_id, await self.everyone())
        if not isinstance(job, Job):
            raise UserError(409, f"job {job.id}'s record is unreadable: it has no settings to start from")
        await self._show({**job.spec.to_dict(), **({"sweep": job.plan.to_dict()} if job.plan else {})},
                         again_of=job.id)

    async def post(self) -> None:
        try:
            spec = self._posted_spec()
        except InputError as err:  # shown beside an empty form: what was sent is not worth showing again
            await self._show({}, user_error(err))
            return
        try:
            job = await self.acting(self.board.submit, self.hub_user, spec)
        except PortalError as err:
            refused = user_error(err)
            if refused.status_code not in (400, 429):  # the request's own fault: shown beside what was sent
                raise
            await self._show(spec, refused)
            return
        self.redirect(f"{self.settings['service_prefix']}jobs/{job['id']}")

    def _posted_spec(self) -> dict[str, object]:
        if len(self.request.body) > MAX_BODY_BYTES:
            raise InputError(WHOLE, f"the form is {len(self.request.body)} bytes; allowed: at most {MAX_BODY_BYTES}")
        return form_spec(self.request.body_arguments)


class SettingsPageHandler(SubmitPageHandler):
    """The submit page's "your default" form: the user's own settings (portal.settings), then the submit page."""

    async def get(self) -> None:
        self.redirect(f"{self.settings['service_prefix']}submit")

    async def post(self) -> None:
        try:
            given = decode_form(self.request.body_arguments, user_settings.FIELDS, "settings", cap=MAX_PATH)
            for name, values in given.items():
                if len(values) > 1:
                    raise InputError(name, f"sent {len(values)} times; allowed: once")
            # every setting the form has is a checkbox: on or off
            await self.acting(self.board.save_user_settings, self.hub_user,
                              {name: checkbox(name, given.get(name)) for name in user_settings.FIELDS})
        except InputError as err:
            await self._show({}, user_error(err))
            return
        except user_settings.SettingsNotSaved as err:  # their home's doing: said on the page, the form kept
            await self._show({}, user_error(err))
            return
        self.redirect(f"{self.settings['service_prefix']}submit?saved=1")


class UsagePageHandler(PageHandler):
    async def get(self) -> None:
        everyone = await self.everyone()
        usage = await self.blocking(self.board.usage, self.hub_user, everyone)
        self.render_page("usage.html", usage=with_busy(usage, ledger_of(self.settings)))


class ClusterPageHandler(PageHandler):
    async def get(self) -> None:
        snapshot = await self.blocking(self.cluster.snapshot)
        held = await self.blocking(held_now, self.settings["gpu_readings"]) if self.hub_user.admin else []
        self.render_page("cluster.html", cluster=snapshot.to_dict(), held=held, now=time.time())
