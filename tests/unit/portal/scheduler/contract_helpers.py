"""What the scheduler contract suite (test_contract.py, test_contract_jobs.py, test_contract_outputs.py) shares:
the toy scheduler a site would add, and one driver per scheduler that runs it against its cluster's recorded
answers, as batchspawner's `run_spawner_script` does: the local runner on this machine (a horovodrun that waits to
be told how the run ends), Slurm over a script of its commands' answers in each release's JSON (`ScriptedSlurm`),
Kubernetes over an API server of recorded objects (kubernetes_driver.py, over recorded_api.py). A test asks the
driver's `scheduler` and its people (alice, bob); the driver makes the cluster answer (`answer`), puts what a run
wrote where its scheduler reads it (`wrote`), says what it was told to start and cancel (`started`, `cancelled`),
and stops it answering (`down`). What every driver is: contract_driver.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

from portal.config import PortalConfig
from portal.records import ids
from portal.records.account import JobUser
from portal.records.record import JobRecord
from portal.records.templating import program_values
from portal.registrations import Registered
from portal.scheduler.local import LocalScheduler
from portal.scheduler.protocol import Scheduler
from portal.scheduler.registry import SCHEDULERS, scheduler_for
from portal.scheduler.slurm.errors import SlurmRefused, SlurmUnavailable
from tests.slurm_answers import squeue_job, squeue_json
from tests.unit.helpers import parse_spec, scheduler_answering
from tests.unit.portal.scheduler.contract_driver import (
    LOST_AT,
    NODE,
    NODE_GPUS,
    Driver,
    Run,
    home_user,
    wait_for,
    wrote_in_home,
)
from tests.unit.portal.scheduler.kubernetes_driver import KubernetesDriver

TOY_ID = r"toy-[0-9a-f]{8}"


class ToyScheduler(LocalScheduler):
    """A third scheduler as a site would add one: its own class and job ids, registered in SCHEDULERS."""

    name = "toy"
    job_ids: ClassVar[re.Pattern[str]] = ids.anchored(TOY_ID)
    new_id = staticmethod(lambda: f"toy-{secrets.token_hex(4)}")


def register_toy(monkeypatch) -> None:
    """Register the toy as docs/architecture.md says a scheduler is added: one line in SCHEDULERS (its class, its
    ids, its records in the homes), nothing else."""
    monkeypatch.setitem(SCHEDULERS, "toy", Registered(f"{__name__}:ToyScheduler", job_ids=TOY_ID,
                                                      records_in_home=True))


# A training program that runs until the test says how its run ends: the exit status in `finish`, in the job's
# directory (its working directory, local.sh's `cd`).
WAITING_HOROVODRUN = """#!/bin/sh
while [ ! -e finish ]; do sleep 0.05; done
exit "$(cat finish)"
"""


class LocalDriver(Driver):
    """The local runner (or the toy) on this machine: the real job script, started detached as the user, with a
    horovodrun that waits to be told how the run ends. Cancelling signals the job's session. Nothing queues here:
    a job starts at once, and runs once."""

    queue = False

    def __init__(self, name: str, tmp_path: Path):
        self.name, self.tmp_path = name, tmp_path
        self.cfg = PortalConfig(venv=tmp_path / "venv")
        self.scheduler = scheduler_for(self.cfg, name)
        program = Path(program_values(parse_spec(), self.cfg)["program_bin"]) / "horovodrun"
        program.parent.mkdir(parents=True)
        program.write_text(WAITING_HOROVODRUN)
        program.chmod(0o755)

    def person(self, name: str) -> JobUser:
        return home_user(self.tmp_path, name)

    def answer(self, job: JobRecord, state: str) -> None:
        if state == "COMPLETED":
            (job.job_dir / "finish").write_text("0\n")
            wait_for(lambda: (job.job_dir / "exit_status").exists(), f"job {job.id} to end")
        else:
            wait_for(lambda: self._pid_of(job.job_dir) is not None, f"job {job.id} to start")

    def wrote(self, job: JobRecord, run: Run, task: int | None = None) -> None:
        """As the program under the job script's horovodrun writes: after the script's own line in output.log."""
        assert task is None, "the local runner runs no sweeps"
        wait_for(lambda: "chexnet: local job on " in (job.output_path.read_text() if job.output_path.exists()
                                                      else ""), f"job {job.id}'s script to start its program")
        wrote_in_home(job, run)

    def started(self) -> list[str]:
        """Each job whose script has started (it writes its PID first)."""
        made = [path.parent for path in self.tmp_path.glob("*/jobs/*/*/job.json")]
        wait_for(lambda: all((job_dir / "pid").exists() for job_dir in made), "the jobs' scripts to start")
        return [job_dir.name for job_dir in made]

    def cancelled(self) -> list[str]:
        """Each job whose directory has the cancel's mark and whose session has ended (not one process left)."""
        marked = sorted(self.tmp_path.glob("*/jobs/*/*/cancelled"), key=lambda mark: mark.stat().st_mtime)
        return [mark.parent.name for mark in marked if not session_left(self._pid_of(mark.parent))]

    def _pid_of(self, job_dir: Path) -> int | None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int((job_dir / "pid").read_text())
        return None

    def close(self) -> None:
        for pid_file in self.tmp_path.glob("*/jobs/*/*/pid"):
            (pid_file.parent / "finish").write_text("0\n")  # the waiting horovodrun ends by itself
            pid = self._pid_of(pid_file.parent)
            if pid is not None and session_left(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)  # the job's own process group, started by this test


