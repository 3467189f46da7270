"""The experiments page's runs: a single job, or one trial of a sweep, on any scheduler, of any
training program, with what the jobs list and a sweep's page already know of it.

Pure: a job's row (portal.service.summary.job_summary) and its sweep's view (portal.service.sweep_page) in, runs out;
the board (portal.service.experiment_reads) finds them, reads the chosen runs' per-epoch records and model cards, and
portal.service.comparison sets the chosen side by side. A run is named `<job id>` or `<job id>:<task>` (task: the
sweep's task index, the one its log and card take as `?task=`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from portal.inputs import InputError, shown
from portal.records.sweep import MAX_TRIALS
from portal.scheduler.registry import job_id_patterns

__all__ = ["MAX_COMPARED", "NOT_HYPERPARAMETERS", "Run", "RunId", "parse_run_ids", "runs_of_job"]

MAX_COMPARED = 12  # runs side by side: each reads its per-epoch record and card as its owner
MAX_RUNS_ARGUMENT = 400  # characters of `runs`: 12 ids with their tasks, with room
RUN_ID = re.compile("(?P<job>" + "|".join(job_id_patterns().values()) + r")(?::(?P<task>0|[1-9][0-9]{0,5}))?")
# What a job's spec holds that says nothing of how it trained (the e-mail at its end).
NOT_HYPERPARAMETERS = frozenset({"mail"})


@dataclass(frozen=True, order=True)
class RunId:
    """A single job (`task` None) or the trial of a sweep's task."""

    job: str
    task: int | None = None

    def __str__(self) -> str:
        return self.job if self.task is None else f"{self.job}:{self.task}"


def parse_run_ids(value: str | None, field_name: str = "runs") -> list[RunId]:
    """The `runs` argument: ids separated by commas (`42,43,50:1`), each once, 1-MAX_COMPARED of them; InputError
    naming the field otherwise."""
    allowed = (f"allowed: 1-{MAX_COMPARED} runs separated by commas, each a job id or <sweep id>:<task> "
               "(e.g. 42,43,50:1)")
    if not value or not value.strip():
        raise InputError(field_name, f"no run given; {allowed}")
    if len(value) > MAX_RUNS_ARGUMENT:
        raise InputError(field_name, f"{len(value)} characters; {allowed}")
    found: list[RunId] = []
    for part in value.split(","):
        match = RUN_ID.fullmatch(part.strip())
        if match is None:
            raise InputError(field_name, f"{shown(part.strip())} is not a run; {allowed}")
        task = match["task"]
        if task is not None and int(task) >= MAX_TRIALS:
            raise InputError(field_name, f"{shown(part.strip())}: task {task} is out of range; allowed: 0-"
                                         f"{MAX_TRIALS - 1}")
        run = RunId(match["job"], None if task is None else int(task))
        if run not in found:
            found.append(run)
    if len(found) > MAX_COMPARED:
        raise InputError(field_name, f"{len(found)} runs; {allowed}")
    return found


@dataclass(frozen=True)
class Run:
    """One run as the experiments page lists and compares it. `epochs` (the per-epoch record, schema-checked) and
    `card` (the model card, schema-checked) are read only for the runs compared."""

    id: RunId
    owner: str
    scheduler: str
    program: str
    state: str
    submitted_at: str
    params: Mapping[str, Any]  # the hyperparameters: the job's spec, a trial's sampled values over it
    gpus: int
    started_at: float | None = None  # seconds since the epoch, where known (a trial's, from the study)
    ended_at: float | None = None
    best_mean_auroc: float | None = None
    name: str = ""
    tags: tuple[str, ...] = ()
    sweep_of: str = ""  # a trial's: its sweep's id
    links: Mapping[str, str] = field(default_factory=dict)
    run_prefix: str = ""  # its runs' names in the owner's TensorBoard (portal.tensorboard)
    epochs: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    epochs_problem: str = ""
    card: Mapping[str, Any] | None = None
    card_problem: str = ""

    @property
    def label(self) -> str:
        """How the page and the charts' legends name it: its name, else its id, with the owner's for an admin."""
        return self.name or (f"sweep {self.id.job}, task {self.id.task}" if self.id.task is not None
                             else f"job {self.id.job}")

    def to_dict(self) -> dict[str, Any]:
        """What the API lists of it (its epochs and card are in a comparison's answer, not here)."""
        return {"run": str(self.id), "job_id": self.id.job, "task": self.id.task, "owner": self.owner,
                "scheduler": self.scheduler, "program": self.program, "state": self.state,
                "submitted_at": self.submitted_at, "started_at": self.started_at, "ended_at": self.ended_at,
                "params": dict(self.params), "gpus": self.gpus, "best_mean_auroc": self.best_mean_auroc,
                "name": self.name, "tags": list(self.tags), "sweep": self.sweep_of or None, "label": self.label,
                "links": dict(self.links)}

    def labelled(self, name: str, tags: Sequence[str]) -> Run:
        return replace(self, name=name, tags=tuple(tags))


def runs_of_job(row: Mapping[str, Any], sweep: Mapping[str, Any] | None, run_prefix: str = "") -> list[Run]:
    """The runs of one job: its row as the jobs list shows it (job_summary), and for a sweep its view as its page
    shows it (sweep_summary): one run per task, the trial's sampled parameters over the sweep's spec. A sweep whose
    study is not read yet has its tasks from its plan alone. An unreadable record is no run."""
    spec = {k: v for k, v in (row.get("spec") or {}).items() if k not in NOT_HYPERPARAMETERS}
    if not spec:
        return []
    base = dict(job=row["id"], owner=row["user"], scheduler=row["scheduler"],
                program=str(spec.get("template", "")), submitted_at=row["submitted_at"],
                gpus=int(row["nodes"]) * int(row["gpus_per_node"]), run_prefix=run_prefix)
    if row.get("sweep") is None:
        return [_run(base, None, row["state"], spec, best=row.get("best_mean_auroc"), links=row.get("links"))]
    trials = (sweep or {}).get("trials") or [{"task": task, "state": "PENDING", "params": {}}
                                              for task in range(int(row["sweep"].get("trials", 0)))]
    return [_run(base, int(t["task"]), str(t["state"]), {**spec, **(t.get("params") or {})},
                 best=t.get("best_auroc"), started=t.get("started_at"), ended=t.get("ended_at"),
                 links=row.get("links"), trial=t.get("trial")) for t in trials]


def _run(base: dict[str, Any], task: int | None, state: str, params: dict[str, Any], best: Any = None,
         started: Any = None, ended: Any = None, links: Any = None, trial: Any = None) -> Run:
    """One run; a trial's TensorBoard run is its study's trial number's (the job scripts' `tensorboard/trial-N`),
    the whole sweep's until it has one."""
    job = base["job"]
    page = dict(links or {}).get("page", "")
    shown_links = {"page": page, "log": f"{page}/log" + ("" if task is None else f"?task={task}")} if page else {}
    return Run(id=RunId(job, task), owner=base["owner"], scheduler=base["scheduler"], program=base["program"],
               state=state, submitted_at=base["submitted_at"], params=params, gpus=base["gpus"],
               started_at=started, ended_at=ended, best_mean_auroc=best, sweep_of=job if task is not None else "",
               links=shown_links,
               run_prefix=base["run_prefix"] + (f"/tensorboard/trial-{trial}" if isinstance(trial, int) else ""))
