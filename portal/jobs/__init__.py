"""Training jobs: one API for notebooks and the dashboard.

    from portal import jobs
    job = jobs.submit({"template": "chexnet", "gpus_per_node": 2, "epochs": 2, "image_size": 64})
    job.id, job.state            # "42", "PENDING" -> "RUNNING" -> "COMPLETED"
    job.wait(timeout=600)        # the final state
    print(job.logs(tail=20))
    job.metrics()                # RunMetrics(images_per_sec=..., best_mean_auroc=..., per_class_auroc={...})
    jobs.jobs(); jobs.get("42"); job.cancel()

A job lives in `~/jobs/<cluster>/<id>/` (script, output.log, tensorboard/, checkpoints/, job.json), `<cluster>`
being the `cluster_name` setting: clusters that share the homes keep their jobs apart (portal.records.record). The
older layout's `~/jobs/<id>/` is still read (`jobs_old_layout`). The scheduler is config's `scheduler` unless given
(`scheduler=`; `backend=`, its old name, until portal.renamed.BACKEND_GOES): "slurm" (the cluster), "local"
(horovodrun on this machine) or "kubernetes" (an MPIJob in the user's namespace, which is also the job's record):
see portal.scheduler. Callers that act for a user (the dashboard runs as root, or as the hub's service account) pass
`user=`: every file and scheduler command is then run as that user (runuser, or Kubernetes impersonation), who only
ever reaches their own jobs; anyone else's job is "not found".
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from portal import settings
from portal.config import PortalConfig, load
from portal.errors import JobNotFound, SchedulerError, SchedulerUnavailable
from portal.jobs import budget
from portal.jobs.unreadable import UnreadableJob, UnreadableRecord
from portal.metrics import RunMetrics
from portal.mlflow_accounts import for_job
from portal.records.account import JobAccessError, JobUser, job_user
from portal.records.limits import JobLimits
from portal.records.record import (
    ENDED_STATES,
    JOB_ID,
    MAX_RECORD_BYTES,
    RECORD_FILE,
    JobRecord,
    RecordError,
    RecordPlace,
    cluster_jobs_dir,
    old_jobs_dir,
)
from portal.records.spec import JobSpec, JobSpecError, parse_job_spec
from portal.records.sweep import FIELD as SWEEP_FIELD
from portal.records.sweep import SweepPlan, SweepView, parse_sweep
from portal.renamed import BACKEND_GOES, OLD_SCHEDULER_NAME, moved_error, renamed_keyword, warn_renamed
from portal.scheduler.asker import Asker
from portal.scheduler.errors import NoAccounting, UnknownScheduler
from portal.scheduler.protocol import Person, Scheduler
from portal.scheduler.registry import SCHEDULERS, scheduler_for, scheduler_of_job
from portal.scheduler.usage import UsageReport

DEFAULT_POLL_S = 5.0
__all__ = ["SCHEDULERS", "Job", "JobAccessError", "JobLimits", "JobNotFound", "JobSpec", "JobSpecError",
           "NoAccounting", "RunMetrics", "SchedulerError", "SchedulerUnavailable", "UnknownScheduler",
           "UnreadableJob", "UnreadableRecord", "UsageReport", "cancel", "get", "get_many", "job_entries", "jobs",
           "limits", "render", "submit", "usage", "validate"]


def __getattr__(name: str) -> Any:
    """Each scheduler's error class by its old name here (`jobs.SlurmError`), with a warning until the date in
    portal.renamed: catch `jobs.SchedulerError`, which every scheduler's errors derive from."""
    return moved_error(__name__, name)


