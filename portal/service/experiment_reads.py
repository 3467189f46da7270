"""JobBoard's reads for the experiments page (portal.service.board): a user's runs (each single job, each task of each
sweep) from the same rows and sweep views as the jobs list and a sweep's page; the chosen runs with their per-epoch
record and model card, each read as its owner through the bounded reader and checked against its schema
(Job.epochs, Job.model_card); the owners' names and tags (portal.service.run_labels).

Who sees what is the jobs' rule: a user's own runs; an admin's list and comparisons every user's. A run of someone
else's is "not found" (JobNotFound: a 404), as any job of theirs is; names and tags are set by the owner alone.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from portal.inputs import InputError
from portal.jobs import Job, UnreadableJob, UnreadableRecord
from portal.records.record import ENDED_STATES, UNREADABLE
from portal.scheduler.home import ModelCardError
from portal.service.experiments import Run, RunId, runs_of_job
from portal.service.run_labels import RunLabels
from portal.service.summary import job_key

if TYPE_CHECKING:
    from portal.config import PortalConfig
    from portal.records.sweep import SweepView
    from portal.service.background import TimedCache
    from portal.service.hub_user import HubUser

AnyJob = Job | UnreadableJob
LABELS_FILE = "portal/run-labels.sqlite3"  # under the state directory
log = logging.getLogger("portal.service")


class ExperimentReads:
    """The experiments page's reads, over the board's job list, lookups, sweep views and caches."""

    cfg: PortalConfig
    _metrics: TimedCache
    _run_labels: RunLabels | None = None

    if TYPE_CHECKING:
        def job_list(self, user: HubUser, everyone: Sequence[HubUser] = ()) -> dict[str, Any]: ...

        def get(self, user: HubUser, job_id: str, everyone: Sequence[HubUser] = (),
                check: bool = True) -> AnyJob: ...

        def summary(self, job: AnyJob, snapshot: Any = None, wait: bool = True,
                    viewer: str | None = None) -> dict[str, Any]: ...

        def sweep_of(self, job: AnyJob, state: str) -> SweepView | None: ...

        def _known(self, user: HubUser, job_id: str) -> AnyJob | None: ...

    @property
    def run_labels(self) -> RunLabels:
        if self._run_labels is None:
            self._run_labels = RunLabels(self.cfg.state_dir / LABELS_FILE)
        return self._run_labels

    @run_labels.setter
    def run_labels(self, store: RunLabels) -> None:
        self._run_labels = store

    def experiment_runs(self, user: HubUser, everyone: Sequence[HubUser] = ()) -> list[Run]:
        """The user's runs (an admin's: every user's), newest job first, a sweep's tasks in order, each with its
        owner's name and tags for it."""
        owners = {owner.name: owner for owner in (user, *everyone)}
        runs: list[Run] = []
        for row in self.job_list(user, everyone)["jobs"]:
            owner = owners.get(row["user"])
            job = self._known(owner, row["id"]) if owner is not None else None
            if row["state"] == UNREADABLE or not isinstance(job, Job):
                continue
            view = self.sweep_of(job, row["state"]) if job.plan is not None else None
            runs += runs_of_job(row, view.to_dict() if view is not None else None, job.record.run_prefix)
        return self._labelled(runs)

    def compared_runs(self, user: HubUser, ids: Sequence[RunId], everyone: Sequence[HubUser] = ()) -> list[Run]:
        """The chosen runs, in the order asked, with their per-epoch records and model cards. JobNotFound for a job
        that is not the user's (an admin: anyone's); InputError naming `runs` for a sweep without a task, a task of a
        single job, or a task the sweep does not have."""
        runs = []
        for wanted in ids:
            job = self._job_for(user, wanted, everyone)
            summary = self.summary(job, viewer=user.name)
            view = self.sweep_of(job, summary["state"])
            run = next(r for r in runs_of_job(summary, view.to_dict() if view is not None else None,
                                              job.record.run_prefix) if r.id == wanted)
            epochs, problem = self._epochs(job, wanted.task, summary["state"])
            card, card_problem = None, ""
            try:
                card = job.model_card(wanted.task)
            except ModelCardError as err:
                card_problem = str(err)[:300]
            runs.append(dataclasses.replace(run, epochs=epochs, epochs_problem=problem, card=card,
                                            card_problem=card_problem))
        return self._labelled(runs)

    def label_run(self, user: HubUser, wanted: RunId, name: object, tags: object) -> dict[str, Any]:
        """Name and tag one of the user's own runs (nobody else's, an admin's neither: JobNotFound as for any job
        not theirs); InputError naming `name` or `tags`, LabelsNotSaved (a 503) when the store cannot be written."""
        job = self._job_for(user, wanted, ())
        kept = self.run_labels.set(user.name, RunLabels.key(job.id, job.submitted_at, wanted.task), name, tags)
        log.info("label of run %s by %s: name %r, tags %s", wanted, user.name, kept["name"], kept["tags"])
        return {"run": str(wanted), **kept}

    def _job_for(self, user: HubUser, wanted: RunId, everyone: Sequence[HubUser]) -> Job:
        job = self.get(user, wanted.job, everyone)
        if isinstance(job, UnreadableJob):
            raise UnreadableRecord(job)
        plan = job.plan
        if plan is not None and wanted.task is None:
            raise InputError("runs", f"job {job.id} is a sweep: choose its trials as {job.id}:<task>, task 0-"
                                     f"{plan.trials - 1}")
        if plan is None and wanted.task is not None:
            raise InputError("runs", f"job {job.id} is a single run: it has no task {wanted.task}; choose it as "
                                     f"{job.id}")
        if plan is not None and wanted.task is not None and wanted.task >= plan.trials:
            raise InputError("runs", f"{wanted}: sweep {job.id} has tasks 0-{plan.trials - 1}")
        return job

    def _epochs(self, job: Job, task: int | None, state: str) -> tuple[dict[int, dict], str]:
        """The run's per-epoch record, read as its owner at most every metrics refresh, once for good when the job
        has ended."""
        key = ("epochs", *job_key(job), task)
        ended = state in ENDED_STATES
        cached = self._metrics.get(key, want_final=ended)
        if cached is None:
            cached = self._metrics.put(key, job.epochs(task), final=ended)
        return cached

    def _labelled(self, runs: list[Run]) -> list[Run]:
        """The runs, in the same order, each with its owner's name and tags for it."""
        labels = {owner: self.run_labels.of(owner) for owner in dict.fromkeys(run.owner for run in runs)}
        return [self.run_labels.apply(run.owner, [run], labels[run.owner])[0] for run in runs]
