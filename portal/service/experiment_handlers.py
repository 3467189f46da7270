"""The experiments page and its API: a user's runs with a filter, the chosen runs side by side,
and the owner's names and tags for them.

Pages: `experiments` (the list, its filter form, a checkbox per run and Compare), `experiments/compare?runs=...` (the
comparison; its URL is the link to share with an admin), `experiments/label` (POST, with _xsrf). API: `GET
api/experiments` (the same filter as query arguments), `GET api/experiments/compare?runs=...[&all=1]`, `POST
api/experiments/label` (`{"run": "42", "name": "...", "tags": [...]}`). Every argument is parsed strictly (a 400
naming it); a run that is not the user's is "not found" (404) as any job of someone else's, but for an admin's
lists and comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tornado.web import RequestHandler

from portal.inputs import InputError, check_fields, decode_form, form_values, read_json_object
from portal.service.base import APIHandler, PageHandler, PortalHandler
from portal.service.comparison import compare
from portal.service.experiment_filters import ARGUMENTS, matches, parse_filter
from portal.service.experiments import MAX_COMPARED, Run, RunId, parse_run_ids
from portal.service.pages import flag
from portal.service.run_labels import MAX_NAME
from portal.tensorboard import runs_url

LABEL_FIELDS = ("run", "name", "tags")
MAX_LISTED = 2000  # runs on the page at once: the newest, the filter narrows the rest


def arguments(handler: RequestHandler, names: Sequence[str]) -> dict[str, str]:
    """The query's arguments among `names`, each at most once (InputError naming it otherwise)."""
    found = {}
    for name in names:
        values = handler.get_query_arguments(name)
        if len(values) > 1:
            raise InputError(name, f"sent {len(values)} times; allowed: once")
        found[name] = values[0] if values else ""
    return found


def tensorboard_links(runs: Sequence[Run], base_url: str) -> list[dict[str, Any]]:
    """One TensorBoard link per owner of the chosen runs, showing those runs together (each owner's TensorBoard
    runs in their own server: an admin's comparison of two users' runs has two links)."""
    owners = dict.fromkeys(run.owner for run in runs)
    return [{"owner": owner, "runs": [str(r.id) for r in runs if r.owner == owner],
             "url": runs_url(owner, [r.run_prefix for r in runs if r.owner == owner and r.run_prefix], base_url)}
            for owner in owners]


class ExperimentsReads(PortalHandler):
    """What the page and the API share: the filtered list, the comparison."""

    async def listed(self) -> dict[str, Any]:
        wanted = parse_filter(arguments(self, ARGUMENTS))
        everyone = await self.everyone()
        runs = await self.blocking(self.board.experiment_runs, self.hub_user, everyone)
        kept = [run for run in runs if matches(run, wanted)]
        return {"runs": kept[:MAX_LISTED], "more": max(0, len(kept) - MAX_LISTED), "filters": wanted.to_dict()}

    async def compared(self) -> dict[str, Any]:
        ids = parse_run_ids(arguments(self, ("runs",))["runs"])
        every = flag(arguments(self, ("all",))["all"], "all")
        runs = await self.blocking(self.board.compared_runs, self.hub_user, ids, await self.everyone())
        return {**compare(runs, every), "tensorboard": tensorboard_links(runs, self.settings["hub_base_url"]),
                "runs_argument": ",".join(map(str, ids))}


class ExperimentsAPIHandler(APIHandler, ExperimentsReads):
    async def get(self) -> None:
        listed = await self.listed()
        self.write_json({**listed, "runs": [run.to_dict() for run in listed["runs"]]})


class CompareAPIHandler(APIHandler, ExperimentsReads):
    async def get(self) -> None:
        self.write_json(await self.compared())


def one_run(value: object, field: str = "run") -> RunId:
    if not isinstance(value, str):
        raise InputError(field, "allowed: one run, a job id or <sweep id>:<task>")
    ids = parse_run_ids(value, field)
    if len(ids) != 1:
        raise InputError(field, f"{len(ids)} runs; allowed: one run, a job id or <sweep id>:<task>")
    return ids[0]


class LabelAPIHandler(APIHandler):
    """POST `{"run": ..., "name": ..., "tags": [...]}`: the owner's name and tags for the run (empty: cleared)."""

    async def post(self) -> None:
        body = read_json_object(self.request.body, "label")
        check_fields(body, LABEL_FIELDS, "label")
        wanted = one_run(body.get("run"))
        self.write_json(await self.acting(self.board.label_run, self.hub_user, wanted, body.get("name", ""),
                                          body.get("tags", [])))


class ExperimentsPageHandler(PageHandler, ExperimentsReads):
    async def get(self) -> None:
        listed = await self.listed()
        self.render_page("experiments.html", **listed, max_compared=MAX_COMPARED, max_name=MAX_NAME)


class ComparePageHandler(PageHandler, ExperimentsReads):
    async def get(self) -> None:
        comparison = await self.compared()
        # The charts: mean AUROC, validation loss and images/sec per epoch, each run a series (portal.service.curves).
        charts = [(m, [(s["label"], s["points"]) for s in comparison["series"][m["key"]]])
                  for m in comparison["metrics"] if m["key"] != "loss/train"]
        self.render_page("compare.html", comparison=comparison, charts=charts)


class LabelPageHandler(PageHandler):
    """The list's name-and-tags form (with _xsrf), then the list again."""

    async def post(self) -> None:
        given = form_values(decode_form(self.request.body_arguments, LABEL_FIELDS, "label", cap=400), LABEL_FIELDS,
                            "label")
        await self.acting(self.board.label_run, self.hub_user, one_run(given.get("run")), given.get("name", ""),
                          given.get("tags", ""))
        self.redirect(f"{self.settings['service_prefix']}experiments")
