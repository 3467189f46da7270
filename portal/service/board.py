"""The dashboard's view of training jobs: whose they are, what state they are in, what they have reached.

Every call here may block (Slurm commands, files read as the user): the handlers run them in a thread pool. Jobs
are read through `portal.jobs` acting for the user (`user=`, `groups=` from the hub), so a user reaches only their
own jobs; an admin's request is run as the job's owner. What a request costs, once a user's jobs are known:
- records: kept; job.json never changes after submit. The user's jobs (portal.jobs.job_entries) are listed again
  (as the user) at most every `rescan_s`, in the background, and only new directories' job.json are read; a submit
  through the dashboard adds its job at once. Concurrent first loads of the same user share one scan. Before
  listing again, the service compares the ctimes of the home, ~/jobs and ~/jobs/<cluster> (`jobs_dir_stamp`, an
  lstat of its own) with those at the last scan: unchanged, there is nothing new to list (a thousand idle users
  cost no process each every `rescan_s`).
- states: a queued or running job's from the shared cluster snapshot (one squeue for everyone, whose user field is
  Slurm's word on the owner); a job that left the queue asks Slurm itself (as the user, which checks the owner),
  at most once per refresh interval, and once for good when it has ended.
- metrics: read as the user (a process of theirs); an ended job's once for good, a running one's at most every
  `dashboard_metrics_refresh_s`. The list never waits for them: it shows what is known and reads in the background.
- usage: GPUs against the quota from the shared snapshot; this week's GPU-hours (sacct, as the user) at most every
  USAGE_REFRESH_S per user; the jobs page never waits for them either (portal.service.gpu_usage).
What one job's row holds is built in portal.service.summary (pure); the scans' records in portal.service.scans.
What is read from a user's home is checked (portal.records.record, portal.metrics): a job whose record is not one
is listed as "unreadable record" with the reason, and every other job, list and page carries on.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic

from portal import jobs as jobs_api
from portal import settings as user_settings
from portal.config import PortalConfig
from portal.errors import Busy, SchedulerError
from portal.inputs import one_line
from portal.jobs import Job, JobAccessError, JobNotFound, UnreadableJob, UnreadableRecord
from portal.quota import array_claim
from portal.records.account import JobUser, job_user
from portal.records.limits import JobLimits
from portal.records.readahead import reading_ahead
from portal.records.record import CANCELLED, ENDED_STATES, PENDING
from portal.scheduler.protocol import P, Scheduler
from portal.scheduler.registry import scheduler_for
from portal.scheduler.snapshot import ClusterCache, ClusterSnapshot
from portal.service.background import Coalescer, Refresher, TimedCache
from portal.service.experiment_reads import ExperimentReads
from portal.service.gpu_usage import USAGE_REFRESH_S, USAGE_RETRY_S, UsageViews
from portal.service.hub_user import HubUser
from portal.service.parts import UserParts
from portal.service.refusals import refusal_logged
from portal.service.run_reads import RunReads
from portal.service.scans import UserRecords, jobs_dir_stamp
from portal.service.summary import job_key, job_summary, unreadable_summary, waiting
from portal.service.views import ManyUsersViews
from portal.settings import Settings

log = logging.getLogger("portal.service")
AnyJob = Job | UnreadableJob
RESCAN_S = 10.0  # a job submitted from a notebook shows up in the dashboard within this (plus one request)


class SubmitInProgress(Busy, RuntimeError):
    """The user's previous submit is still being decided: one quota decision at a time per user."""

    retry_after_s = 1  # that one takes about a second (some ten commands)


