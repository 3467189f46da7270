"""The journeys that touch Slurm, on a box of each other supported release (tests/slurm_versions/conftest.py): the
portal reads the release's JSON by its data_parser version, alice spawns JupyterLab on a GPU (batchspawner's squeue
formats, the GPU request), runs a 2-node job to COMPLETED with its e-mail (MailProg), a sweep as a job array that
runs at most its parallel (the throttle holding the third trial), sees her usage and GPU-hours (sacct's JSON), is
refused over her quota by the portal and by Slurm (GrpTRES, MaxSubmitJobs); a node lost mid-run requeues her job,
which starts again; a cancelled job leaves no process on any node (proctrack/cgroup and the epilog). The one real
job trained to its end is the 2-node one: the rest of what the portal reads of a release is read from its recorded
answers (tests/unit/portal/scheduler). The full suite runs on 22.05 (tests/integration).

Sized for 2 CPU cores: the demo set's 64x64 images, tinycnn, batch 8, one worker on each of two nodes.
"""

from __future__ import annotations

import json
import mailbox
import re
import subprocess
from pathlib import Path

import pytest

from portal.jobs.demo_data import ensure_demo_data
from portal.records.states import ENDED_STATES
from portal.scheduler.slurm.commands import SlurmCommands
from portal.scheduler.slurm.data_parsers import DATA_PARSERS
from portal.scheduler.slurm.json_answers import data_parser_of, read_sacct, read_squeue
from portal.service.board import USAGE_REFRESH_S
from tests.conftest import JOB_END_GRACE_S, SERVER_START_S, node_taken_back, page_error, wait_for
from tests.integration.helpers import TINY, as_user_in_terminal, portal_client, user_processes
from tests.slurm_versions.conftest import BUILD_WAIT_S

# The box's fixture may first wait for the release's build beside the suites (up to BUILD_WAIT_S): the session's guard
# against a hung test (pyproject.toml's timeout) is that much longer here.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(BUILD_WAIT_S + 1200)]
JOB_WAIT_S = 600  # a tiny job, submitted to an idle box, to its end
MAIL_WAIT_S = 60


