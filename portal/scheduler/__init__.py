"""The scheduler layer: the one way the spawners, the training jobs (portal.jobs), the dashboard and the accounts
sync reach a scheduler.

    from portal.scheduler import scheduler_for
    scheduler = scheduler_for(cfg)            # the configured one: Slurm or Kubernetes (or "local" for jobs)
    scheduler.snapshot()                      # the cluster now: queue, partitions, nodes (cached: ClusterCache)
    scheduler.limits(user)                    # what the user may ask for now (one Limits type)
    record, stamp = scheduler.submit(spec, user, partition)
    scheduler.state(record, user); scheduler.cancel(record, user); scheduler.logs(record, user, tail=20)

Each implementation owns one command runner (Slurm: portal.scheduler.slurm_commands.SlurmCommands; Kubernetes: the
API client with impersonation), its snapshot, its limits and its job operations; the quota rule and its wording
are in portal.scheduler.quota, the errors in portal.scheduler.errors. Adding a scheduler means implementing
`Scheduler` (below) and its job templates (portal/jobs/templates/), and naming it in `SCHEDULERS`.

Submodules are imported when first asked for: the implementations read portal.jobs' records and specs, and
portal.jobs imports this package.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from portal.scheduler.errors import SchedulerRefused

if TYPE_CHECKING:
    from portal.config import PortalConfig
    from portal.jobs.record import JobRecord
    from portal.jobs.spec import JobLimits, JobSpec
    from portal.jobs.sweep import SweepView
    from portal.metrics import RunMetrics
    from portal.scheduler.snapshot import ClusterSnapshot
    from portal.slurm_json import QueuedJob
    from portal.usage import UsageReport

# name -> (module, class)
SCHEDULERS = {"slurm": ("portal.scheduler.slurm", "SlurmScheduler"),
              "local": ("portal.scheduler.local", "LocalScheduler"),
              "kubernetes": ("portal.scheduler.kubernetes", "KubernetesScheduler")}


class UnknownScheduler(SchedulerRefused, ValueError):
    """The scheduler named is not one this portal has."""


class NoAccounting(SchedulerRefused):
    """This scheduler keeps no accounting of GPU-hours (only Slurm's slurmdbd does)."""


class Scheduler(Protocol):
    """What every scheduler does for the portal. `user` is the scheduler's own view of the person: a Unix account
    (portal.jobs.account.JobUser) for Slurm and local jobs, an identity to impersonate (KubeUser) on Kubernetes."""

    name: str
    cfg: PortalConfig
    # each job's record is ~/jobs/<cluster>/<id>/job.json; else `records` and `load` ask the scheduler
    records_in_home: bool
    queue_in_snapshot: bool  # its jobs are in the snapshot's queue (`queued`); else each job's `state` is asked
    sweeps: bool  # it runs sweeps (portal.jobs.sweep): `submit` and `render` take a plan, `sweep` reads one

    def person(self, user: str | None, groups: Sequence[str] | None) -> Any:
        """The scheduler's view of the person (None: the calling process's user)."""

    def snapshot(self, clock: Callable[[], float] = ...) -> ClusterSnapshot:
        """The cluster now, asked once (the dashboard caches it: portal.scheduler.snapshot.ClusterCache)."""

    def limits(self, user: Any, snapshot: ClusterSnapshot | None = None,
               held: Sequence[tuple[str, int]] = ()) -> JobLimits:
        """What the user may ask for now; from `snapshot` when given (no command), with `held`: (job id, GPUs)
        of jobs submitted since it was taken."""

    def queued(self, snapshot: ClusterSnapshot, record: JobRecord) -> QueuedJob | None:
        """The job's line in the snapshot's queue while it is queued there and is its record's user's; None when
        it is not, or when this scheduler's jobs are not in the snapshot (ask `state`)."""

    def waiting(self, snapshot: ClusterSnapshot, record: JobRecord) -> QueuedJob | None:
        """The job's line in the snapshot while it waits there to start (its reason, Slurm's estimate of its
        start), is its record's user's; else None."""

    def start_note(self, spec: JobSpec, user: str, snapshot: ClusterSnapshot) -> str:
        """Why a job of `spec`, just submitted by `user`, will wait (the nodes it needs are busy, and with what of
        the user's own), from `snapshot` taken before the submit; "" when it can start now or cannot tell."""

    def render(self, spec: JobSpec, user: Any, partition: str = "") -> str: ...
    def submit(self, spec: JobSpec, user: Any, partition: str = "") -> tuple[JobRecord, str | None]: ...
    def state(self, record: JobRecord, user: Any) -> str: ...
    def cancel(self, record: JobRecord, user: Any) -> None: ...
    def logs(self, record: JobRecord, user: Any, tail: int | None = None) -> str: ...
    def metrics(self, record: JobRecord, user: Any) -> RunMetrics: ...
    def model_card(self, record: JobRecord, user: Any) -> dict[str, Any] | None: ...
    def history(self, record: JobRecord, user: Any) -> list[str]: ...
    def sweep(self, record: JobRecord, user: Any) -> SweepView:
        """A sweep's trials (where `sweeps`)."""
    def usage(self, user: Any, everyone: bool, now: Any) -> UsageReport:
        """GPU-hours from the scheduler's accounting; NoAccounting where it keeps none."""

    # Where records_in_home is False: the user's job records, as the scheduler keeps them.
    def records(self, user: Any) -> list[JobRecord]: ...
    def load(self, user: Any, job_id: str) -> JobRecord: ...


def scheduler_for(cfg: PortalConfig, name: str | None = None, run: Callable[[Sequence[str]], str] | None = None
                  ) -> Scheduler:
    """The scheduler called `name` (default: the configured `scheduler`). `run`: a fake Slurm's commands (tests;
    only Slurm runs commands)."""
    name = name or cfg.scheduler
    if name not in SCHEDULERS:
        raise UnknownScheduler(f"backend: {name!r} is not a backend; allowed: {', '.join(SCHEDULERS)}")
    module, cls = SCHEDULERS[name]
    implementation = getattr(importlib.import_module(module), cls)
    return implementation(cfg, run=run) if run is not None and name == "slurm" else implementation(cfg)
