"""JobBoard's reads of what a job's run wrote (portal.service.board): its metrics, a sweep's trials, its history
across requeues and its log tail, each cached as the board's settings say (read now, in the background, or once
for good when the job has ended). A broken record (UnreadableJob) is never read: its page says why."""

from __future__ import annotations

from portal.config import PortalConfig
from portal.jobs import Job, RunMetrics, UnreadableJob
from portal.records.record import ENDED_STATES
from portal.records.sweep import SweepView
from portal.service.background import Refresher, TimedCache
from portal.service.summary import job_key

AnyJob = Job | UnreadableJob


class RunReads:
    """JobBoard's reads of a job's run, over its settings, its background refresher and its caches."""

    cfg: PortalConfig
    _refresher: Refresher
    _metrics: TimedCache
    _history: TimedCache

    def metrics_of(self, job: AnyJob, state: str) -> RunMetrics:
        """The job's metrics, read now unless known (for good once it has ended)."""
        if isinstance(job, UnreadableJob):
            return RunMetrics()
        key = job_key(job)
        ended = state in ENDED_STATES
        cached = self._metrics.get(key, want_final=ended)
        if cached is None:
            cached = self._metrics.put(key, job.metrics(), final=ended)
        return cached

    def sweep_of(self, job: AnyJob, state: str) -> SweepView | None:
        """A sweep's trials (a process of the user's reads the study), at most every metrics refresh while it
        runs, once for good when it has ended; None for a single run."""
        if isinstance(job, UnreadableJob) or job.plan is None:
            return None
        key = ("sweep", *job_key(job))
        ended = state in ENDED_STATES
        cached = self._metrics.get(key, want_final=ended)
        if cached is None:
            view = job.sweep()
            cached = self._metrics.put(key, view, final=ended and not view.problem)
        return cached

    def known_metrics(self, job: Job, state: str) -> RunMetrics | None:
        """The job's metrics as known now, never waiting: a missing or stale value is read in the background
        (what was known meanwhile is shown; nothing from a run for a job that has just ended)."""
        key = job_key(job)
        ended = state in ENDED_STATES
        cached = self._metrics.get(key, want_final=ended)
        if cached is None:
            self._refresher.start(("metrics", key), lambda: self.metrics_of(job, state), owner=job.record.user)
            if not ended:
                cached = self._metrics.get_any(key)
        return cached

    def history(self, job: AnyJob) -> list[str]:
        """What happened across the job's runs (requeues after node failures), re-read at most every
        `dashboard_metrics_refresh_s`, for good once the job has ended."""
        if isinstance(job, UnreadableJob):
            return []
        key = job_key(job)
        cached = self._history.get(key)
        if cached is None:
            cached = self._history.put(key, job.history(), final=job.done)
        return cached

    def log_tail(self, job: AnyJob, lines: int | None = None, task: int | None = None) -> str:
        """The last lines of the job's output (a sweep's: of its task `task`)."""
        if isinstance(job, UnreadableJob):
            return ""  # its page says why; its directory is not read on the word of a broken record
        return job.logs(tail=lines or self.cfg.dashboard_log_lines, task=task)
