"""What the scheduler contract suite (test_contract.py, test_contract_jobs.py) shares: the toy scheduler a site
would add, and one driver per scheduler that runs it against its cluster's recorded answers, as batchspawner's
`run_spawner_script` does: the local runner on this machine (a horovodrun that waits to be told how the run ends),
Slurm over a script of its commands' answers in each release's JSON (`ScriptedSlurm`), Kubernetes over an API
server of recorded objects (`RecordedApiServer`). A test asks the driver's `scheduler` and its people (alice, bob);
the driver makes the cluster answer (`answer`), says what it was told to start and cancel (`started`, `cancelled`),
and stops it answering (`down`). The Kubernetes API server is recorded_api.py's.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import time
from pathlib import Path
from typing import Any, ClassVar

from portal import jobs
from portal.config import PortalConfig
from portal.errors import JobNotFound
from portal.mlflow_accounts import JOB_FILE
from portal.records import ids
from portal.records.account import JobUser
from portal.records.record import JobRecord
from portal.records.templating import program_values
from portal.registrations import Registered
from portal.scheduler import Scheduler
from portal.scheduler.kubernetes.manifests import ANNOTATION_WORKER_PODS, LABEL_JOB, LABEL_ROLE
from portal.scheduler.kubernetes.tracking import TRACKING_FILE
from portal.scheduler.local import LocalScheduler
from portal.scheduler.registry import SCHEDULERS, scheduler_class, scheduler_for
from portal.scheduler.slurm.errors import SlurmRefused, SlurmUnavailable
from tests.slurm_answers import squeue_job, squeue_json
from tests.unit.helpers import parse_spec
from tests.unit.portal.scheduler.recorded_api import RecordedApiServer

PEOPLE = ("alice", "bob")
GROUPS = ("gpu-users",)
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


def wait_for(done, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.05)


class Driver:
    """One scheduler against its cluster's recorded answers. Subclasses make the cluster answer."""

    name: str
    cfg: PortalConfig
    scheduler: Scheduler[Any]

    def person(self, name: str) -> Any:
        raise NotImplementedError

    def listed(self, user: Any) -> list[JobRecord]:
        """The user's jobs as portal.jobs.jobs lists them for a scheduler whose records are in the homes: each job
        directory's job.json, kept where the scheduler says it is theirs (`state`, the check `_load` makes)."""
        found = []
        for job_id, _ in jobs.listed_jobs(user, self.cfg):
            try:
                found.append(self.load(user, job_id))
            except JobNotFound:
                continue
        return found

    def load(self, user: Any, job_id: str) -> JobRecord:
        """The user's job `job_id`, as portal.jobs.get loads it (with the scheduler's word that it is theirs)."""
        loaded = jobs._load(user, job_id, self.cfg, check=False).record
        self.scheduler.state(loaded, user)
        return loaded

    def answer(self, job: JobRecord, state: str) -> None:
        """Make the cluster say the job is `state` (RUNNING or COMPLETED)."""
        raise NotImplementedError

    def started(self) -> list[str]:
        """The ids of the jobs the cluster was told to start."""
        raise NotImplementedError

    def cancelled(self) -> list[str]:
        """The ids of the jobs the cluster was asked to cancel, in order."""
        raise NotImplementedError

    def down(self) -> None:
        """Make the cluster stop answering."""
        raise NotImplementedError

    def up(self) -> None:
        """Make the cluster answer again."""
        raise NotImplementedError

    def close(self) -> None:
        """End what the driver started."""

    def tracking_file(self, job: JobRecord) -> tuple[str, int, list[str]]:
        """Where the job's rank 0 reads its MLflow account: (the file's text, its mode, the job's scripts and
        environments as text, where DSPORTAL_MLFLOW_FILE names it). A job in a home: its directory's file."""
        path = job.job_dir / JOB_FILE
        scripts = [p.read_text() for p in job.job_dir.iterdir() if p.suffix in (".sh", ".sbatch")]
        return path.read_text(), path.stat().st_mode & 0o777, scripts


def home_user(tmp_path: Path, name: str) -> JobUser:
    """A Unix account with its home under `tmp_path`, run as this process (no runuser: the caller is the user)."""
    return JobUser(name=name, uid=os.geteuid(), gid=os.getegid(), home=tmp_path / name, groups=GROUPS)


# A training program that runs until the test says how its run ends: the exit status in `finish`, in the job's
# directory (its working directory, local.sh's `cd`).
WAITING_HOROVODRUN = """#!/bin/sh
while [ ! -e finish ]; do sleep 0.05; done
exit "$(cat finish)"
"""


class LocalDriver(Driver):
    """The local runner (or the toy) on this machine: the real job script, started detached as the user, with a
    horovodrun that waits to be told how the run ends. Cancelling signals the job's session."""

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