def session_left(pid: int | None) -> bool:
    """Whether any process of the session `pid` leads is still running."""
    from portal.scheduler.local import session_alive

    return pid is not None and session_alive(pid)


# --- Slurm: a script of its commands' answers, in the JSON of each release the portal reads ---------------------

RELEASES = {"22.05": "v0.0.38", "24.11": "v0.0.42", "26.05": "v0.0.45"}  # what the portal asks each for (json_flag)
DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"


PARTITION = f"PartitionName=gpu Default=YES MaxTime=04:00:00 Nodes={NODE} State=UP\n"
SLURM_TIME = "%Y-%m-%dT%H:%M:%S"


class ScriptedSlurm:
    """Slurm's commands as the portal runs them (SlurmCommands' `fake`), answered the way Slurm `release` does:
    sbatch gives the next id, squeue --json lists every job in that release's JSON (with its GPUs, its node and
    why it waits), scontrol one partition of NODE (its GPUs in use: its running jobs'), scancel refuses a job that
    is not known or not the asker's in Slurm's words, sacct -D and sacctmgr give a job's runs and the nodes'
    events (to its owner only, as with PrivateData=jobs). The fake is handed the command alone, so the driver says
    who asks (`asker`), as runuser would. Anything else is a command the portal was not expected to run."""

    def __init__(self, release: str):
        self.version = RELEASES[release]
        self.jobs: dict[str, dict[str, Any]] = {}
        self.asker, self.unanswered = "", False
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.cancelled: list[str] = []
        self.events: list[str] = []  # sacctmgr's node events: "node|start|state|reason"

    def __call__(self, argv) -> str:
        argv = tuple(argv)
        self.calls.append((self.asker, argv))
        if self.unanswered:
            raise SlurmUnavailable(f"Slurm refused `{' '.join(argv)}`: {DOWN}", DOWN)
        if argv == ("sbatch", "--parsable", "--hold"):
            job_id = str(41 + len(self.jobs))
            self.jobs[job_id] = {"user": self.asker, "state": "PENDING", "gpus": 0, "reason": "None", "runs": []}
            return f"{job_id}\n"
        if argv == ("squeue", "--json"):
            return squeue_json(*(squeue_job(int(job_id), job["user"], job["state"], gpus_per_node=job["gpus"],
                                            reason=job["reason"], node_list=NODE, version=self.version)
                                 for job_id, job in self.jobs.items()), version=self.version)
        if argv[:2] == ("scontrol", "show"):
            used = sum(job["gpus"] for job in self.jobs.values() if job["state"] == "RUNNING")
            return PARTITION if argv[2] == "partition" else \
                f"NodeName={NODE} CPUTot=8 RealMemory=20000 Gres=gpu:{NODE_GPUS} GresUsed=gpu:{used} State=MIXED " \
                "Partitions=gpu\n"
        if argv[:4] == ("squeue", "-h", "-r", "-j"):  # a sweep's tasks (the fake never sees the script's --array)
            job = self.jobs.get(argv[4])
            return f"{argv[4]}_0|{job['state']}\n" if job and job["user"] == argv[6] else ""
        if argv[0] == "scancel" and len(argv) == 2:
            return self.scancel(argv[1])
        if argv[:2] == ("sacct", "-n"):  # a job squeue no longer lists: accounting has nothing more to say
            return ""
        if argv[:3] == ("sacct", "-D", "-X"):  # a job's runs, each "State|Start|End|NodeList"
            job = self.jobs.get(argv[argv.index("-j") + 1])
            return "".join(f"{run}\n" for run in job["runs"]) if job and job["user"] == self.asker else ""
        if argv[:4] == ("sacctmgr", "-nP", "show", "event"):
            return "".join(f"{event}\n" for event in self.events)
        raise AssertionError(f"the portal ran {argv}, which no step of the script expects")

    def scancel(self, job_id: str) -> str:
        job = self.jobs.get(job_id)
        why = "Invalid job id specified" if job is None else "Access/permission denied" \
            if job["user"] != self.asker else ""
        if why:
            said = f"scancel: error: Kill job error on job id {job_id}: {why}"
            raise SlurmRefused(f"Slurm refused `scancel {job_id}`: {said}", said)
        job["state"] = "CANCELLED"
        self.cancelled.append(job_id)
        return ""


