"""The scheduler layer's contract: what the spawners, the training jobs (portal.jobs), the dashboard and the accounts
sync may ask of a scheduler.

    from portal.scheduler.registry import scheduler_for
    scheduler = scheduler_for(cfg)            # the configured one: Slurm or Kubernetes (or "local" for jobs)
    scheduler.snapshot()                      # the cluster now: queue, partitions, nodes (cached: ClusterCache)
    user = scheduler.person("alice", groups)  # the scheduler's own view of the person (its Person type)
    scheduler.limits(user)                    # what the user may ask for now (one Limits type)
    record, stamp = scheduler.submit(spec, user, partition)
    scheduler.state(record, user); scheduler.cancel(record, user); scheduler.logs(record, user, tail=20)

A scheduler's methods take only the person that its own `person` made: `Scheduler[P]` is generic in it (JobUser
for Slurm and local jobs, KubeUser on Kubernetes), so the type checker (`make lint`: mypy over portal/scheduler
and portal/service) refuses anyone else's type, such as the hub's user, where a scheduler's person belongs. Each
scheduler also owns the pattern of its job ids (`job_ids`): the dashboard's routes and portal.jobs.get are built
from `job_id_patterns()` (portal.scheduler.registry), not from a list of their own.

Each implementation owns one command runner (Slurm: portal.scheduler.slurm.commands.SlurmCommands; Kubernetes: the
API client with impersonation), its snapshot, its limits and its job operations; the quota rule and its wording
are in portal.quota, the errors in portal.errors (each scheduler's in its package's errors.py). Adding a
scheduler means a package of its own that implements `Scheduler` (below), its job templates
(portal/records/templates/), its section of the settings where it has settings of its own (a base of PortalConfig),
and one entry in `SCHEDULERS` (portal/registrations.py: its class, its job-id format, where its records are;
docs/architecture.md, "Where to add").

This module is the contract only: it imports no scheduler and nothing at run time (the types it names, under
TYPE_CHECKING), and a scheduler's package runs only the package's own empty `__init__.py` first, so that importing
one (its settings' section, from portal.config) never runs the registry or the settings. The registry names the
implementations as strings and imports one when first asked for; they never import each other
(tests/unit/test_layers.py). Each implementation is checked against the contract, with its own person, at the end of its
own module (an `if TYPE_CHECKING:` block that `make lint` reads), so that this module names none of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

if TYPE_CHECKING:
    from datetime import datetime

    from portal.config import PortalConfig
    from portal.metrics import RunMetrics
    from portal.mlflow_accounts import Account
    from portal.records.limits import JobLimits
    from portal.records.record import JobRecord
    from portal.records.spec import JobSpec
    from portal.records.sweep import SweepPlan, SweepView
    from portal.scheduler.cluster import NodeHolding, QueuedJob
    from portal.scheduler.snapshot import ClusterSnapshot
    from portal.scheduler.usage import UsageReport

class Person(Protocol):
    """What every scheduler's person has: a name, the groups the hub (LDAP) gives them, and which directories a
    job of theirs may read its data from."""

    @property
    def name(self) -> str: ...
    @property
    def groups(self) -> tuple[str, ...]: ...
    @property
    def is_caller(self) -> bool: ...
    def can_read_dir(self, path: str) -> bool: ...


P = TypeVar("P", bound=Person)


class Scheduler(Protocol[P]):
    """What every scheduler does for the portal. `user` (P) is the scheduler's own view of the person, made by its
    `person`: a Unix account (portal.records.account.JobUser) for Slurm and local jobs, an identity to impersonate
    (KubeUser) on Kubernetes.

    The contract, for each method below: its arguments and return, the errors it raises (all portal.errors kinds:
    JobNotFound for a job that is not the user's or not known, the scheduler's SchedulerUnavailable when it does not
    answer, SchedulerRefused when it says no), and whether it blocks. "Blocks" means it asks the cluster (a command,
    an API call) or reads the user's files, and may take up to the scheduler's timeout: the dashboard and the
    spawners call it in a thread pool, never on the event loop. "Pure" means it reads only its arguments and the
    settings. The contract suite (tests/unit/portal/scheduler/test_contract*.py) checks every scheduler against it.
    """

    name: str  # its name in SCHEDULERS, the `scheduler` setting and the API's and job.json's `scheduler`
    cfg: PortalConfig
    job_ids: ClassVar[re.Pattern[str]]  # its job ids, anchored: a path component and a route (job_id_patterns)
    # each job's record is ~/jobs/<cluster>/<id>/job.json; else the scheduler keeps them (KeepsRecords)
    records_in_home: bool
    queue_in_snapshot: bool  # its jobs are in the snapshot's queue (`queued`); else each job's `state` is asked
    sweeps: bool  # it runs sweeps (portal.records.sweep): `submit` and `render` take a plan, `sweep` reads one
    # The files of a job's directory that `state` reads, each with its read's limit: a list reads them for all its
    # jobs at once (portal.records.readahead); () where `state` reads none
    state_files: tuple[tuple[str, int], ...]

    def person(self, user: str | None, groups: Sequence[str] | None) -> P:
        """The scheduler's view of the person called `user` with the hub's `groups` (None: the calling process's
        user). Pure, but for a lookup of the account (Slurm, local: the passwd entry; KeyError for none)."""

    def snapshot(self, clock: Callable[[], float] = ...) -> ClusterSnapshot:
        """The cluster now, asked once: its queue (where `queue_in_snapshot`), node pools and nodes, stamped by
        `clock`. Blocks (the dashboard caches it: portal.scheduler.snapshot.ClusterCache); SchedulerUnavailable."""

    def gpu_holders(self, node: str) -> dict[str, NodeHolding]:
        """The running jobs and servers that hold GPUs on `node`, by the ids the snapshot's queue gives them: the
        node's GPU reader asks (portal.gpus.agent). Blocks; SchedulerUnavailable."""

    def limits(self, user: P, snapshot: ClusterSnapshot | None = None,
               held: Sequence[tuple[str, int]] = ()) -> JobLimits:
        """What the user may ask for now (node pools, the GPU quota with what they hold, the caps); from `snapshot`
        when given, with `held`: (job id, GPUs) of jobs submitted since it was taken. Blocks without a snapshot
        (with one: Slurm asks nothing, Kubernetes lists the user's pods); SchedulerUnavailable."""

    def configured_limits(self, user: P) -> JobLimits | None:
        """What the settings alone let the user ask for, with no call to the cluster: a dry run (`render`) is
        checked against these, and the cluster decides at submit. None where only the cluster can say (Slurm's
        partitions). Pure."""

    def queued(self, snapshot: ClusterSnapshot, record: JobRecord) -> QueuedJob | None:
        """The job's line in the snapshot's queue while it is queued there and is its record's user's; None when
        it is not, or when this scheduler's jobs are not in the snapshot (ask `state`). Pure."""

    def waiting(self, snapshot: ClusterSnapshot, record: JobRecord) -> QueuedJob | None:
        """The job's line in the snapshot while it waits there to start (its reason, Slurm's estimate of its
        start), is its record's user's; else None. Pure."""

    def start_note(self, spec: JobSpec, user: str, snapshot: ClusterSnapshot) -> str:
        """Why a job of `spec`, just submitted by `user`, will wait (the nodes it needs are busy, and with what of
        the user's own), from `snapshot` taken before the submit; "" when it can start now or cannot tell. Pure."""

    def check_sweep(self, spec: JobSpec) -> None:
        """What a sweep's trial of `spec` cannot be on this scheduler: JobSpecError naming the field (Kubernetes:
        a trial is one pod, on one node). Asked for every sweep, after the spec and the plan are parsed. Pure."""

    def render(self, spec: JobSpec, user: P, partition: str = "", plan: SweepPlan | None = None) -> str:
        """What `submit` would hand the scheduler for `spec` (a sweep's with `plan`), as text: the batch script
        (Slurm, local) or the objects as YAML (Kubernetes). Nothing is created. Pure, but for the user's account
        and settings; JobSpecError for what the scheduler cannot take."""

    def submit(self, spec: JobSpec, user: P, partition: str = "", plan: SweepPlan | None = None,
               tracking: Account | None = None) -> tuple[JobRecord, str | None]:
        """Start the job as the user: (its record, the stamp of its job directory where there is one, else None).
        With `tracking`, the user's MLflow account (portal.mlflow_accounts): its `job_file` (with `run_tags`) goes
        where the job's rank 0 reads it (DSPORTAL_MLFLOW_FILE), readable by the user alone. Nothing is left
        half-made when it fails. Blocks; SchedulerRefused (a policy, a quota), SchedulerUnavailable, UserStorage
        (Slurm: the user's job directory could not be made)."""

    def state(self, record: JobRecord, user: P) -> str:
        """The job's state now, in the one vocabulary of portal.records.states (a sweep's: its tasks' together).
        Blocks; JobNotFound, SchedulerUnavailable."""

    def cancel(self, record: JobRecord, user: P) -> None:
        """End the job and everything it started, as the user (the scheduler refuses anyone else's). Blocks;
        JobNotFound for a job it does not know or that is not the user's (alike), SchedulerRefused,
        SchedulerUnavailable."""

    def logs(self, record: JobRecord, user: P, tail: int | None = None, task: int | None = None) -> str:
        """The job's output (its last `tail` lines), read as the user through the bounded reader; "" before it
        starts. A sweep's: task `task`'s (default 0). Blocks; JobNotFound for a job that is not the user's (as
        for the reads below: JobRecord.check_owner), SchedulerUnavailable where the scheduler keeps it."""

    def metrics(self, record: JobRecord, user: P) -> RunMetrics:
        """Images/sec and AUROC so far (portal.metrics.RunMetrics), from the run's per-epoch record or TensorBoard
        files, read as the user. Blocks; an empty RunMetrics before the first epoch; JobNotFound."""

    def epochs(self, record: JobRecord, user: P, task: int | None = None) -> tuple[dict[int, dict], str]:
        """The run's per-epoch record (a sweep's: task `task`'s trial's), each line checked against
        programkit.schemas.EPOCH_RECORD: ({epoch: its line}, "") or, where not all of it could be read, what was and
        why not the rest. ({}, "") before the first epoch and for a sweep without `task`. Blocks; JobNotFound."""

    def model_card(self, record: JobRecord, user: P, task: int | None = None) -> dict[str, Any] | None:
        """The run's model card, checked against its schema: None before the run wrote one, ModelCardError
        (Untrusted) saying why for one that is not a card. A sweep's: its task's trial's. Blocks; JobNotFound."""

    def history(self, record: JobRecord, user: P) -> list[str]:
        """Lines for the runs the scheduler ended and ran again (a node lost, a requeue, a resume); [] for a job
        that ran once, or a scheduler that keeps no such history. Blocks; JobNotFound."""

    def sweep(self, record: JobRecord, user: P) -> SweepView:
        """A sweep's trials, the study's figures beside the scheduler's tasks (where `sweeps`; elsewhere its trials
        as never run). A study that cannot be read leaves the rows to the scheduler and says why. Blocks."""

    def usage(self, user: P, everyone: bool, now: datetime) -> UsageReport:
        """This week's jobs and GPU-hours up to `now` from the scheduler's accounting: the user's, or every user's
        with `everyone` (an admin). Blocks; NoAccounting where it keeps none, SchedulerUnavailable."""


