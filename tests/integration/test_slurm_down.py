"""slurmctld stopped during a spawn and while the dashboard is open: the spawn keeps waiting (saying why) instead
of failing as an ended job, the dashboard answers "Slurm is unavailable" at once (no 500, no hang), and once
slurmctld is back the spawn completes with the same job: nothing is lost."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.conftest import NODES, SERVER_START_S, box, end_job, jobs_of, slurm, wait_for
from tests.integration.helpers import PORTAL, browser, start_in_background, token_session

pytestmark = pytest.mark.integration
ANSWER_S = 25  # the longest a dashboard request may take while Slurm is down (its own timeout is 20 s)


@pytest.fixture
def holder(cluster):
    """A job that holds every node whole, so alice's server job waits in the queue."""
    job_id = slurm("sbatch", "--parsable", f"--nodes={len(NODES)}", "--exclusive", "--mem=1G", "--wrap=sleep 300",
                   "-o", "/dev/null").strip()
    wait_for(lambda: "RUNNING" in slurm("squeue", "-h", "-j", job_id, "-o", "%T"), 30, what="the holder job")
    yield job_id
    box("start", "slurmctld")  # whatever happened, the box is left with its controller
    end_job(job_id)


def nodes_answering() -> bool:
    """Whether every node answers the restarted slurmctld. An outage longer than the box's SlurmdTimeout (20 s
    here, for the node-crash tests; Slurm's default is 300) leaves the nodes DOWN as not responding at the restart,
    and slurmctld does not ping a DOWN node again (seen on a loaded machine: they stayed DOWN until their slurmd
    restarted). The admin who brought the controller back resumes them, as at a site after a long outage."""
    answering = True
    for line in slurm("sinfo", "-h", "-N", "-o", "%N %t").splitlines():
        node, state = line.split()
        if state.startswith("down"):
            try:
                slurm("scontrol", "update", f"nodename={node}", "state=resume")
            except subprocess.CalledProcessError:
                pass  # its state changed since sinfo answered (it came back): read again at the next poll
        answering = answering and state.rstrip("*") == state and state in ("idle", "mix", "alloc")
    return answering


def timed_get(session, url: str):
    began = time.monotonic()
    response = session.get(url, timeout=ANSWER_S + 5)
    return response, time.monotonic() - began


def test_slurmctld_down_during_a_spawn_and_with_the_dashboard_open(cluster, hub, admin, alice, holder):
    api, pages = token_session(hub, "alice"), browser(hub, "alice")
    assert api.get(f"{hub.url}{PORTAL}api/jobs", timeout=60).status_code == 200
    answered = time.monotonic()
    events, done = start_in_background(hub, admin, "alice", {"gpus": 0})
    wait_for(lambda: any("(Slurm: Resources)" in e[1].get("message", "") for e in events), 30,
             what="alice's server job pending")
    (job,) = jobs_of("alice")

    box("stop", "slurmctld")
    # Slurm's answer from before the stop serves every request for dashboard_refresh_s (by design): wait it out.
    time.sleep(max(0.0, answered + cluster.dashboard_refresh_s - time.monotonic()))
    for session, path in ((api, "api/jobs"), (api, "api/cluster"), (pages, "jobs"), (pages, "cluster")):
        response, took = timed_get(session, f"{hub.url}{PORTAL}{path}")
        assert response.status_code == 503 and "Slurm is unavailable" in response.text, (path, response.text[-500:])
        assert "Traceback" not in response.text and took < ANSWER_S, (path, took)
    wait_for(lambda: any("Slurm unavailable" in e[1].get("message", "") for e in events), 30,
             what="the progress page to say that Slurm does not answer")
    assert not done.is_set() and (hub.server(admin, "alice") or {}).get("pending") == "spawn", events[-3:]

    box("start", "slurmctld")
    wait_for(nodes_answering, 60, interval=1, what="the nodes to answer the restarted slurmctld")
    slurm("scancel", holder)
    assert done.wait(SERVER_START_S), f"the spawn did not end after slurmctld came back: {events[-3:]}"
    assert events[-1][1].get("ready"), events[-3:]
    assert jobs_of("alice") == [f"{job.split()[0]} RUNNING"]  # the same job: nothing was submitted twice
    assert wait_for(lambda: api.get(f"{hub.url}{PORTAL}api/jobs", timeout=60).status_code == 200, 30,
                    what="the dashboard to answer again")