class Job:
    """One training job of one user, as its scheduler sees it now (every property asks afresh)."""

    def __init__(self, record: JobRecord, scheduler: Scheduler, user: Person, dir_stamp: str | None = None):
        self.record, self.scheduler, self.person = record, scheduler, user
        # The job directory's inode when this process made it (submit): what job_entries will list for it.
        self.dir_stamp = dir_stamp
        # Set by `submit`: why the job will wait to start, from a look at the cluster just before; "" otherwise.
        self.warning = ""

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def backend(self) -> str:
        """Its scheduler's name: deprecated, `job.scheduler.name` (portal.renamed)."""
        warn_renamed("Job.backend", "Job.scheduler.name", BACKEND_GOES)
        return self.record.scheduler

    @property
    def owner(self) -> str:
        return self.record.user

    @property
    def spec(self) -> JobSpec:
        return self.record.spec

    @property
    def job_dir(self) -> str:
        return str(self.record.job_dir)

    @property
    def submitted_at(self) -> str:
        return self.record.submitted_at

    @property
    def state(self) -> str:
        return self.scheduler.state(self.record, self.person)

    @property
    def done(self) -> bool:
        return self.state in ENDED_STATES

    def wait(self, timeout: float | None = None, poll: float = DEFAULT_POLL_S) -> str:
        """Block until the job has ended; its final state. TimeoutError after `timeout` seconds. A scheduler that
        does not answer for a while (slurmctld or the API server restarting) is asked again: the job runs on
        (see Asker)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        asker = Asker()
        while True:
            state, why = asker.ask(lambda: self.state)
            if why is not None:
                state = f"unknown: {why}"
            if state in ENDED_STATES:
                return state
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} is still {state} after {timeout} s")
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))

    def logs(self, tail: int | None = None, task: int | None = None) -> str:
        """The job's output (stdout and stderr of every worker); "" before it starts. A sweep's: one task's
        (`task`, default 0)."""
        return self.scheduler.logs(self.record, self.person, tail, task)

    def cancel(self) -> None:
        self.scheduler.cancel(self.record, self.person)

    def history(self) -> list[str]:
        """What happened across the job's runs ("requeued after node2 failed ...; resumed at epoch 3"); only Slurm
        runs a job again."""
        return self.scheduler.history(self.record, self.person)

    @property
    def plan(self) -> SweepPlan | None:
        """A sweep's plan (portal.records.sweep); None for a single run."""
        return self.record.sweep

    def sweep(self) -> SweepView:
        """A sweep's trials now: each task's parameters, state, AUROC, epochs, whether it was pruned; `best`."""
        if self.record.sweep is None:
            raise ValueError(f"job {self.id} is a single run, not a sweep")
        return self.scheduler.sweep(self.record, self.person)

    def model_card(self, task: int | None = None) -> dict[str, Any] | None:
        """What produced the run's checkpoint (programkit.model_card), as the run wrote it beside the checkpoint;
        None until it has (a run writes it when training ends). A sweep's: the trial of task `task`."""
        return self.scheduler.model_card(self.record, self.person, task)

    def epochs(self, task: int | None = None) -> tuple[dict[int, dict], str]:
        """The run's per-epoch record ({epoch: its schema-checked line}) and why any of it is missing; a sweep's:
        the trial of task `task`."""
        return self.scheduler.epochs(self.record, self.person, task)

    def metrics(self) -> RunMetrics:
        """Images/sec and AUROC so far, from the run's TensorBoard logdir."""
        return self.scheduler.metrics(self.record, self.person)

    def queued(self, snapshot: Any) -> Any:
        """The job's line in a snapshot of its scheduler's queue (portal.scheduler.snapshot), or None."""
        return self.scheduler.queued(snapshot, self.record)

    def to_dict(self) -> dict[str, Any]:
        sweep = {"sweep": self.plan.to_dict()} if self.plan is not None else {}
        return {"id": self.id, "scheduler": self.record.scheduler, OLD_SCHEDULER_NAME: self.record.scheduler,
                "user": self.record.user, "state": self.state,
                "submitted_at": self.submitted_at, "job_dir": self.job_dir, "spec": self.spec.to_dict(), **sweep}

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, scheduler={self.record.scheduler!r}, user={self.record.user!r})"


@renamed_keyword(OLD_SCHEDULER_NAME, "scheduler", BACKEND_GOES)
def limits(scheduler: str | None = None, user: str | None = None, groups: Sequence[str] | None = None,
           cfg: PortalConfig | None = None) -> JobLimits:
    """What the user may ask for on this scheduler now, with what is left of their weekly GPU-hours budget."""
    cfg = cfg or load()
    chosen = scheduler_for(cfg, scheduler)
    who = chosen.person(user, groups)
    return budget.budgeted(cfg, chosen, who, chosen.limits(who))