class KeepsRecords(Scheduler[P], Protocol[P]):
    """A scheduler whose job records are its own objects (records_in_home False: Kubernetes' Jobs and MPIJobs),
    not job.json files in the homes that portal.jobs reads."""

    def records(self, user: P) -> list[JobRecord]:
        """Every job of the user's that the scheduler keeps, as records (a broken object is skipped, logged).
        Blocks; SchedulerUnavailable."""

    def load(self, user: P, job_id: str) -> JobRecord:
        """The user's job `job_id` as a record. Blocks; JobNotFound (another user's too), SchedulerUnavailable."""

    def records_stamp(self, user_name: str) -> Any:
        """A stamp of the jobs of the user called `user_name`, taken as the portal (nothing runs as the user):
        `stamp.same_as(later)` is true while none of those jobs was made, changed or deleted in between, so the
        dashboard lists them again (`records`) only once it is false. None where the scheduler cannot tell now: the
        caller lists every time. Pure but for what this process keeps (Kubernetes: one watch's counts; the first
        call starts the watch, a thread, and the stamp is None until it has listed); raises nothing."""


class HostsServers(Scheduler[P], Protocol[P]):
    """A scheduler whose jobs are also the hub's notebook servers (Slurm: batchspawner's job), with what its
    spawner asks of it beyond the form's limits (spawners.slurm_cluster), asked as the portal."""

    def server_address(self, node: str) -> str:
        """Where the hub reaches a server on `node` (Slurm: the node's NodeAddr: node names need not resolve on the
        hub's host); `node` itself when the scheduler does not say or answer. Blocks; raises nothing."""

    def server_job(self, job_id: str) -> QueuedJob | None:
        """The server's job `job_id` as the scheduler tells it, to explain a start that failed: None when the
        scheduler does not answer now (a controller restarting is not a job that ended); a job it no longer
        remembers is COMPLETED (long gone). Blocks; raises nothing."""
