"""A failed squeue/scontrol/sacct is Slurm not answering, never a job state: the decision functions, the spawner's
job state and poll (batchspawner's own reading shown beside it), the jobs API and the dashboard's cluster cache.
Slurm's answers are the real messages of Slurm 22.05 with slurmctld stopped."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest
from batchspawner import SlurmSpawner
from batchspawner.batchspawner import JobStatus

from portal.config import PortalConfig
from portal.errors import SchedulerUnavailable
from portal.records.account import JobUser
from portal.records.record import JobRecord, cluster_jobs_dir
from portal.records.spec import JobSpec
from portal.scheduler.slurm.answers import job_unknown, squeue_outcome
from portal.scheduler.slurm.scheduler import SlurmError, SlurmScheduler
from spawners.slurm import PortalSlurmSpawner
from spawners.slurm_state import SlurmUnavailable
from tests.slurm_answers import squeue_job, squeue_json
from tests.unit.helpers import slurm_cache, spawner_answering

DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
# What a client prints when the controller accepts but does not answer: a line before the one batchspawner knows.
TIMED_OUT = "squeue: error: slurm_receive_msg: Socket timed out on send/recv operation\n" \
            "slurm_load_jobs error: Socket timed out on send/recv operation"
FORGOTTEN = "slurm_load_jobs error: Invalid job id specified"


@pytest.mark.parametrize(("answer", "error", "outcome"), [
    ("RUNNING node1 None", None, "state"),
    ("PENDING n/a Resources", None, "state"),
    ("", None, "gone"),
    ("", FORGOTTEN, "gone"),
    ("", DOWN, "unavailable"),
    ("", TIMED_OUT, "unavailable"),
    ("", "runuser: cannot set groups: Connection refused", "unavailable"),
    ("", "", "unavailable"),
])
def test_squeue_outcome(answer, error, outcome):
    assert squeue_outcome(answer, error) == outcome
    assert job_unknown(error or "") == (error == FORGOTTEN)


@pytest.mark.parametrize("error", [DOWN, TIMED_OUT, "squeue: error: Invalid user for SlurmUser, ignored\n" + DOWN])
def test_a_running_server_is_not_dead_because_squeue_failed(error):
    spawner = spawner_answering(PortalSlurmSpawner, [RuntimeError(error), "RUNNING node1 None"])
    assert asyncio.run(spawner.poll()) is None  # alive: the hub keeps the server
    assert spawner.job_status == "RUNNING node1 None" and spawner.slurm_unavailable
    assert asyncio.run(spawner.query_job_status()) == JobStatus.RUNNING and spawner.slurm_unavailable == ""


def test_stock_batchspawner_reads_a_slurm_failure_as_a_dead_server():
    """Why the override exists: the same answer makes batchspawner 1.3.0 drop a running server."""
    spawner = spawner_answering(SlurmSpawner, [RuntimeError(TIMED_OUT)])
    assert asyncio.run(spawner.poll()) == 1


def test_a_job_slurm_has_forgotten_is_gone():
    spawner = spawner_answering(PortalSlurmSpawner, [RuntimeError(FORGOTTEN)])
    assert asyncio.run(spawner.query_job_status()) == JobStatus.NOTFOUND


def test_a_start_waits_for_slurm_then_goes_on():
    spawner = spawner_answering(PortalSlurmSpawner, [RuntimeError(DOWN)] * 3 + ["PENDING n/a None"] +
                                ["RUNNING node1 None"] * 100)
    spawner.startup_poll_interval = 0.01

    async def scenario():
        asyncio.get_running_loop().call_later(0.3, setattr, spawner, "port", 8888)  # the server reports its port
        return await spawner.wait_until_running("42")

    assert asyncio.run(scenario()) == "node1"
    assert (spawner.port, spawner.slurm_unavailable) == (8888, "")


def test_a_start_that_hears_nothing_from_slurm_fails_saying_so(caplog):
    spawner = spawner_answering(PortalSlurmSpawner, [RuntimeError(DOWN)] * 100)
    spawner.startup_poll_interval, spawner.slurm_unavailable_timeout = 0.01, 0.05

    with pytest.raises(SlurmUnavailable, match=r"^Slurm unavailable: no answer about Slurm job 42 .*connect failure"):
        asyncio.run(spawner.start())
    assert issubclass(SlurmUnavailable, SchedulerUnavailable)  # the class says it, not the message
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert len(failed) == 1 and re.match(r"start of alice failed: Slurm unavailable, no answer about Slurm job 42 "
                                         r"for \d+ s: slurm_load_jobs error: Unable to contact", failed[0]), failed


def test_the_unavailable_timeout_comes_before_the_hubs():
    spawner = PortalSlurmSpawner(portal=PortalConfig(), start_timeout=120)
    assert spawner.slurm_unavailable_timeout == 105


class AnsweringUser(JobUser):
    """A job user whose commands get canned answers: (returncode, stdout, stderr) by command name."""

    answers: dict[str, tuple[int, str, str]] = {}

    def run(self, argv, *, env=None, input=None, check=True, timeout=60):
        code, out, err = self.answers.get(Path(argv[0]).name, (1, "", "No such file"))
        return subprocess.CompletedProcess(argv, code, out, err)


def record_of(user: JobUser) -> JobRecord:
    return JobRecord(id="42", scheduler="slurm", user=user.name, spec=JobSpec(), submitted_at="2026-11-22T10:00:00",
                     job_dir=cluster_jobs_dir(user.home, "dsportal") / "42")


def answering(answers) -> AnsweringUser:
    user = AnsweringUser(name="alice", uid=10_001, gid=100, home=Path("/nonexistent/alice"), groups=())
    object.__setattr__(user, "answers", answers)
    return user


def test_the_jobs_api_raises_when_the_controller_is_down():
    user = answering({"squeue": (1, "", DOWN)})
    with pytest.raises(SlurmError, match="connect failure"):
        SlurmScheduler(PortalConfig()).state(record_of(user), user)


def test_a_forgotten_job_without_accounting_or_files_is_an_error_not_a_state():
    user = answering({"squeue": (0, squeue_json(), ""),  # squeue remembers no job 42
                      "sacct": (1, "", "sacct: error: slurmdbd: Connection refused")})
    with pytest.raises(SlurmError, match="accounting does not answer"):
        SlurmScheduler(PortalConfig()).state(record_of(user), user)


def test_a_forgotten_job_takes_its_state_from_accounting():
    user = answering({"squeue": (0, squeue_json(), ""), "sacct": (0, "COMPLETED\n", ""), "head": (0, "", "")})
    assert SlurmScheduler(PortalConfig()).state(record_of(user), user) == "COMPLETED"


def test_a_servers_job_is_unknown_while_slurm_is_silent_and_ended_once_forgotten():
    """What the Slurm spawner asks its scheduler (HostsServers) to explain a failed start, and where it reaches a
    node: Slurm's silence is no job state; a job Slurm forgot has ended."""
    answers: dict[str, object] = {"squeue": SlurmError(DOWN)}

    def run(argv):
        answer = answers[argv[0] if argv[0] != "scontrol" else argv[-1]]
        if isinstance(answer, Exception):
            raise answer
        return answer

    slurm = SlurmScheduler(PortalConfig(), run=run)
    assert slurm.server_job("42") is None
    answers["squeue"] = squeue_json(squeue_job(41, "alice", "FAILED"))
    assert slurm.server_job("41").state == "FAILED" and slurm.server_job("42").state == "COMPLETED"
    answers["node1"] = "NodeName=node1 NodeAddr=198.18.0.2 CPUTot=8 State=IDLE\n"
    answers["node2"] = SlurmError(DOWN)
    assert slurm.server_address("node1") == "198.18.0.2" and slurm.server_address("node2") == "node2"