def slurm(box, *argv: str, user: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """A command of the release's Slurm, as root or (`user`) as that user from a terminal."""
    command = [str(box.cfg.slurm_bin_dir / argv[0]), *argv[1:]]
    if user:
        result = as_user_in_terminal(box.cfg, user, *command)
    else:
        result = subprocess.run(command, env=box.slurm_env(), capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, (argv, result.stderr)
    return result


def queued(box, user: str) -> list[str]:
    return slurm(box, "squeue", "-h", "-u", user, "-o", "%i %T").stdout.splitlines()


def processes_on_nodes(box, user: str) -> list[str]:
    return [f"{node}: {process}" for node, found in user_processes(user, box.nodes).items() for process in found]


@pytest.fixture(scope="module")
def demo(release_box):
    return ensure_demo_data(release_box.cfg)


@pytest.fixture(scope="module")
def alice(release_box):
    return portal_client(release_box.hub, "alice")


@pytest.fixture
def nothing_left(release_box):
    """Every job of the demo users on this box is cancelled after the test."""
    yield
    for user in ("alice", "bob"):
        slurm(release_box, "scancel", "-u", user, check=False)
    wait_for(lambda: not queued(release_box, "alice") and not queued(release_box, "bob"), 60,
             what="the test's jobs to end")


def submitted(client, **spec) -> str:
    answer = client.post(f"{client.base}jobs", json={**TINY, **spec}, timeout=60)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def job(client, job_id: str) -> dict:
    answer = client.get(f"{client.base}jobs/{job_id}", timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def ended(client, job_id: str, timeout: float = JOB_WAIT_S) -> dict:
    return wait_for(lambda: (j := job(client, job_id))["state"] in ENDED_STATES and j, timeout, interval=3,
                    what=f"job {job_id} to end")


def log_of(client, job_id: str) -> str:
    return client.get(f"{client.base.removesuffix('api/')}jobs/{job_id}/log", timeout=60).text


def running_on_both_nodes(box, client, job_id: str, timeout: float) -> None:
    """Until alice's 2-node job is RUNNING with processes of hers on both of the release's nodes."""
    wait_for(lambda: job(client, job_id)["state"] == "RUNNING" and len(
        {p.split(":")[0] for p in processes_on_nodes(box, "alice")}) == 2, timeout, what="the job on both nodes")


def completed(client, job_id: str, timeout: float = JOB_WAIT_S) -> dict:
    done = ended(client, job_id, timeout)
    if done["state"] != "COMPLETED":
        pytest.fail(f"job {job_id} {done['state']}, its log:\n{log_of(client, job_id)[-4000:]}", pytrace=False)
    return done


def test_the_box_runs_the_release_and_its_answers_are_read_by_their_version(release_box):
    assert slurm(release_box, "scontrol", "version").stdout.startswith(f"slurm {release_box.release}.")
    flag = SlurmCommands(release_box.cfg).json_flag()
    version = flag.partition("=")[2]
    assert version in DATA_PARSERS and version != "v0.0.38", flag  # the newest both know
    for command in ("squeue", "sacct"):
        answer = slurm(release_box, command, flag).stdout
        assert data_parser_of(json.loads(answer)) == version
    read_squeue(slurm(release_box, "squeue", flag).stdout, 0)
    read_sacct(slurm(release_box, "sacct", flag, "-a", "-X").stdout)


def test_alice_spawns_jupyterlab_on_a_gpu(release_box):
    hub = release_box.hub
    admin, alice = hub.login("admin"), hub.login("alice")
    try:
        answer = hub.spawn_form(alice, partition="gpu", gpus=1, cpus=2, memory_gb=4, runtime="01:00:00")
        assert answer.status_code == 302, page_error(answer)
        hub.wait_ready(admin, "alice", timeout=SERVER_START_S)
        ((job_id, state),) = (line.split() for line in queued(release_box, "alice"))
        assert state == "RUNNING"
        details = slurm(release_box, "scontrol", "show", "job", "-o", job_id).stdout
        assert "UserId=alice(" in details and re.search(r"TresPerNode=gres[:/]gpu:1\b", details), details
        lab = alice.get(f"{hub.url}/user/alice/lab", timeout=30)
        assert lab.status_code == 200 and "JupyterLab" in lab.text
    finally:
        if hub.server(admin, "alice") is not None:
            hub.stop(admin, "alice")
    wait_for(lambda: not queued(release_box, "alice"), 60, what="her server's job to end")


def test_a_two_node_job_runs_to_completed_and_mails_its_end(release_box, demo, alice, nothing_left):
    job_id = submitted(alice, nodes=2, gpus_per_node=1, epochs=1, mail=True)
    completed(alice, job_id)
    done = wait_for(lambda: (j := job(alice, job_id))["best_mean_auroc"] is not None and j, 60, interval=3,
                    what="the job's final metrics")
    assert done["nodes"] == 2 and done["images_per_sec"] > 0, done
    log = log_of(alice, job_id)
    assert set(re.findall(r"rank \d of 2 on (\S+) ", log)) == set(release_box.nodes), log[-3000:]
    box_mail = Path(release_box.cfg.box_mail_dir) / "alice"

    def mail_about_it():
        messages = mailbox.mbox(str(box_mail)) if box_mail.exists() else []
        return [m for m in messages if str(m["Subject"]).startswith(f"Job {job_id} COMPLETED")]
    (message,) = wait_for(mail_about_it, JOB_END_GRACE_S + MAIL_WAIT_S, interval=2, what="her job's e-mail")
    assert message["To"] == "alice@dsportal.local"


def test_a_sweep_is_a_job_array_running_at_most_its_parallel(release_box, demo, alice, nothing_left):
    """The release runs a sweep's array with its throttle: two trials run and the third waits for the throttle
    (JobArrayTaskLimit, where her 4 GPUs would let it run), then the sweep is cancelled. Its trials' own runs to
    their end are the 22.05 box's (tests/integration/test_sweeps.py) and the program contract's."""
    sweep = {"trials": 3, "parallel": 2, "sampler": "random", "pruner": "none"}
    job_id = submitted(alice, epochs=50, gpus_per_node=1, sweep=sweep)
    shown = slurm(release_box, "scontrol", "show", "job", "-o", job_id).stdout
    assert "ArrayTaskThrottle=2" in shown, shown

    def throttled() -> list[str] | None:
        tasks = slurm(release_box, "squeue", "-h", "-r", "-u", "alice", "-o", "%i %T %r").stdout.splitlines()
        running = [t for t in tasks if t.split()[1] == "RUNNING"]
        held = [t for t in tasks if t.split()[1] == "PENDING" and t.split()[2] == "JobArrayTaskLimit"]
        assert len(running) <= 2, tasks
        return tasks if len(running) == 2 and len(held) == 1 else None
    wait_for(throttled, JOB_WAIT_S, interval=1, what="two trials running and the third held by the throttle")
    page = alice.get(f"{release_box.hub.url}/services/portal/jobs/{job_id}", timeout=60).text
    assert "Sweep: 3 trials, at most 2 at once" in page
    assert alice.delete(f"{alice.base}jobs/{job_id}", timeout=60).status_code == 204
    assert ended(alice, job_id, 120)["state"] == "CANCELLED"


def test_her_usage_and_gpu_hours_come_from_slurm_accounting(release_box, alice):
    """After the jobs above: sacct's JSON of this release, read by its version."""
    def usage():
        answer = alice.get(f"{alice.base}usage", timeout=60).json()
        two_nodes = [j for j in answer.get("jobs", []) if j["gpus"] == 2 and j["gpu_hours"] > 0]
        return answer if two_nodes else None
    answer = wait_for(usage, USAGE_REFRESH_S + 30, interval=3, what="her usage with the 2-node job")
    assert answer["history_unavailable"] == "" and answer["per_user"]["alice"] > 0, answer


def test_her_quota_is_held_by_the_portal_and_by_slurm(release_box, alice, nothing_left):
    held = slurm(release_box, "sbatch", "--parsable", "--gres=gpu:2", "-o", "/dev/null", "--wrap=sleep 300",
                 user="alice").stdout.strip()
    wait_for(lambda: f"{held} RUNNING" in queued(release_box, "alice"), 60, what="her terminal's job to run")

    def refused_by_the_portal():
        answer = alice.post(f"{alice.base}jobs", json={**TINY, "nodes": 2, "gpus_per_node": 2}, timeout=60)
        assert answer.status_code in (400, 201), answer.text
        if answer.status_code == 201:  # the dashboard's squeue answer was older than her job: Slurm holds it
            alice.delete(f"{alice.base}jobs/{answer.json()['id']}", timeout=60)
            return None
        return answer.json()
    refusal = wait_for(refused_by_the_portal, release_box.cfg.dashboard_refresh_s + 30, interval=2,
                       what="the portal's own refusal")
    assert refusal["field"] == "gpus_per_node" and refusal["error"].endswith(
        "ask for at most 1 per node on 2 nodes"), refusal
    over = slurm(release_box, "sbatch", "--parsable", "--gres=gpu:3", "-o", "/dev/null", "--wrap=true",
                 user="alice").stdout.strip()
    wait_for(lambda: slurm(release_box, "squeue", "-h", "-j", over, "-o", "%r").stdout.strip() in (
        "AssocGrpGRES", "AssocGrpGRESLimit"), 30, what="Slurm to hold her job at her GPU limit")
    never = slurm(release_box, "sbatch", "--gres=gpu:1", "-o", "/dev/null", "--wrap=true", user="bob", check=False)
    assert never.returncode != 0 and "Job violates accounting/QOS policy" in never.stderr, never.stderr
    limits = slurm(release_box, "sacctmgr", "-nP", "show", "assoc", "user=bob", "format=User,MaxSubmitJobs").stdout
    assert f"bob|{release_box.cfg.max_jobs_per_user}" in limits, limits


def test_a_lost_node_requeues_her_job_which_resumes(release_box, demo, alice, nothing_left):
    """This release's requeue of a job whose node was lost, and its restart: the node is lost once the job runs on
    both nodes, and the job is cancelled once its second run has started, saying so. Where the second run goes on
    from (its checkpoint, every epoch once) is each program's own proof (tests/programs) and the test box's
    (tests/integration/test_job_endings.py)."""
    job_id = submitted(alice, nodes=2, gpus_per_node=1, epochs=60)
    running_on_both_nodes(release_box, alice, job_id, JOB_WAIT_S)
    lost = release_box.nodes[1]
    release_box.box("crash", lost)
    try:
        wait_for(lambda: job(alice, job_id)["state"] == "PENDING", 120, interval=2, what="Slurm to requeue the job")
        page = wait_for(lambda: (j := job(alice, job_id))["history"] and j, 60, interval=3, what="its history")
        assert page["history"][0].startswith(f"requeued after {lost} failed"), page
    finally:
        release_box.box("start", lost)
    # As on the test box: the killed run's terminate request delivered before the new run may start (make test at
    # 2a2c57a: the new run's ORTE daemon on the node that came back was killed).
    node_taken_back(lost, timeout=90, run=lambda *argv: slurm(release_box, *argv).stdout)
    slurm(release_box, "scontrol", "update", f"jobid={job_id}", "starttime=now")
    log = wait_for(lambda: (text := log_of(alice, job_id)) and "restarted (restart 1) after it was requeued" in text
                   and text, JOB_WAIT_S, interval=2, what="the requeued job to start again")
    assert re.search(rf"Slurm job {job_id} on \S+, 2 worker\(s\)", log.split("after it was requeued", 1)[1]), \
        log[-3000:]
    assert alice.delete(f"{alice.base}jobs/{job_id}", timeout=60).status_code == 204
    assert ended(alice, job_id, 120)["state"] == "CANCELLED"


def test_a_cancelled_job_leaves_nothing_on_any_node(release_box, demo, alice, nothing_left):
    job_id = submitted(alice, nodes=2, gpus_per_node=1, epochs=500)
    running_on_both_nodes(release_box, alice, job_id, 120)
    assert alice.delete(f"{alice.base}jobs/{job_id}", timeout=60).status_code == 204
    assert ended(alice, job_id, 120)["state"] == "CANCELLED"
    wait_for(lambda: not processes_on_nodes(release_box, "alice"), 60, what="every process of the job to end")
    assert not queued(release_box, "alice")