class SlurmDriver(Driver):
    """Slurm over `ScriptedSlurm`; `scontrol release`, which the user's own process runs once the job's directory
    is made (JobUser.make_job_dir), is a script in slurm_bin_dir that writes down what it released."""

    def __init__(self, release: str, tmp_path: Path):
        self.name, self.tmp_path = "slurm", tmp_path
        self.slurm = ScriptedSlurm(release)
        bin_dir = tmp_path / "slurm-bin"  # never this machine's own Slurm
        bin_dir.mkdir()
        self.released_log = tmp_path / "released"
        scontrol = bin_dir / "scontrol"
        scontrol.write_text(f'#!/bin/sh\necho "$*" >> {self.released_log}\n')
        scontrol.chmod(0o755)
        self.cfg = PortalConfig(slurm_bin_dir=bin_dir)
        self.scheduler = scheduler_answering(self.cfg, "slurm", self.slurm)
        self.scheduler = AskedAs(self.scheduler, self.slurm)  # type: ignore[assignment]

    def person(self, name: str) -> JobUser:
        return home_user(self.tmp_path, name)

    def started(self) -> list[str]:
        """The jobs submitted held, then released once their directory was made."""
        lines = self.released_log.read_text().split("\n")[:-1] if self.released_log.exists() else []
        assert all(line.startswith("release ") for line in lines), lines
        held = [argv for _, argv in self.slurm.calls if argv[0] == "sbatch"]
        assert all("--hold" in argv for argv in held), held
        return [line.removeprefix("release ") for line in lines]

    def answer(self, job: JobRecord, state: str) -> None:
        held = self.slurm.jobs[job.id]
        held.update(state=state, gpus=job.spec.gpus_per_node, reason="Resources" if state == "PENDING" else "None")
        if state == "RUNNING":
            held["runs"].append(f"RUNNING|{LOST_AT - timedelta(hours=1):{SLURM_TIME}}|Unknown|{NODE}")

    def wrote(self, job: JobRecord, run: Run, task: int | None = None) -> None:
        wrote_in_home(job, run, task)  # the batch script's --output (a sweep's: its task's), chexnet's files

    def lost_node(self, job: JobRecord) -> bool:
        """Slurm's requeue: the run on NODE ended NODE_FAIL when NODE went down, and the job runs again on node2."""
        runs = self.slurm.jobs[job.id]["runs"]
        runs[-1] = runs[-1].replace("RUNNING|", "NODE_FAIL|").replace("|Unknown|", f"|{LOST_AT:{SLURM_TIME}}|")
        runs.append(f"RUNNING|{LOST_AT + timedelta(minutes=5):{SLURM_TIME}}|Unknown|node2")
        self.slurm.events.append(f"{NODE}|{LOST_AT:{SLURM_TIME}}|DOWN|Not responding")
        return True

    def cancelled(self) -> list[str]:
        return list(self.slurm.cancelled)

    def down(self) -> None:
        self.slurm.unanswered = True

    def up(self) -> None:
        self.slurm.unanswered = False


class AskedAs:
    """The Slurm scheduler, telling its scripted Slurm who runs each command: the user each method is given."""

    def __init__(self, scheduler: Scheduler[Any], slurm: ScriptedSlurm):
        self._scheduler, self._slurm = scheduler, slurm

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._scheduler, name)
        if not callable(found):
            return found

        def as_user(*args: Any, **kwargs: Any) -> Any:
            users = [a for a in (*args, *kwargs.values()) if isinstance(a, JobUser)]
            self._slurm.asker = users[0].name if users else "root"
            return found(*args, **kwargs)
        return as_user


DRIVERS = ("local", "toy", *(f"slurm-{release}" for release in RELEASES), "kubernetes")


def driver_for(kind: str, tmp_path: Path, monkeypatch) -> Driver:
    """The driver called `kind` (DRIVERS): a scheduler's name, Slurm's with its release."""
    if kind == "toy":
        register_toy(monkeypatch)
    if kind in ("local", "toy"):
        return LocalDriver(kind, tmp_path)
    if kind.startswith("slurm-"):
        return SlurmDriver(kind.removeprefix("slurm-"), tmp_path)
    return KubernetesDriver(tmp_path)