class ScriptedSlurm:
    """Slurm's commands as the portal runs them (SlurmCommands' `fake`), answered the way Slurm `release` does:
    sbatch gives the next id, squeue --json lists every job in that release's JSON, scancel refuses a job that is
    not known or not the asker's in Slurm's words. The fake is handed the command alone, so the driver says who
    asks (`asker`), as runuser would. Anything else is a command the portal was not expected to run."""

    def __init__(self, release: str):
        self.version = RELEASES[release]
        self.jobs: dict[str, dict[str, str]] = {}
        self.asker, self.unanswered = "", False
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.cancelled: list[str] = []

    def __call__(self, argv) -> str:
        argv = tuple(argv)
        self.calls.append((self.asker, argv))
        if self.unanswered:
            raise SlurmUnavailable(f"Slurm refused `{' '.join(argv)}`: {DOWN}", DOWN)
        if argv == ("sbatch", "--parsable", "--hold"):
            job_id = str(41 + len(self.jobs))
            self.jobs[job_id] = {"user": self.asker, "state": "PENDING"}
            return f"{job_id}\n"
        if argv == ("squeue", "--json"):
            return squeue_json(*(squeue_job(int(job_id), job["user"], job["state"], version=self.version)
                                 for job_id, job in self.jobs.items()), version=self.version)
        if argv[:4] == ("squeue", "-h", "-r", "-j"):  # a sweep's tasks (the fake never sees the script's --array)
            job = self.jobs.get(argv[4])
            return f"{argv[4]}_0|{job['state']}\n" if job and job["user"] == argv[6] else ""
        if argv[0] == "scancel" and len(argv) == 2:
            return self.scancel(argv[1])
        if argv[:2] == ("sacct", "-n"):  # a job squeue no longer lists: accounting has nothing more to say
            return ""
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
        self.scheduler = scheduler_for(self.cfg, "slurm", run=self.slurm)
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
        self.slurm.jobs[job.id]["state"] = state

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


# --- Kubernetes: an API server of recorded objects behind the real client (recorded_api) -----------------------

class KubernetesDriver(Driver):
    """Kubernetes (plain Jobs) over `RecordedApiServer`: the job's pods are the kubelet's, made by `answer`."""

    def __init__(self, tmp_path: Path):
        self.name = "kubernetes"
        # The MLflow server as the Kubernetes box names it to its hub (`box` is the Slurm box's, no pod's).
        self.cfg = PortalConfig(scheduler="kubernetes", gpu_quota={"gpu-users": 8},
                                mlflow_url="http://198.19.0.1:16446/services/portal/mlflow")
        self.server = RecordedApiServer(self.cfg, PEOPLE)
        self.scheduler = scheduler_class("kubernetes")(self.cfg, client_for=self.server.client_for)  # type: ignore

    def person(self, name: str) -> Any:
        return self.scheduler.person(name, GROUPS)

    def listed(self, user: Any) -> list[JobRecord]:
        return self.scheduler.records(user)  # type: ignore[attr-defined]

    def load(self, user: Any, job_id: str) -> JobRecord:
        return self.scheduler.load(user, job_id)  # type: ignore[attr-defined]

    def answer(self, job: JobRecord, state: str) -> None:
        namespace = self.cfg.user_namespace(job.user)
        launcher = self.server.objects[("jobs", namespace, job.id)]
        if state == "COMPLETED":
            launcher["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
            return
        workers = int(launcher["metadata"].get("annotations", {}).get(ANNOTATION_WORKER_PODS, job.spec.nodes))
        for role, count in (("launcher", 1), ("worker", workers)):
            for index in range(count):
                name = f"{job.id}-{role}-{index}"
                self.server.objects[("pods", namespace, name)] = {
                    "metadata": {"name": name, "namespace": namespace,
                                 "labels": {LABEL_JOB: job.id, LABEL_ROLE: role}}, "status": {"phase": "Running"}}

    def started(self) -> list[str]:
        """The launcher Jobs created (named by the job id; a plain job's workers Job is named otherwise)."""
        return [name for _, method, plural, _, name in self.server.calls if method == "POST" and plural == "jobs"
                and self.scheduler.job_ids.match(name)]

    def cancelled(self) -> list[str]:
        return [name for _, method, plural, _, name in self.server.calls if method == "DELETE" and plural == "jobs"]

    def tracking_file(self, job: JobRecord) -> tuple[str, int, list[str]]:
        """The job's own Secret (the file is a key of it), as mounted in its pods: the mode of the volume; the
        pods' scripts (their commands)."""
        namespace = self.cfg.user_namespace(job.user)
        secret = self.server.objects[("secrets", namespace, f"{job.id}-mlflow")]
        pods = [self.server.objects[key]["spec"]["template"]["spec"] for key in self.server.objects
                if key[0] == "jobs" and key[1] == namespace and key[2].startswith(job.id)]
        volumes = [volume for pod in pods for volume in pod["volumes"]
                   if volume.get("secret", {}).get("secretName") == f"{job.id}-mlflow"]
        mounted = all(any(m["mountPath"] == TRACKING_FILE and m.get("subPath") == JOB_FILE for m in c["volumeMounts"])
                      for pod in pods for c in pod["containers"])
        assert pods and len(volumes) == len(pods) and mounted, pods
        return secret["stringData"][JOB_FILE], volumes[0]["secret"]["defaultMode"] & 0o777, \
            [" ".join(c["command"]) for pod in pods for c in pod["containers"]]

    def down(self) -> None:
        self.server.unanswered = True

    def up(self) -> None:
        self.server.unanswered = False


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