class JobBoard(UsageViews, RunReads, ManyUsersViews, ExperimentReads, Generic[P]):
    """The jobs of the hub's users, on the configured scheduler. Generic in that scheduler's person (P): the board
    asks the scheduler for it (`person`) wherever a scheduler call needs one, never hands it the hub's user."""

    scheduler: Scheduler[P]

    def __init__(self, cfg: PortalConfig, cluster: ClusterCache, base_url: str = "/",
                 service_prefix: str = "/services/portal/", api: Any = jobs_api, rescan_s: float = RESCAN_S,
                 refresher: Refresher | None = None, clock: Callable[[], float] = time.monotonic,
                 dir_stamp: Callable[[str], Any] | None = None, parts: UserParts | None = None):
        self.cfg, self.cluster, self.api = cfg, cluster, api
        self.scheduler = scheduler_for(cfg)
        self._dir_stamp = dir_stamp or (functools.partial(jobs_dir_stamp, cluster=cfg.cluster_name)
                                        if self.scheduler.records_in_home else lambda user: None)
        self.base_url, self.service_prefix = base_url, service_prefix
        self.rescan_s, self._clock = rescan_s, clock
        self._refresher = refresher or Refresher()
        self._parts = parts or UserParts(clock=clock)  # each user's part of a view of several users (views.py)
        self._scans = Coalescer()
        self._records: dict[str, UserRecords] = {}
        self._records_lock = threading.Lock()
        self._states = TimedCache(cfg.dashboard_refresh_s, clock)  # jobs that left the queue and have not ended
        self._metrics = TimedCache(cfg.dashboard_metrics_refresh_s, clock)
        self._history = TimedCache(cfg.dashboard_metrics_refresh_s, clock)
        self._usage = TimedCache(USAGE_REFRESH_S, clock)
        self._usage_failed = TimedCache(USAGE_RETRY_S, clock)  # why there is no report, when accounting failed
        self._elapsed: dict[tuple[str, str, str], str] = {}  # last elapsed seen in squeue, for jobs that left it
        self._ended: dict[tuple[str, str, str], str] = {}  # an ended job's state never changes: ask Slurm once
        # What this service did to Slurm jobs that the shared squeue answer may not show yet, by when it was done
        # (self._clock): jobs submitted (key -> (done at, GPUs)) and cancelled (Slurm job id -> done at). Kept
        # until an answer asked after them (ClusterSnapshot.asked_at) shows them.
        self._submitted: dict[tuple[str, str, str], tuple[float, int]] = {}
        self._cancelled: dict[str, float] = {}
        self._acted_lock = threading.Lock()
        self._submit_locks: dict[str, threading.Lock] = {}  # per user: one quota decision at a time (submit)

    def stop(self) -> None:
        """The background reads that have not started are dropped (see app.stop_work)."""
        self._refresher.stop()
        self._parts.stop()

    # --- reading ---

    def _scan(self, user: HubUser) -> UserRecords:
        """List the user's ~/jobs (as them) and read the job.json of directories not seen before."""
        scanned_at = self._clock()
        with self._records_lock:
            known = dict(self._records[user.name].jobs) if user.name in self._records else {}
        dir_stamp = self._dir_stamp(user.name)  # before listing: a change meanwhile makes the next one differ
        found: dict[str, tuple[str | None, AnyJob]]
        if not self.scheduler.records_in_home:  # the records are the scheduler's (Jobs, MPIJobs): one call lists them
            found = {job.id: ("", job) for job in self.api.jobs(user=user.name, groups=user.groups, cfg=self.cfg)}
        else:
            entries = self.api.job_entries(user=user.name, groups=user.groups, cfg=self.cfg)
            new = [job_id for job_id, stamp in entries if job_id not in known or known[job_id][0] != stamp]
            # Read together; the owner is checked with the scheduler when the job's state is asked (state_of).
            loaded = self.api.get_many(new, user=user.name, groups=user.groups, cfg=self.cfg) if new else {}
            found = {}
            for job_id, stamp in entries:
                job = loaded.get(job_id)
                if job is None:  # known, its directory the same
                    found[job_id] = known[job_id]
                elif isinstance(job, Job):
                    found[job_id] = (stamp, job)
                elif isinstance(job, UnreadableRecord):
                    # No stamp: read again at the next scan (a record being written may just be incomplete).
                    found[job_id] = (None, job.job)
                # else not a job directory of this user's (or mid-submit: job.json not written yet)
        records = UserRecords(scanned_at, found, dir_stamp)
        with self._records_lock:
            self._records[user.name] = records
        return records

    def _jobs_of(self, user: HubUser) -> list[AnyJob]:
        """The user's jobs as known; the first time scanned now (shared with concurrent requests), later rescanned
        in the background once `rescan_s` has passed."""
        with self._records_lock:
            records = self._records.get(user.name)
        if records is None:
            records = self._scans.run(user.name, lambda: self._scan(user))
        elif self._clock() - records.scanned_at >= self.rescan_s:
            # A record without a stamp (unreadable: perhaps half written; or just submitted) is read again at
            # the next scan whatever the directory says: its job.json changes inside, not in ~/jobs.
            settled = all(stamp is not None for stamp, _ in records.jobs.values())
            if settled and records.dir_stamp is not None and records.dir_stamp.same_as(self._dir_stamp(user.name)):
                records.scanned_at = self._clock()  # nothing to list: look again in rescan_s
            else:
                self._refresher.start(("scan", user.name),
                                      lambda: self._scans.run(user.name, lambda: self._scan(user)), owner=user.name)
        return [job for _, job in records.jobs.values()]

    def _remember_job(self, job: Job) -> None:
        """A job just submitted through the dashboard: listed at once, with the stamp of the directory that its
        submit made (unknown: read again at the next rescan)."""
        with self._records_lock:
            records = self._records.get(job.record.user)
            if records is not None:
                records.jobs[job.id] = (job.dir_stamp, job)

    def _since(self, snapshot: ClusterSnapshot) -> tuple[dict[tuple[str, str, str], int], set[str]]:
        """The jobs this service submitted (key -> GPUs) and cancelled (ids) after `snapshot`'s squeue was asked;
        what an older answer showed is forgotten."""
        with self._acted_lock:
            for key in [k for k, (done_at, _) in self._submitted.items() if done_at < snapshot.asked_at]:
                del self._submitted[key]
            for job_id in [j for j, done_at in self._cancelled.items() if done_at < snapshot.asked_at]:
                del self._cancelled[job_id]
            return {key: gpus for key, (_, gpus) in self._submitted.items()}, set(self._cancelled)

    def limits_now(self, user: HubUser, snapshot: ClusterSnapshot | None = None) -> JobLimits:
        """What the user may submit now, from the shared squeue and scontrol answer (no command as the user), with
        the jobs this service submitted or cancelled since, and their weekly GPU-hours left (`budgeted`). The
        scheduler's own limit on the user (Slurm's association, Kubernetes's ResourceQuota) still holds for whatever
        this does not see (jobs from a terminal in the last refresh interval)."""
        snapshot = snapshot or self.cluster.snapshot()
        submitted, cancelled = self._since(snapshot)
        since = [(job_id, gpus) for (owner, job_id, _), gpus in submitted.items()
                 if owner == user.name and job_id not in snapshot.queue]
        # from the snapshot: only the user's name and groups are read, no command runs as them on Slurm
        person = self.scheduler.person(user.name, user.groups)
        return self.budgeted(user, self.scheduler.limits(person, snapshot.without(cancelled), since))

    def state_of(self, job: Job, snapshot: ClusterSnapshot) -> tuple[str, str]:
        """(state, elapsed): from the shared squeue answer while the job is queued, else from the job itself (which
        checks with the scheduler that the job is its user's: JobNotFound otherwise)."""
        queued = job.queued(snapshot)
        key = job_key(job)
        if queued is not None:
            self._elapsed[key] = queued.elapsed
            return queued.state, queued.elapsed
        if key not in self._ended:
            with self._acted_lock:
                submitted = self._submitted.get(key)
            if submitted is not None and snapshot.asked_at < submitted[0]:
                return PENDING, ""  # submitted (held, then released) after this squeue was asked
            state = self._states.get(key)
            if state is None:
                state = self._keep_state(key, job.state)
            if state not in ENDED_STATES:
                return state, self._elapsed.get(key, "")
        return self._ended[key], self._elapsed.get(key, "")

    def _keep_state(self, key: tuple[str, str, str], state: str) -> str:
        """An ended state for good; any other for the refresh interval."""
        if state in ENDED_STATES:
            self._ended[key] = state
            self._states.drop(key)
        else:
            self._states.put(key, state)
        return state

    def prime_states(self, jobs: Sequence[AnyJob], snapshot: ClusterSnapshot) -> None:
        """The states state_of would ask of these jobs one by one, asked now with their `state_files` read in one
        process as their owner (portal.records.readahead). A state that fails here is left to state_of."""
        with self._acted_lock:
            submitted = set(self._submitted)
        todo = [job for job in jobs if isinstance(job, Job) and job.scheduler.state_files
                and job.queued(snapshot) is None and job_key(job) not in self._ended
                and job_key(job) not in submitted and self._states.get(job_key(job)) is None]
        owner = todo[0].person if todo else None
        if len(todo) < 2 or not isinstance(owner, JobUser) or any(job.person != owner for job in todo):
            return  # one job is asked as before; the jobs of one list are one owner's
        ahead = reading_ahead(owner, ((job.record.job_dir / name, limit) for job in todo
                                      for name, limit in job.scheduler.state_files))
        for job in todo:
            with contextlib.suppress(JobNotFound, SchedulerError):
                self._keep_state(job_key(job), job.scheduler.state(job.record, ahead))

    def summary(self, job: AnyJob, snapshot: ClusterSnapshot | None = None, wait: bool = True,
                viewer: str | None = None) -> dict[str, Any]:
        """What the list and the API show of the job; `wait=False`: with the metrics known now (see known_metrics).
        `viewer`: who reads it, when it may be someone else (an admin): their words name the owner's jobs."""
        if isinstance(job, UnreadableJob):
            return unreadable_summary(job, self.service_prefix)
        snapshot = snapshot or self.cluster.snapshot()
        state, elapsed = self.state_of(job, snapshot)
        metrics = None
        if state != "PENDING":  # nothing written yet; spares a process run as the user
            metrics = self.metrics_of(job, state) if wait else self.known_metrics(job, state)
        whose = "your" if viewer in (None, job.record.user) else f"{job.record.user}'s"
        waits = waiting(job.scheduler.waiting(snapshot, job.record), snapshot, whose=whose) if state == "PENDING" \
            else None
        return job_summary(job, state, elapsed, metrics, self.base_url, self.service_prefix, waits)

    def get(self, user: HubUser, job_id: str, everyone: Sequence[HubUser] = (), check: bool = True) -> AnyJob:
        """The job, if it is the user's (or the user is an admin); JobNotFound otherwise, for either reason. A job
        directory of theirs whose record is not one is an UnreadableJob (shown, never acted on). `check=False`:
        the scheduler is not asked whose the job is, for a caller whose next step asks it (cancel). An admin's
        lookup among the others' records never waits for one user's past the deadline (`find_among`)."""
        try:
            return self.api.get(job_id, user=user.name, groups=user.groups, cfg=self.cfg, check=check)
        except UnreadableRecord as err:
            return err.job
        except JobNotFound:
            if not user.admin:
                raise
        queued = self.cluster.snapshot().queue.get(str(job_id))
        return self.find_among(user, str(job_id), [u for u in everyone if queued is None or u.name == queued.user],
                               check)

    # --- acting ---

    def submit(self, user: HubUser, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Submit for the user, checked against what they may ask for now (`limits_now`). A Slurm job is PENDING
        when its submit returns (released a moment ago): its state is not asked of Slurm, and until the shared
        squeue answer shows it the list says PENDING.

        One submit at a time per user: the quota check, the submit and counting the new job are one decision, so
        two racing submits cannot both pass on the same free GPUs. A submit while the user's last is still being
        decided is refused (SubmitInProgress) rather than queued: a user's burst holds one worker, never the pool
        that everybody's submits share."""
        with self._acted_lock:
            decision = self._submit_locks.setdefault(user.name, threading.Lock())
        with refusal_logged("submit", f"submit by {user.name}"):
            if not decision.acquire(blocking=False):
                raise SubmitInProgress(f"{user.name}'s previous submit is still being decided (one at a time, so "
                                       "that each is checked against the GPUs the others took); send it again once "
                                       "that one has answered")
            try:
                snapshot = self.cluster.snapshot()
                job = self.api.submit(spec, user=user.name, groups=user.groups, cfg=self.cfg,
                                      limits=self.limits_now(user, snapshot))
                self._remember_job(job)
                if job.scheduler.queue_in_snapshot:
                    with self._acted_lock:
                        # a sweep: none of its trials runs yet (portal.quota.array_claim)
                        claim = (array_claim(job.spec.gpus, job.plan.trials, 0, job.plan.parallel)
                                 if job.plan is not None else job.spec.gpus)
                        self._submitted[job_key(job)] = (self._clock(), claim)
            finally:
                decision.release()
        sweep = f", a sweep of {job.plan.trials} trials, {job.plan.parallel} at once" if job.plan else ""
        log.info("submit by %s: job %s on %s, %d node(s) x %d GPU(s), %d epoch(s)%s", user.name, job.id,
                 job.scheduler.name, job.spec.nodes, job.spec.gpus_per_node, job.spec.epochs, sweep)
        state = PENDING if job.scheduler.queue_in_snapshot else job.state
        warning = job.scheduler.start_note(job.spec, user.name, snapshot)
        return {**job_summary(job, state, "", None, self.base_url, self.service_prefix), "warning": warning}

    def cancel(self, user: HubUser, job_id: str, everyone: Sequence[HubUser] = ()) -> Job:
        """Cancel the user's own job, as them. The owner is checked once, by the cancel itself (Slurm's word on the
        job's user, then scancel as them), not also by `get`. A Slurm job that scancel accepted has ended
        CANCELLED: kept as its final state, so the lists of a user who cancels often run no command for it
        afterwards. An admin, who sees every user's jobs, cancels only their own: the portal never acts as another
        user on the scheduler (JobAccessError, a 403; docs/security.md), where the cancel would be recorded as
        that user's."""
        with refusal_logged("cancel", f"cancel of job {one_line(job_id)} by {user.name}"):
            job = self._cancel(user, job_id, everyone)
        log.info("cancel of job %s by %s: cancelled on %s", job.id, user.name, job.scheduler.name)
        return job

    def _cancel(self, user: HubUser, job_id: str, everyone: Sequence[HubUser]) -> Job:
        known = self._known(user, job_id)
        job = known if known is not None and not isinstance(known, UnreadableJob) else \
            self.get(user, job_id, everyone, check=False)  # a broken record is read again: it may be fixed
        if job.owner != user.name:  # only an admin gets here with another user's job: `get` hides it from others
            raise JobAccessError(f"job {job_id} is {job.owner}'s: admins see every user's jobs but cancel only "
                                 f"their own ({job.owner} cancels it, or a Slurm operator with scancel)")
        if isinstance(job, UnreadableJob):
            raise UnreadableRecord(job)  # nothing a broken record says is acted on
        try:
            job.cancel()
        except JobNotFound:
            if job is not known:
                raise
            # Refused on a record kept from an earlier read: answered from the record as it is now (gone, it
            # answers as any job that does not exist; Slurm may reuse the id for someone else's job).
            job = self.get(user, job_id, everyone, check=False)
            if isinstance(job, UnreadableJob):
                raise UnreadableRecord(job) from None
            job.cancel()
        self._states.drop(job_key(job))  # the snapshot shows the cancel at its next refresh
        if job.scheduler.queue_in_snapshot:  # a local job's cancel after its end succeeds and changes nothing
            self._ended[job_key(job)] = CANCELLED
            with self._acted_lock:
                self._cancelled[job.id] = self._clock()
        return job

    def _known(self, user: HubUser, job_id: str) -> AnyJob | None:
        """The user's own job as last read from their ~/jobs (or made by a submit here), None if not known: its
        record is not read again to act on it, as the action itself runs as the user (Slurm refuses them anyone
        else's job)."""
        with self._records_lock:
            records = self._records.get(user.name)
            found = records.jobs.get(str(job_id)) if records is not None else None
        return found[1] if found is not None else None

    def limits(self, user: HubUser) -> JobLimits:
        """What the submit form offers: the limits a submit is checked against (`limits_now`)."""
        return self.limits_now(user)

    def user_settings(self, user: HubUser) -> Settings:
        """The user's own settings (portal.settings), read as them from their home: Slurm's users only."""
        return user_settings.read(self._home_user(user), self.cfg.user_settings_file)

    def save_user_settings(self, user: HubUser, given: Mapping[str, Any]) -> Settings:
        """Change the user's settings (InputError naming a field that is not allowed), written as them."""
        saved = user_settings.write(self._home_user(user), dict(given), self.cfg.user_settings_file)
        log.info("settings of %s: %s", user.name, saved.to_dict())
        return saved

    def _home_user(self, user: HubUser) -> JobUser:
        if not self.scheduler.records_in_home:
            raise JobAccessError(f"settings are kept in the user's home, which the {self.scheduler.name} "
                                 "scheduler does not reach; there are none to change here")
        return job_user(user.name, user.groups)
