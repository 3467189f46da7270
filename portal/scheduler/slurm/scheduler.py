"""The Slurm scheduler: training jobs from a batch script of the job kind's template, run with Slurm's own commands,
and the cluster's snapshot and limits.

`render_sbatch` and `limits_from` are pure (unit-tested without Slurm). The rest are the small impure steps, each
one Slurm command through the one runner (portal.scheduler.slurm.commands), run as the job's user:
`sbatch --parsable --hold`, `scontrol release`, `squeue --json` (portal.scheduler.slurm.json_answers), `sacct`,
`scancel`.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from portal.config import PortalConfig
from portal.errors import JobNotFound
from portal.inputs import ascii_digits
from portal.mlflow_accounts import JOB_FILE, Account, run_tags
from portal.quota import GpuQuota
from portal.records.account import READ_BOUNDED, READ_TIMEOUT_S, THEN_FAILED, JobUser, scheduler_calls
from portal.records.ids import anchored
from portal.records.limits import JobLimits
from portal.records.record import (
    COMPLETED,
    ENDED_STATES,
    EXIT_STATUS_FILE,
    FAILED,
    FINAL_STATE_FILE,
    PENDING,
    RECORD_FILE,
    UNKNOWN,
    JobRecord,
    exit_code,
    now_utc,
)
from portal.records.spec import WHOLE, JobSpec, JobSpecError
from portal.records.sweep import (
    RUNNING_STATES,
    SweepPlan,
    SweepStatusError,
    SweepView,
    read_status,
    sweep_outcome,
    sweep_view,
    task_states,
)
from portal.registrations import SCHEDULERS
from portal.scheduler.cluster import NodeHolding, QueuedJob, gpu_holders, holders_on, start_note, users_jobs
from portal.scheduler.home import JobsInHome
from portal.scheduler.slurm import history
from portal.scheduler.slurm.answers import job_unknown
from portal.scheduler.slurm.commands import SlurmCommands
from portal.scheduler.slurm.errors import JobDirError, SlurmError, SlurmRefused
from portal.scheduler.slurm.json_answers import SlurmAnswerError, read_sacct
from portal.scheduler.slurm.sbatch import (
    SLURM_JOB_ID,
    jobs_partition,
    limits_from,
    render_sbatch,
)
from portal.scheduler.slurm.servers import SlurmServers
from portal.scheduler.slurm.usage import usage_report
from portal.scheduler.snapshot import ClusterSnapshot
from portal.scheduler.usage import UsageReport, week_start
from programkit.sweep import PLAN_FILE

SLURM_ID = anchored(SCHEDULERS["slurm"].job_ids)  # its registered ids

POLICY_REFUSAL = "Job violates accounting/QOS policy"  # sbatch's words for a job over the association's limits
# Slurm commands run as a job's user (sbatch, scontrol, sacct, scancel), by name: the dashboard shows them to admins.
USER_SLURM_CALLS = scheduler_calls("slurm")


class SlurmScheduler(SlurmServers, JobsInHome):
    """Submit, watch, cancel and read training jobs on Slurm, always as the job's user; the cluster's snapshot; its
    servers' jobs, for the Slurm spawner (SlurmServers)."""

    name = "slurm"
    script_file = "job.sbatch"  # in the job's directory, beside job.json
    job_ids: ClassVar[re.Pattern[str]] = SLURM_ID  # a sweep's: its array's id
    sweeps = True  # a sweep is a job array (portal.records.sweep)
    queue_in_snapshot = True  # its jobs are in the snapshot's queue (`queued`)
    # what `state` reads once Slurm forgets a job
    state_files: tuple[tuple[str, int], ...] = ((FINAL_STATE_FILE, 64), (EXIT_STATUS_FILE, 64))

    def __init__(self, cfg: PortalConfig, run: Callable[[Sequence[str]], str] | None = None):
        self.cfg = cfg
        self.commands = SlurmCommands(cfg, counts=USER_SLURM_CALLS, fake=run)

    def _slurm(self, user: JobUser, *argv: str, input: str | None = None, check: bool = True) -> str:
        return self.commands.run(*argv, user=user, input=input, check=check)

    def snapshot(self, clock: Callable[[], float] = time.monotonic) -> ClusterSnapshot:
        return self.commands.snapshot(clock)

    def gpu_holders(self, node: str) -> dict[str, NodeHolding]:
        return holders_on(self.commands.queue().values(), node)  # one squeue, as root

    def limits(self, user: JobUser, snapshot: ClusterSnapshot | None = None,
               held: Sequence[tuple[str, int]] = ()) -> JobLimits:
        """What `user` may ask for now (see `limits_from`): from `snapshot` (no command) with `held`, the jobs
        submitted since it was taken; without one, asked of Slurm as the user."""
        if snapshot is None:
            snapshot = ClusterSnapshot(taken_at=0.0, queue=self._squeue(user),
                                       partitions=self.commands.partitions(user))
        queued = users_jobs(snapshot.queue, user.name)
        limits = limits_from(self.cfg, snapshot.partitions, self.quota(user, snapshot), len(queued) + len(held))
        return replace(limits, quota=limits.quota.with_submitted(held),
                       gpu_minutes_ahead=sum(job.gpu_minutes_ahead for job in queued))

    def quota(self, user: JobUser, snapshot: ClusterSnapshot) -> GpuQuota:
        """The user's GPU quota and what their servers and jobs in `snapshot` hold or claim of it (portal.quota's
        rule): the one figure the job form, the API and the spawn form (through `limits`: spawners.options) all show."""
        holders = gpu_holders(users_jobs(snapshot.queue, user.name))
        return self.cfg.user_gpu_quota(user.groups, holders)

    def configured_limits(self, user: JobUser) -> None:
        return None  # a partition's shape is Slurm's: a dry run asks it (as the user)

    def queued(self, snapshot: ClusterSnapshot, record: JobRecord) -> QueuedJob | None:
        if record.sweep is not None:  # the array's line is one of its tasks': its state is the tasks' together
            return None
        found = snapshot.queue.get(record.id)
        return found if found is not None and found.user == record.user else None

    def waiting(self, snapshot: ClusterSnapshot, record: JobRecord) -> QueuedJob | None:
        found = self.queued(snapshot, record)
        return found if found is not None and found.state == PENDING else None

    def start_note(self, spec: JobSpec, user: str, snapshot: ClusterSnapshot) -> str:
        """Why a job of `spec` just submitted will wait, from the nodes' free resources in `snapshot` (taken
        before the submit); "" when it can start now, or when the snapshot has no partitions to tell."""
        try:
            partition = jobs_partition(self.cfg, snapshot.partitions)
        except SlurmError:
            return ""
        return start_note(spec.nodes, spec.gpus_per_node, spec.workers_per_node * spec.cpus_per_task,
                          spec.memory_gb, partition, users_jobs(snapshot.queue, user))

    def _squeue(self, user: JobUser) -> dict[str, QueuedJob]:
        """Every job Slurm's controller remembers, as `user` asks (SlurmError when it does not answer)."""
        return self.commands.queue(user)

    def check_sweep(self, spec: JobSpec) -> None:
        """A trial is any job Slurm runs: a job array's task takes whatever a job may ask for."""

    def render(self, spec: JobSpec, user: JobUser, partition: str = "", plan: SweepPlan | None = None) -> str:
        return render_sbatch(spec, f"{self.jobs_dir(user)}/{SLURM_JOB_ID}", self.cfg, partition, plan)

    def submit(self, spec: JobSpec, user: JobUser, partition: str = "", plan: SweepPlan | None = None,
               tracking: Account | None = None) -> tuple[JobRecord, str]:
        """Submit held, make ~/jobs/<cluster>/<id>/ with the script and job.json, then release; (the record, the
        directory's inode).

        The job's directory is named after its Slurm id, which exists only once sbatch answers, and the job
        must not start before its directory (where Slurm opens its output file) exists. Submitting with --hold
        makes that race-free: the id is known, nothing runs, the directory is made, and `scontrol release` lets
        the job go. The directory, its files and the release are one process as the user (JobUser.make_job_dir);
        if any step fails the held job is cancelled and the directory removed, so nothing half-made ever runs.
        Slurm counts ids again from 1 when its state is reset (the box rebuilt), so an old job of this cluster may
        have this id's directory: it is kept, renamed (`<id>.replaced-<time>`), and jobs() no longer lists it.
        Another cluster's jobs, whatever their ids, are in that cluster's own directory and never meet these.
        """
        script = self.render(spec, user, partition, plan)
        try:
            answer = self._slurm(user, "sbatch", "--parsable", "--hold", input=script)
        except SlurmRefused as err:  # a limit of the user's association: their request, not Slurm being down
            if POLICY_REFUSAL not in err.said:
                raise
            raise JobSpecError(WHOLE, f"Slurm refused the job under your limits (at most {self.cfg.max_jobs_per_user} "
                                      f"jobs at once, and your GPU quota): {err.said.rsplit(': ', 1)[-1]}") from None
        job_id = answer.strip().split(";")[0]
        if not ascii_digits(job_id):
            raise SlurmError(f"sbatch answered {answer.strip()!r}, not a job id")
        job_dir = self.jobs_dir(user) / job_id
        record = JobRecord(id=job_id, scheduler=self.name, user=user.name, spec=spec, submitted_at=now_utc(),
                           job_dir=job_dir, sweep=plan)
        files = [(self.script_file, script, "700"), (RECORD_FILE, record.to_json(), "600")]
        if plan is not None:  # what every trial reads (programkit.sweep); released, the whole array goes
            files.append((PLAN_FILE, json.dumps(plan.file_dict(), indent=2) + "\n", "600"))
        if tracking is not None:  # rank 0's MLflow account (programkit.tracking), the user's alone
            files.append((JOB_FILE, tracking.job_file(run_tags(user.name, job_id, self.name, spec.template,
                                                               self.cfg.cluster_name)), "600"))
        USER_SLURM_CALLS.add("scontrol")  # run by make_job_dir's process, after the directory
        try:
            inode = user.make_job_dir(job_dir, files, replace=True,
                                      then=[str(self.cfg.slurm_bin_dir / "scontrol"), "release", job_id],
                                      env={"SLURM_CONF": str(self.cfg.slurm_conf_path)})
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
            self._slurm(user, "scancel", job_id, check=False)
            said = (err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else err.stderr or
                    "no message").strip()
            if getattr(err, "returncode", None) == THEN_FAILED:
                raise SlurmError(f"job {job_id} was cancelled: Slurm refused `scontrol release {job_id}`: "
                                 f"{said}") from err
            raise JobDirError(f"job {job_id} was cancelled: preparing {job_dir} failed: {said}") from err
        return record, inode

    def _job_facts(self, user: JobUser, job_id: str) -> QueuedJob | None:
        """The job as squeue tells it, while Slurm remembers it (MinJobAge after it ends); None once it does not
        (or, with PrivateData=jobs, when it is not the user's). SlurmError when Slurm does not answer: a
        controller that is down is not a job that has ended."""
        return self._squeue(user).get(job_id)

    def _slurm_answer(self, user: JobUser, *argv: str) -> tuple[str, str | None]:
        """(stdout, None) when the command succeeded, else ("", Slurm's message)."""
        try:
            return self._slurm(user, *argv), None
        except SlurmError as err:
            return "", str(err)

    def _check_owner(self, user: JobUser, facts: QueuedJob | None, job_id: str) -> None:
        # The directory says whose job it claims to be; Slurm says whose it is.
        if facts is not None and facts.user != user.name:
            raise JobNotFound(f"job {job_id}: not found among {user.name}'s jobs")

    def state(self, record: JobRecord, user: JobUser) -> str:
        """Slurm's state: squeue's (queued, running, or ended within MinJobAge), then sacct's (where accounting
        runs), then what the job itself left (its exit status, or the ended state once seen). A sweep's is its
        tasks' together (`sweep_state`)."""
        if record.sweep is not None:
            return self._sweep_state(record, user)
        facts = self._job_facts(user, record.id)
        self._check_owner(user, facts, record.id)
        state = facts.state if facts else None
        accounting_error = None
        if state is None:
            out, accounting_error = self._slurm_answer(user, "sacct", "-n", "-X", "-P", "-j", record.id, "-u",
                                                       user.name, "-o", "State")
            state = out.split("\n")[0].split(" ")[0].strip() or None
        if state is None:
            state = _left_behind(record, user)
        if state is None and accounting_error is not None:
            # Slurm's controller has forgotten the job and its accounting does not answer: not known, not ended.
            raise SlurmError(f"job {record.id} has left the queue and Slurm's accounting does not answer "
                             f"({accounting_error})")
        if state in ENDED_STATES:
            _remember(record, user, state)
        return state or UNKNOWN

    def _tasks(self, record: JobRecord, user: JobUser) -> dict[int, str]:
        """Each task's state, asked as the user (a sweep's trials are an array's tasks): Slurm's accounting for
        every task that has run, squeue's over it for those queued or running now (accounting hears of a job a
        moment after it is submitted). The only fields read are Slurm's ids and states: no user text."""
        try:
            accounted = task_states(self._slurm(user, "sacct", "-n", "-X", "-P", "-j", record.id, "-u", user.name,
                                                "-o", "JobID,State"), record.id)
        except SlurmRefused:
            accounted = {}
        # An array Slurm has forgotten (MinJobAge) is refused as an invalid id: nothing queued.
        queued = task_states(self._slurm(user, "squeue", "-h", "-r", "-j", record.id, "-u", user.name,
                                         "-o", "%i|%T", check=False), record.id)
        return {**accounted, **queued}

    def _sweep_state(self, record: JobRecord, user: JobUser) -> str:
        """RUNNING while a task runs, PENDING while the rest wait, then `sweep_outcome`: CANCELLED when any task
        was cancelled, COMPLETED when any ran to its end (a pruned trial's task ends COMPLETED too), else FAILED."""
        unanswered = None
        try:
            tasks = self._tasks(record, user)
        except SlurmError as err:
            tasks, unanswered = {}, err
        if not tasks:  # Slurm has forgotten it (or does not answer): what its directory kept, if it ended
            left = _left_behind(record, user)
            if left is not None:
                return left
            if unanswered is not None:
                raise SlurmError(f"sweep {record.id}: Slurm's accounting does not answer ({unanswered})")
            # Neither squeue nor sacct lists it: just after a cancel, the array has left the queue before
            # slurmdbd has its records (seen under load). Not known now, as for a single job: never "not found".
            return UNKNOWN
        states = set(tasks.values())
        if states & set(RUNNING_STATES):
            return "RUNNING"
        if PENDING in states:
            return PENDING
        state = sweep_outcome(states)
        _remember(record, user, state)
        return state

    def sweep(self, record: JobRecord, user: JobUser) -> SweepView:
        """The sweep's trials: the study's (programkit.sweep status, run as the user over their journal) beside
        Slurm's tasks. A study that cannot be read leaves the rows to Slurm and says why in `problem`."""
        assert record.sweep is not None
        try:
            tasks = self._tasks(record, user)
        except SlurmError:
            tasks = {}
        problem, trials = "", {}
        try:
            result = user.run([str(self.cfg.venv / "bin" / "python"), "-m", "programkit.sweep_cli", "status",
                               str(record.job_dir)], check=False, timeout=READ_TIMEOUT_S * 3)
            if result.returncode != 0:
                problem = f"the study could not be read: {result.stderr.strip()[-300:]}"
            else:
                trials = read_status(result.stdout, record.sweep)
        except subprocess.TimeoutExpired:
            problem = "the study could not be read in time"
        except SweepStatusError as err:
            problem = f"the study's answer was not understood ({err})"
        return sweep_view(record.sweep, trials, tasks, problem)

    def cancel(self, record: JobRecord, user: JobUser) -> None:
        """scancel as the user: Slurm itself refuses to cancel anyone else's job. A job Slurm does not know (ended
        and forgotten) and one that is not the user's are refused alike, JobNotFound: the refusal must not tell
        bob that alice's job exists (with PrivateData=jobs Slurm shows him neither). Any other refusal (the
        controller is down, the job is completing) is Slurm's, in its own words."""
        try:
            self._slurm(user, "scancel", record.id)
        except SlurmRefused as err:
            if job_unknown(err.said) or "denied" in err.said.lower():
                raise JobNotFound(f"job {record.id}: not in Slurm's queue for {user.name} (it has ended, or it is "
                                  f"not {user.name}'s)") from None
            raise
        if record.sweep is not None:  # every task is cancelled with the array: their trials end as FAIL
            try:
                user.run([str(self.cfg.venv / "bin" / "python"), "-m", "programkit.sweep_cli", "close",
                          str(record.job_dir)], check=False, timeout=READ_TIMEOUT_S * 3)
            except subprocess.TimeoutExpired:
                pass  # the page still shows each task as Slurm ended it

    def usage(self, user: JobUser, everyone: bool, now: datetime) -> UsageReport:
        """This week's jobs and GPU-hours from Slurm's accounting: the user's (sacct as them), or with `everyone`
        every user's (sacct -a, as the caller, who must be root: Slurm shows others' jobs to admins only).
        SlurmError when accounting (slurmdbd) does not answer."""
        query = ["sacct", self.commands.json_flag(), "-X", "--duplicates", "-S", f"{week_start(now):%Y-%m-%dT%H:%M:%S}",
                 "-E", f"{now:%Y-%m-%dT%H:%M:%S}", *(["-a"] if everyone else ["-u", user.name])]
        answer = self._slurm(user, *query)
        try:
            return usage_report(read_sacct(answer, None if everyone else user.name), now)
        except SlurmAnswerError as err:
            raise SlurmError(f"`{shlex.join(query[:2])}`: {err}") from None

    def history(self, record: JobRecord, user: JobUser) -> list[str]:
        """Lines for the runs Slurm ended and ran again (a node failed, the job was requeued, it resumed), from
        Slurm's accounting and the job's log, read as the user. [] for a job that ran once."""
        record.check_owner(user.name)
        try:
            runs = history.parse_runs(self._slurm(user, "sacct", "-D", "-X", "-P", "-n", "-j", record.id,
                                                  "-o", history.RUNS_FORMAT))
        except SlurmError as err:  # accounting is down: Slurm's controller still counts the restarts
            try:
                facts = self._job_facts(user, record.id)
            except SlurmError:
                facts = None  # the controller is down too: the history is told once Slurm answers again
            restarts = facts.restarts if facts else 0
            return [f"requeued {restarts} time(s); the details need Slurm's accounting, which does not answer "
                    f"now ({err})"] if restarts else []
        if len(runs) < 2:
            return []
        starts = [run.start for run in runs if run.start]
        events = history.parse_events(self._slurm(
            user, "sacctmgr", "-nP", "show", "event", f"start={min(starts):%Y-%m-%dT%H:%M:%S}",
            f"format={history.EVENTS_FORMAT}", check=False)) if starts else []
        # The log is the user's: a regular file, its first MAX_LOG_BYTES read, of those its first matching lines.
        script = f'{{ {READ_BOUNDED}\n}} | grep -a -E -m "$4" -- "$5" | head -c "$6"'
        try:
            marks = user.run(["/bin/bash", "-c", script, "marks", str(record.output_path),
                              str(history.MAX_LOG_BYTES), "0", str(history.MAX_MARKS), history.LOG_LINES,
                              str(history.MAX_MARKS_BYTES)], check=False, timeout=READ_TIMEOUT_S * 3).stdout
        except subprocess.TimeoutExpired:
            marks = ""  # where each run resumed is left out; the runs themselves are Slurm's
        return history.history_lines(runs, events, history.resumed_epochs(marks))


def _left_behind(record: JobRecord, user: JobUser) -> str | None:
    """The state a job's own files tell, once the scheduler has forgotten it."""
    # Both files are the user's to write: only an ended state or a small exit code is taken from them.
    final = (user.read_text(record.job_dir / FINAL_STATE_FILE, 64) or "").strip()
    if final in ENDED_STATES:
        return final
    status = exit_code(user.read_text(record.job_dir / EXIT_STATUS_FILE, 64))
    if status is not None:
        return COMPLETED if status == 0 else FAILED
    return None


def _remember(record: JobRecord, user: JobUser, state: str) -> None:
    final = record.job_dir / FINAL_STATE_FILE
    if user.read_text(final, 64) is None:
        try:
            user.write_text(final, state + "\n")
        except subprocess.CalledProcessError:
            pass  # the directory is gone or read-only: the state is still reported, just not kept


if TYPE_CHECKING:  # against the contract, with its own person (checked by `make lint`)
    from portal.scheduler.protocol import HostsServers

    def _conforms(slurm: SlurmScheduler) -> HostsServers[JobUser]:
        return slurm