def _checked(spec: JobSpec | Mapping[str, Any], scheduler: str | None, user: str | None,
             groups: Sequence[str] | None, cfg: PortalConfig,
             job_limits: JobLimits | None = None) -> tuple[Scheduler, Person, JobSpec, JobLimits, SweepPlan | None]:
    chosen = scheduler_for(cfg, scheduler)
    who = chosen.person(user, groups)  # a Unix account (Slurm, local) or a Kubernetes identity
    raw = spec.to_dict() if isinstance(spec, JobSpec) else spec  # a JobSpec is checked again, not trusted
    sweep = None
    if isinstance(raw, Mapping) and SWEEP_FIELD in raw:  # a sweep: the job spec's fields are every trial's
        raw = dict(raw)
        sweep = raw.pop(SWEEP_FIELD)
        if not chosen.sweeps:
            raise JobSpecError(SWEEP_FIELD, f"this portal's {chosen.name} scheduler runs no sweeps (Slurm runs them "
                                            "as job arrays, Kubernetes as plain Jobs): submit single runs")
    job_limits = job_limits or chosen.limits(who)
    if job_limits.mail and isinstance(raw, Mapping) and "mail" not in raw and isinstance(who, JobUser):
        # The user's default for e-mail at a job's end.
        raw = {**raw, "mail": settings.read(who, cfg.user_settings_file).job_mail}
    checked = parse_job_spec(raw, job_limits, who.can_read_dir, sweep=sweep is not None)
    plan = parse_sweep(sweep, checked.epochs, job_limits, checked.gpus, template=checked.template,
                       at_once=lambda most: job_limits.runs_at_once(checked, most)) if sweep is not None else None
    if plan is not None:
        chosen.check_sweep(checked)  # what the scheduler's trials cannot be (Kubernetes: one pod each)
    budget.check(job_limits, checked, plan)  # the weekly GPU-hours, where submit (or the dashboard) gave them
    return chosen, who, checked, job_limits, plan


@renamed_keyword(OLD_SCHEDULER_NAME, "scheduler", BACKEND_GOES)
def validate(spec: JobSpec | Mapping[str, Any], scheduler: str | None = None, user: str | None = None,
             groups: Sequence[str] | None = None, cfg: PortalConfig | None = None) -> JobSpec:
    """The validated spec, with every default filled in; JobSpecError naming the field otherwise."""
    return _checked(spec, scheduler, user, groups, cfg or load())[2]


@renamed_keyword(OLD_SCHEDULER_NAME, "scheduler", BACKEND_GOES)
def validate_sweep(spec: Mapping[str, Any], scheduler: str | None = None, user: str | None = None,
                   groups: Sequence[str] | None = None, cfg: PortalConfig | None = None) -> SweepPlan:
    """A sweep request's plan, validated with every default filled in (its "sweep" field; the rest is every
    trial's job spec); JobSpecError naming the field otherwise."""
    plan = _checked({SWEEP_FIELD: {}, **spec}, scheduler, user, groups, cfg or load())[4]
    assert plan is not None
    return plan


@renamed_keyword(OLD_SCHEDULER_NAME, "scheduler", BACKEND_GOES)
def render(spec: JobSpec | Mapping[str, Any], scheduler: str | None = None, user: str | None = None,
           groups: Sequence[str] | None = None, cfg: PortalConfig | None = None) -> str:
    """What `submit` would submit: the batch script (slurm), shell script (local) or MPIJob (kubernetes)."""
    cfg = cfg or load()
    chosen = scheduler_for(cfg, scheduler)
    offline = chosen.configured_limits(chosen.person(user, groups))  # Kubernetes: no API server needed
    chosen, who, checked, job_limits, plan = _checked(spec, scheduler, user, groups, cfg, offline)
    return chosen.render(checked, who, job_limits.partition, plan) if plan else chosen.render(
        checked, who, job_limits.partition)