def test_the_cluster_cache_tells_a_failure_again_without_asking_until_the_interval_is_over():
    now, asked = [0.0], []

    def run(argv):
        asked.append(argv[0])
        raise SlurmError(f"`{argv[0]}` failed: {DOWN}")

    cache = slurm_cache(PortalConfig(), run, clock=lambda: now[0])
    for _ in range(3):
        with pytest.raises(SlurmError, match="connect failure"):
            cache.snapshot()
    assert asked == ["squeue"]
    now[0] = cache.interval_s
    with pytest.raises(SlurmError):
        cache.snapshot()
    assert asked == ["squeue", "squeue"]


def test_a_sweep_neither_queued_nor_accounted_yet_is_unknown_not_gone():
    """Just after a cancel, the array leaves the queue before slurmdbd has its records (seen under load in CI):
    not known for a moment, never "not found", so a caller waiting for its end waits on."""
    from dataclasses import replace

    from portal.records.sweep import parse_sweep

    user = answering({"squeue": (0, "", ""), "sacct": (0, "", ""), "head": (0, "", "")})
    sweep = replace(record_of(user), sweep=parse_sweep({}, 5, None, 0))
    assert SlurmScheduler(PortalConfig()).state(sweep, user) == "UNKNOWN"
    user = answering({"squeue": (0, "", ""), "sacct": (0, "42_0|CANCELLED by 10001\n42_[1-7%2]|CANCELLED\n", ""),
                      "head": (0, "", ""), "runuser": (1, "", "")})
    assert SlurmScheduler(PortalConfig()).state(sweep, user) == "CANCELLED"
