"""The dashboard's HTML pages: templates, jobs, one job (log tail, TensorBoard), the submit form, the cluster.

Forms post with `_xsrf`; errors in the submit form are shown beside the field they name.
"""

from __future__ import annotations

from pathlib import Path

from portal.inputs import MAX_BODY_BYTES, MAX_PATH, InputError, decode_form, shown, whole_number
from portal.jobs.spec import (
    FIELDS,
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_IMAGE_SIZE,
    MIN_IMAGE_SIZE,
    MODELS,
    TEMPLATES,
    WHOLE,
    JobLimits,
    format_minutes,
)
from portal.service.base import PageHandler, PortalError
from portal.tensorboard import lab_url, panel_url

BOOLEAN_FIELDS = ("fp16", "xla")
CHECKED = "on"  # what a browser sends for a checked checkbox without a value attribute
MAX_TAIL_LINES = 10_000


def notebook_templates(directory: Path) -> list[str]:
    """The template notebooks users open in JupyterLab, by file name."""
    return sorted(p.name for p in directory.glob("*.ipynb")) if directory.is_dir() else []


def form_spec(arguments: dict[str, list[bytes]]) -> dict[str, object]:
    """The JobSpec fields of a posted form: empty fields mean the default; checkboxes are present or not.

    Refused (InputError, naming the field): a field the form does not have, a value that is not UTF-8 or longer
    than a path may be, a field sent twice, and a post with no field at all (a browser sends every input of the
    form, empty or not: nothing at all is not a person submitting the form)."""
    decoded = decode_form(arguments, FIELDS, WHOLE, cap=MAX_PATH)
    if not decoded:
        raise InputError("template", f"no field was sent; allowed: the form's fields ({', '.join(FIELDS)})")
    spec: dict[str, object] = {}
    for name in FIELDS:
        values = decoded.get(name)
        if values and len(values) > 1:
            raise InputError(name, f"sent {len(values)} times; allowed: once")
        if name in BOOLEAN_FIELDS:
            if values and values[0] != CHECKED:
                raise InputError(name, f"{shown(values[0])} is not a checkbox's value; allowed: {CHECKED} or absent")
            spec[name] = bool(values)
            continue
        if values and values[0].strip():
            spec[name] = values[0].strip()
    return spec


def form_fields(limits: JobLimits) -> list[tuple[str, str, str]]:
    """(field, input type, what is allowed) for the submit form, from the user's limits now."""
    wall = "" if limits.max_minutes is None else f", at most {format_minutes(limits.max_minutes)}"
    return [
        ("template", "text", f"one of: {', '.join(TEMPLATES)}"),
        ("nodes", "number", f"1-{limits.nodes}"),
        ("gpus_per_node", "number", f"0-{limits.max_gpus_per_node}"),
        ("cpus_per_task", "number", f"per worker; {limits.cpus_per_node} CPUs per node"),
        ("memory_gb", "number", f"per node, 1-{limits.memory_gb_per_node}"),
        ("time_limit", "text", f"HH:MM:SS{wall}"),
        ("epochs", "number", f"1-{MAX_EPOCHS}"),
        ("batch_size", "number", f"per GPU, 1-{MAX_BATCH_SIZE}"),
        ("image_size", "number", f"{MIN_IMAGE_SIZE}-{MAX_IMAGE_SIZE} pixels"),
        ("model", "text", f"one of: {', '.join(MODELS)}"),
        ("data_dir", "text", f"empty: {limits.default_data_dir}"),
    ]


class HomeHandler(PageHandler):
    async def get(self) -> None:
        self.redirect(f"{self.settings['service_prefix']}jobs")


class TemplatesHandler(PageHandler):
    async def get(self) -> None:
        base = self.settings["hub_base_url"]
        notebooks = [(name, lab_url(self.hub_user.name, f"notebooks/{name}", base))
                     for name in notebook_templates(self.settings["notebooks_dir"])]
        self.render_page("templates.html", notebooks=notebooks)


class JobsPageHandler(PageHandler):
    async def get(self) -> None:
        everyone = await self.everyone()
        self.render_page("jobs.html", jobs=await self.blocking(self.board.list, self.hub_user, everyone))


class JobPageHandler(PageHandler):
    async def get(self, job_id: str) -> None:
        everyone = await self.everyone()
        job = await self.blocking(self.board.get, self.hub_user, job_id, everyone)
        summary = await self.blocking(self.board.summary, job)
        history = await self.blocking(self.board.history, job)
        log = await self.blocking(self.board.log_tail, job)
        owner = job.owner
        server_ready = await self.server_ready() if owner == self.hub_user.name else False
        self.render_page("job.html", job=summary, history=history, log=log, server_ready=server_ready,
                         owner_is_me=owner == self.hub_user.name, log_lines=self.settings["log_lines"],
                         tensorboard=panel_url(owner, job.id, self.settings["hub_base_url"]),
                         start_url=f"{self.settings['hub_base_url']}hub/spawn/{owner}")


def tail_lines(value: str | None) -> int | None:
    """The `tail` argument of the log page: None for the whole log, else 1-MAX_TAIL_LINES lines."""
    if value is None:
        return None
    try:
        return whole_number(value, "tail", 1, MAX_TAIL_LINES, " (lines)")
    except InputError as err:
        raise PortalError(400, str(err), err.field) from None


class JobLogHandler(PageHandler):
    async def get(self, job_id: str) -> None:
        lines = tail_lines(self.get_argument("tail", None))
        everyone = await self.everyone()
        job = await self.blocking(self.board.get, self.hub_user, job_id, everyone)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(await self.blocking(job.logs, lines))


class CancelHandler(PageHandler):
    async def post(self, job_id: str) -> None:
        everyone = await self.everyone()
        await self.acting(self.board.cancel, self.hub_user, job_id, everyone)
        self.redirect(f"{self.settings['service_prefix']}jobs")


class SubmitPageHandler(PageHandler):
    async def _show(self, values: dict, error: PortalError | None = None) -> None:
        limits = await self.acting(self.board.limits, self.hub_user)
        if error is not None:
            self.set_status(error.status_code)
        self.render_page("submit.html", limits=limits, values=values, error=error, fields=form_fields(limits))

    async def get(self) -> None:
        await self._show({})

    async def post(self) -> None:
        try:
            spec = self._posted_spec()
        except InputError as err:  # shown beside an empty form: what was sent is not worth showing again
            await self._show({}, PortalError(400, str(err), err.field))
            return
        try:
            job = await self.acting(self.board.submit, self.hub_user, spec)
        except PortalError as err:
            if err.status_code != 400:
                raise
            await self._show(spec, err)
            return
        self.redirect(f"{self.settings['service_prefix']}jobs/{job['id']}")

    def _posted_spec(self) -> dict[str, object]:
        if len(self.request.body) > MAX_BODY_BYTES:
            raise InputError(WHOLE, f"the form is {len(self.request.body)} bytes; allowed: at most {MAX_BODY_BYTES}")
        return form_spec(self.request.body_arguments)


class UsagePageHandler(PageHandler):
    async def get(self) -> None:
        everyone = await self.everyone()
        self.render_page("usage.html", usage=await self.blocking(self.board.usage, self.hub_user, everyone))


class ClusterPageHandler(PageHandler):
    async def get(self) -> None:
        snapshot = await self.blocking(self.cluster.snapshot)
        self.render_page("cluster.html", cluster=snapshot.to_dict())