@renamed_keyword(OLD_SCHEDULER_NAME, "scheduler", BACKEND_GOES)
def submit(spec: JobSpec | Mapping[str, Any], scheduler: str | None = None, user: str | None = None,
           groups: Sequence[str] | None = None, cfg: PortalConfig | None = None,
           limits: JobLimits | None = None) -> Job:
    """Validate and submit a training job, or a sweep of them (a "sweep" field: portal.records.sweep); returns at
    once (the job may still be pending). `limits`: what the user may ask for, as the caller already knows it
    (the dashboard, from its shared view of the cluster); by default the scheduler is asked, with one look at the
    cluster that also gives the job's `warning` (on Slurm: why it will wait, such as "will wait for your server
    (job 4) to end: node1 has 20 of 24 GB free"). The scheduler enforces the quota again either way."""
    cfg = cfg or load()
    chosen, snapshot = scheduler_for(cfg, scheduler), None
    person = chosen.person(user, groups)
    if limits is None and chosen.queue_in_snapshot:
        snapshot = chosen.snapshot()
        limits = chosen.limits(person, snapshot)
    limits = budget.budgeted(cfg, chosen, person, limits or chosen.limits(person))  # the week's GPU-hours left
    chosen, who, checked, job_limits, plan = _checked(spec, scheduler, user, groups, cfg, limits)
    # The user's MLflow account, where the portal has a tracking server: rank 0 logs the run there (docs/mlflow.md).
    tracking, untracked = for_job(cfg, who.name)
    record, dir_stamp = chosen.submit(checked, who, job_limits.partition, plan, tracking=tracking)
    job = Job(record, chosen, who, dir_stamp)
    notes = [chosen.start_note(checked, who.name, snapshot) if snapshot is not None else "", untracked]
    job.warning = "; ".join(note for note in notes if note)
    return job


def _load(who: JobUser, job_id: str, cfg: PortalConfig, check: bool = True, text: str | None = None) -> Job:
    """A Slurm or local job, from its ~/jobs/<cluster>/<id>/job.json (`text`: as already read; or, where
    `jobs_old_layout` is on and this cluster has no directory of that id, the older layout's ~/jobs/<id>/job.json),
    checked with its scheduler (unless `check` is False: then the caller must ask the scheduler for the job's state,
    which makes the same check, before showing it). JobNotFound without a record; UnreadableRecord for one that is
    not a record of this user's job."""
    missing = JobNotFound(f"job {str(job_id)[:40]}: not found among {who.name}'s jobs")
    if not isinstance(job_id, str) or not JOB_ID.match(job_id):  # ids become paths: nothing like "../bob"
        raise missing
    job_dir = cluster_jobs_dir(who.home, cfg.cluster_name) / job_id
    text = text if text is not None else who.read_text(job_dir / RECORD_FILE, MAX_RECORD_BYTES)
    if text is None and cfg.jobs_old_layout and not who.exists(job_dir):  # mid-submit: no job.json yet
        job_dir = old_jobs_dir(who.home) / job_id
        text = who.read_text(job_dir / RECORD_FILE, MAX_RECORD_BYTES)
    if text is None:
        raise missing
    place = RecordPlace(job_id=job_id, user=who.name, job_dir=job_dir)
    try:  # a record copied from elsewhere, or edited to claim another job or user, is refused here
        record = JobRecord.from_json(text, expect=place)
    except RecordError as err:
        raise UnreadableRecord(UnreadableJob(job_id, who.name, str(place.job_dir), str(err))) from None
    job = Job(record, scheduler_for(cfg, record.scheduler), who)
    if check:
        job.scheduler.state(record, who)  # the scheduler's own check that the job is the user's
    return job


def get(job_id: str, user: str | None = None, groups: Sequence[str] | None = None,
        cfg: PortalConfig | None = None, check: bool = True) -> Job:
    """The user's job with this id; JobNotFound for an unknown id and for anyone else's job. `check=False` skips
    the scheduler's word on a Slurm or local job's owner (one command): for callers that take the job's state
    from the scheduler afterwards anyway (the dashboard's board), which raises JobNotFound the same way."""
    cfg = cfg or load()
    job_id = str(job_id)
    named = scheduler_of_job(job_id)
    keeper = scheduler_for(cfg, named) if named is not None else None
    if keeper is not None and not keeper.records_in_home:  # the scheduler keeps the record (a Job, an MPIJob)
        who = keeper.person(user, groups)
        try:
            return Job(keeper.load(who, job_id), keeper, who)
        except RecordError as err:  # an MPIJob of the user's whose annotations were edited
            raise UnreadableRecord(UnreadableJob(job_id, who.name, f"MPIJob {job_id}", str(err))) from None
    return _load(job_user(user, groups), job_id, cfg, check)


def get_many(job_ids: Sequence[str], user: str | None = None, groups: Sequence[str] | None = None,
             cfg: PortalConfig | None = None) -> dict[str, Job | JobNotFound | UnknownScheduler | UnreadableRecord]:
    """get(check=False) of each of job_entries' ids, or the error it raises (load_many)."""
    return load_many(job_user(user, groups), job_ids, cfg or load())


