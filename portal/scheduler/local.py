"""Training jobs on this machine (a laptop, a workstation): `horovodrun -np N -H localhost:N` started detached.

`render_local` is pure, like the Slurm renderer. A job is `~/jobs/<cluster>/local-<time>-<random>/`: the script
writes its PID (its session and process group id), its output, and its exit status; cancelling marks the job
cancelled and signals its process group.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from portal.config import PortalConfig
from portal.inputs import ascii_digits
from portal.mlflow_accounts import JOB_FILE, Account, run_tags
from portal.quota import GpuQuota
from portal.records.account import JobUser
from portal.records.ids import anchored
from portal.records.limits import JobLimits, Pool
from portal.records.record import (
    CANCELLED,
    COMPLETED,
    EXIT_STATUS_FILE,
    FAILED,
    OUTPUT_FILE,
    PENDING,
    RECORD_FILE,
    RUNNING,
    TIMEOUT,
    JobRecord,
    exit_code,
    now_utc,
)
from portal.records.spec import JobSpec, JobSpecError
from portal.records.sweep import FIELD as SWEEP_FIELD
from portal.records.sweep import SweepPlan, SweepView, sweep_view
from portal.records.templating import job_environment, launch_template, program_values, programs_with
from portal.registrations import SCHEDULERS
from portal.scheduler.cluster import NodeHolding
from portal.scheduler.errors import NoAccounting
from portal.scheduler.home import JobsInHome
from portal.scheduler.snapshot import ClusterSnapshot
from portal.scheduler.usage import UsageReport

LOCAL_ID = anchored(SCHEDULERS["local"].job_ids)  # its registered ids

PID_FILE = "pid"
CANCELLED_FILE = "cancelled"
TIMEOUT_EXIT = 124  # timeout(1)'s exit status when the limit struck
PID = re.compile(r"^[1-9][0-9]{0,9}\Z")
CANCEL_GRACE_S = 10  # TERM first, so Horovod stops its workers; KILL what is left after this
LOCAL_POOL = "this-machine"  # the one pool a local server or job has: the machine itself


def render_local(spec: JobSpec, job_dir: str, cfg: PortalConfig) -> str:
    """The shell script that runs `spec` in `job_dir` under its program's launcher (horovodrun, torchrun)."""
    hours, minutes, seconds = (int(p) for p in spec.time_limit.split(":"))
    values = program_values(spec, cfg)
    return launch_template(spec, "local.sh").render(
        spec=spec, job_dir=job_dir, output=OUTPUT_FILE, seconds=hours * 3600 + minutes * 60 + seconds,
        venv_bin=values["program_bin"], trainer_args=cfg.jobs_trainer_args,
        job_env=job_environment(cfg, '"$HOME"', f'"$job_dir/{JOB_FILE}"'), **values)


def local_gpus() -> int:
    """NVIDIA GPUs on this machine, by their device files (no driver call: this must work without CUDA)."""
    return len([p for p in Path("/dev").glob("nvidia[0-9]*") if ascii_digits(p.name[6:])])


def new_local_id() -> str:
    # Time for sorting and reading, randomness so that two submits in one second do not collide.
    return f"local-{datetime.now():%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"