def load_many(who: JobUser, job_ids: Sequence[str], cfg: PortalConfig
              ) -> dict[str, Job | JobNotFound | UnknownScheduler | UnreadableRecord]:
    """_load(check=False) of each id, or its error: the records in the cluster's directory read as the user in one
    process per READ_MANY_AT_ONCE (a list of 50 jobs was 50 processes); one not read there is read alone."""
    mine = cluster_jobs_dir(who.home, cfg.cluster_name)
    texts = who.read_texts([mine / job_id / RECORD_FILE for job_id in job_ids if JOB_ID.match(job_id)],
                           MAX_RECORD_BYTES)
    found: dict[str, Job | JobNotFound | UnknownScheduler | UnreadableRecord] = {}
    for job_id in job_ids:
        try:
            found[job_id] = _load(who, job_id, cfg, False, texts.get(mine / job_id / RECORD_FILE, (None, ""))[0])
        except (JobNotFound, UnknownScheduler, UnreadableRecord) as err:
            found[job_id] = err
    return found


def job_entries(user: str | None = None, groups: Sequence[str] | None = None,
                cfg: PortalConfig | None = None) -> list[tuple[str, str]]:
    """(job id, stamp) of each of the user's job directories (`listed_jobs`), listed as the user in one process,
    nothing read or checked: the stamp (the directory's inode) changes when a directory is replaced, so a caller
    that keeps records reads job.json again only for new stamps. Not for Kubernetes, whose records are its Jobs
    and MPIJobs."""
    return listed_jobs(job_user(user, groups), cfg or load())


def listed_jobs(who: JobUser, cfg: PortalConfig) -> list[tuple[str, str]]:
    """(job id, inode) of each directory named like a job in `who`'s ~/jobs/<cluster>/ and, with
    `jobs_old_layout`, in ~/jobs/ itself where the cluster's directory has no job of that id (the cluster's own
    wins: `_load` reads it)."""
    mine, old = cluster_jobs_dir(who.home, cfg.cluster_name), old_jobs_dir(who.home)
    listed = who.list_dirs_inodes([mine, old] if cfg.jobs_old_layout else [mine])
    entries = {name: inode for name, inode in listed[mine] if JOB_ID.match(name)}
    for name, inode in listed.get(old, []):
        if JOB_ID.match(name):
            entries.setdefault(name, inode)
    return list(entries.items())


@renamed_keyword(OLD_SCHEDULER_NAME, "scheduler", BACKEND_GOES)
def jobs(user: str | None = None, groups: Sequence[str] | None = None, cfg: PortalConfig | None = None,
         scheduler: str | None = None) -> list[Job]:
    """The user's jobs, newest first: on Kubernetes its Jobs and MPIJobs in their namespace, else those of
    `job_entries` (each checked with its scheduler)."""
    cfg = cfg or load()
    chosen = scheduler_for(cfg, scheduler)
    if not chosen.records_in_home:
        who = chosen.person(user, groups)
        found = [Job(record, chosen, who) for record in chosen.records(who)]
    else:
        unix = job_user(user, groups)
        found = []
        for name, _ in listed_jobs(unix, cfg):
            try:
                found.append(_load(unix, name, cfg))
            except (JobNotFound, UnknownScheduler, UnreadableRecord):
                continue  # not a job directory of this user's, or not a record (get() says what is wrong)
    return sorted(found, key=lambda job: job.submitted_at, reverse=True)


def usage(user: str | None = None, groups: Sequence[str] | None = None, cfg: PortalConfig | None = None,
          everyone: bool = False, now: datetime | None = None) -> UsageReport:
    """This week's jobs and GPU-hours from the scheduler's accounting: the user's, or with `everyone` every user's
    (root only: admins see everyone). SchedulerUnavailable when accounting does not answer; NoAccounting where there
    is none."""
    cfg = cfg or load()
    chosen = scheduler_for(cfg)
    who = job_user() if everyone else chosen.person(user, groups)
    if everyone and who.uid != 0:
        raise JobAccessError("only root (the dashboard acting for an admin) may read every user's usage")
    return chosen.usage(who, everyone, now or datetime.now())


def cancel(job_id: str, user: str | None = None, groups: Sequence[str] | None = None,
           cfg: PortalConfig | None = None) -> None:
    """Cancel the user's job; JobNotFound for anyone else's (Slurm and the API server refuse that too)."""
    get(job_id, user, groups, cfg).cancel()