class LocalScheduler(JobsInHome):
    """Jobs under horovodrun on this machine, the user's own (no cluster, no queue, no accounting)."""

    name = "local"
    script_file = "job.sh"  # in the job's directory, beside job.json
    job_ids: ClassVar[re.Pattern[str]] = LOCAL_ID  # local-<date>T<time>-<random>
    sweeps = False  # a sweep is a Slurm job array (portal.records.sweep)
    # `state`'s reads, in its order
    state_files: tuple[tuple[str, int], ...] = ((EXIT_STATUS_FILE, 64), (CANCELLED_FILE, 64), (PID_FILE, 64))
    new_id = staticmethod(new_local_id)  # a new job's id, of `job_ids` (a subclass with its own ids names them)

    def __init__(self, cfg: PortalConfig):
        self.cfg = cfg

    def snapshot(self, clock: Callable[[], float] = time.monotonic) -> ClusterSnapshot:
        return ClusterSnapshot(taken_at=clock())

    def gpu_holders(self, node: str) -> dict[str, NodeHolding]:
        return {}  # this machine's jobs are its user's own: no node reader watches them

    def usage(self, user: JobUser, everyone: bool, now: datetime) -> UsageReport:
        raise NoAccounting("usage: GPU-hours come from Slurm's accounting; local jobs are not counted")

    def limits(self, user: JobUser, snapshot: ClusterSnapshot | None = None,
               held: Sequence[tuple[str, int]] = ()) -> JobLimits:
        # This machine is the user's own: its GPUs are the quota (group quotas are a shared cluster's policy).
        gpus = local_gpus()
        memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024**3
        return JobLimits(partition="", nodes=1, gpus_per_node=gpus, cpus_per_node=os.cpu_count() or 1,
                         memory_gb_per_node=max(1, memory_gb), max_minutes=None,
                         quota=GpuQuota(gpus, tuple(user.groups)), default_data_dir=str(self.cfg.default_data_path),
                         programs=programs_with("local.sh"),
                         pools=(Pool(LOCAL_POOL, os.cpu_count() or 1, max(1, memory_gb) * 1024, gpus, gpus,
                                     default=True),))

    def configured_limits(self, user: JobUser) -> JobLimits:
        return self.limits(user)  # this machine's own, read without asking anyone

    def check_sweep(self, spec: JobSpec) -> None:
        """Never asked: this scheduler runs no sweeps (`sweeps` is False, and portal.jobs refuses one first)."""
        raise JobSpecError(SWEEP_FIELD, NO_SWEEPS)

    def render(self, spec: JobSpec, user: JobUser, partition: str = "", plan: SweepPlan | None = None) -> str:
        no_sweeps(plan)
        return render_local(spec, str(self.jobs_dir(user) / "local-<time>-<random>"), self.cfg)

    def submit(self, spec: JobSpec, user: JobUser, partition: str = "", plan: SweepPlan | None = None,
               tracking: Account | None = None) -> tuple[JobRecord, str]:
        """Make ~/jobs/<cluster>/<id>/ (mkdir is atomic: the id is ours) with the script and job.json in one
        process as the user, then start the script; (the record, the directory's inode)."""
        no_sweeps(plan)
        job_id = self.new_id()
        job_dir = self.jobs_dir(user) / job_id
        record = JobRecord(id=job_id, scheduler=self.name, user=user.name, spec=spec, submitted_at=now_utc(),
                           job_dir=job_dir)
        script = job_dir / self.script_file
        files = [(script.name, render_local(spec, str(job_dir), self.cfg), "700"),
                 (RECORD_FILE, record.to_json(), "600")]
        if tracking is not None:  # rank 0's MLflow account (programkit.tracking), the user's alone
            files.append((JOB_FILE, tracking.job_file(run_tags(user.name, job_id, self.name, spec.template,
                                                               self.cfg.cluster_name)), "600"))
        inode = user.make_job_dir(job_dir, files)
        # setsid --fork: the script leads a new session (its PID is its process group id, which cancel signals)
        # and is not our child, so it never lingers as a zombie of a long-lived caller (a notebook kernel).
        user.start_detached([shutil.which("setsid") or "/usr/bin/setsid", "--fork", "/bin/bash", str(script)])
        return record, inode

    def sweep(self, record: JobRecord, user: JobUser) -> SweepView:
        """No sweep runs here: a record that claims one (edited) shows its trials as never run."""
        assert record.sweep is not None
        return sweep_view(record.sweep, {}, {}, "the local scheduler runs no sweeps")

    def _pid(self, record: JobRecord, user: JobUser) -> int | None:
        # The file is the user's: a PID is a few ASCII digits, anything else is no PID.
        text = (user.read_text(record.job_dir / PID_FILE, 64) or "").strip()
        return int(text) if PID.match(text) else None

    def state(self, record: JobRecord, user: JobUser) -> str:
        record.check_owner(user.name)
        pid = self._pid(record, user)
        # Whether it runs, asked before its status is read: a script that writes its status and ends between the
        # two is then read as ended with that status, never as killed (read the other way round, a job that ended
        # well in that moment was FAILED for good).
        alive = pid is not None and session_alive(pid)
        code = exit_code(user.read_text(record.job_dir / EXIT_STATUS_FILE, 64))
        cancelled = user.read_text(record.job_dir / CANCELLED_FILE, 64) is not None
        if code is not None:
            if code == 0:
                return COMPLETED
            return CANCELLED if cancelled else TIMEOUT if code == TIMEOUT_EXIT else FAILED
        if pid is None:
            # The script writes its PID first thing; give it a moment before calling the start failed.
            return PENDING if time.time() - _started(record) < 30 else FAILED
        if alive:
            return RUNNING
        return CANCELLED if cancelled else FAILED  # ended without writing its status: killed

    def cancel(self, record: JobRecord, user: JobUser) -> None:
        record.check_owner(user.name)
        pid = self._pid(record, user)
        if pid is None or not session_alive(pid):
            return
        user.write_text(record.job_dir / CANCELLED_FILE, now_utc() + "\n")
        # As the user: the kernel refuses to signal anyone else's processes.
        user.run(["kill", "-TERM", "--", f"-{pid}"], check=False)
        deadline = time.monotonic() + CANCEL_GRACE_S
        while session_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        if session_alive(pid):
            user.run(["kill", "-KILL", "--", f"-{pid}"], check=False)


NO_SWEEPS = "the local scheduler runs no sweeps: submit single runs"


def no_sweeps(plan: SweepPlan | None) -> None:
    if plan is not None:  # portal.jobs refuses a sweep before it gets here (`sweeps`)
        raise JobSpecError(SWEEP_FIELD, NO_SWEEPS)


def session_alive(sid: int) -> bool:
    """Whether any process of session `sid` is still running (zombies do not count: an ended job whose
    parent has not reaped it yet is over)."""
    result = subprocess.run(["ps", "-o", "stat=", "--sid", str(sid)], capture_output=True, text=True, check=False)
    return any(line.strip() and not line.strip().startswith("Z") for line in result.stdout.splitlines())


def _started(record: JobRecord) -> float:
    return datetime.fromisoformat(record.submitted_at).timestamp()


if TYPE_CHECKING:  # against the contract, with its own person (checked by `make lint`)
    from portal.scheduler.protocol import Scheduler

    def _conforms(local: LocalScheduler) -> Scheduler[JobUser]:
        return local
