"""A job's end on every node of the box: a cancelled or timed-out two-node training leaves no process behind
(whatever it hid from Slurm), and a node lost in the middle of one requeues it to resume from its checkpoint with
every epoch in TensorBoard once. Moved from test_cluster.py; the helpers both use are in tests/integration/helpers.py.

Sized for 2 CPU cores: the demo set's 64x64 images, batch 8, one worker on each node.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from portal import jobs
from tests.conftest import (
    NODES,
    PROGRAMS,
    box,
    epochs_recorded,
    every_epoch_once_up_to,
    job_wait_s,
    jobs_of,
    node_taken_back,
    slurm,
    tensorboard_steps,
    wait_for,
)
from tests.integration.helpers import JOB_TIMEOUT_S, KILL_WAIT_S, TINY, portal_client, user_processes
from tests.integration.helpers import as_user_in_terminal as as_user

pytestmark = pytest.mark.integration


# --- a job's processes end with it, every one, on every node --------------------------------------------------

# The node-failure runs: tinycnn trains an epoch of a 2-node run in about a second (the PyTorch program's in half
# that), so they need this many for the crash that follows both first checkpoints to find each training, with epochs
# left to resume; each is cancelled once resumed.
EPOCHS = 200
# A process hidden in a cgroup below its step that held the step's output would keep slurmstepd waiting for that
# output for 60 s (fixed in slurmstepd) before the step ends and the epilog kills it: the hidden one here writes
# to /dev/null, as the other hiders do, so the epilog's kill is not waited for behind Slurm's own minute (74 s of
# make test's Slurm side). The minute stays the bound.
STEP_IO_WAIT_S = 60
# What bob's job leaves behind on each node unless Slurm tracks it whole: a daemon (setsid, its parent gone), a
# nohup'd child of a shell that exits, and a process moved into a cgroup of its own below the step (Slurm gives
# the user the step's cgroup directory; only with "hide"). $1 tells one job's sleeps from another's: sleep $1<1..4>.
HIDERS = r"""#!/bin/bash
setsid sleep ${1}1 < /dev/null > /dev/null 2>&1 &
sh -c "nohup sleep ${1}2 > /dev/null 2>&1 &"
step=$(awk -F: '$2 == "freezer" {print $3}' /proc/self/cgroup)
[ "${2:-}" = hide ] && mkdir "/sys/fs/cgroup/freezer$step/hidden" &&
    sh -c "echo \$\$ > /sys/fs/cgroup/freezer$step/hidden/cgroup.procs && exec sleep ${1}3" </dev/null >/dev/null 2>&1 &
sleep ${1}4
"""


GPU_READ_WAIT_S = 40  # two readings of each node's reader (every 10 s: deploy/local/parts/gpus.py), and slack
GPU_BUSY = re.compile(r'data-node="([\w.-]+)">[^<]*<span class="gpu-busy">(\d+) % busy')


def busy_nodes(client, job_id: str) -> set[str]:
    """The nodes where the job's page says its GPUs worked in the last reading's interval: more than 10 %, well
    above an idle holder's (the stand-in's figure is its CPU time, which two loaded cores can halve)."""
    page = client.get(f"{client.base.removesuffix('api/')}jobs/{job_id}?part=figures", timeout=60)
    return {node for node, busy in GPU_BUSY.findall(page.text) if int(busy) > 10}


def job_cgroups(job_id: str) -> list[Path]:
    return [path for node in NODES for path in Path("/sys/fs/cgroup/freezer").glob(f"slurm_{node}/uid_*/job_{job_id}")]


def nothing_left_of(user: str, job_id: str) -> bool:
    """The job has left the queue (its epilog ran on every node), and neither a process of the user nor a cgroup
    of the job is on any node."""
    return not [j for j in jobs_of(user) if j.startswith(f"{job_id} ")] and not any(user_processes(user).values()) \
        and not job_cgroups(job_id)


@pytest.mark.parametrize("when", ["as it starts", "while both nodes train"])
def test_a_cancelled_two_node_training_leaves_no_process_on_any_node(cluster, hub, demo_data, no_jobs_left, when):
    assert not any(user_processes("alice").values()), user_processes("alice")
    client = portal_client(hub, "alice")
    submitted = client.post(f"{client.base}jobs", json={**TINY, "nodes": 2, "gpus_per_node": 1, "epochs": 50},
                            timeout=60)
    assert submitted.status_code == 201, submitted.text
    job = jobs.get(submitted.json()["id"], user="alice")
    if when == "as it starts":
        wait_for(lambda: job.state == "RUNNING", 60, interval=0.2, what="the job to start")
    else:
        wait_for(lambda: all(any("chexnet.train" in p for p in found) for found in user_processes("alice").values())
                 and job_cgroups(job.id), JOB_TIMEOUT_S, interval=1, what="a worker on each node")
        # Each node's GPU reader (the boxes' stand-in) sees the job's GPU there at work, on the job's page.
        wait_for(lambda: busy_nodes(client, job.id) == set(NODES), GPU_READ_WAIT_S, interval=2,
                 what="the job's page to show its GPU busy on each node")
    assert client.delete(f"{client.base}jobs/{job.id}", timeout=60).status_code == 204
    wait_for(lambda: nothing_left_of("alice", job.id), KILL_WAIT_S, what="every process of the job to end")
    assert job.state == "CANCELLED"


def test_what_a_job_hides_from_slurm_ends_with_it_at_cancel_and_at_its_time_limit(cluster, no_jobs_left):
    """Both nodes, from a terminal: one job is cancelled once it has hidden its processes (in a cgroup too), the
    other runs into its time limit: an hour at its submit, its end moved to now by the admin once the first's
    cancel has left it untouched (Slurm ends it at its next check of time limits, within 30 s, while the first's
    epilog kills its hidden processes)."""
    script = Path("/tmp/dsportal-test-hiders.sh")
    script.write_text(HIDERS)
    script.chmod(0o755)

    def sleeps(prefix: str) -> list[str]:
        return [p for found in user_processes("bob").values() for p in found if f" sleep {prefix}" in p]

    cancelled, timed_out = (
        as_user(cluster, "bob", "sbatch", "--parsable", "--no-requeue", "-N", "2", *limit, "-o", "/dev/null",
                f"--wrap=srun -N 2 {script} {args}", check=True).stdout.strip()
        for args, limit in (("91 hide", []), ("92", ["--time=60"])))
    wait_for(lambda: len(sleeps("91")) == 8 and len(sleeps("92")) == 6, 60, what="both jobs to start their sleeps")
    as_user(cluster, "bob", "scancel", cancelled, check=True)
    wait_for(lambda: len(sleeps("91")) <= 2, KILL_WAIT_S, what="what Slurm tracks of the cancelled job to end")
    assert len(sleeps("92")) == 6, sleeps("92")  # the other job's, untouched
    # It runs out while the first one ends: its end moved to now. A time limit is whole minutes from the job's start
    # (timelimit=0:01 is one), which kept the test waiting 73 s; slurmctld ends it at its next check (every 30 s).
    slurm("scontrol", "update", f"jobid={timed_out}", "EndTime=now+3")
    wait_for(lambda: not sleeps("91") and not job_cgroups(cancelled), STEP_IO_WAIT_S + KILL_WAIT_S,
             what="the processes it hid in cgroups to end")
    wait_for(lambda: nothing_left_of("bob", timed_out), job_wait_s("00:01:00"),
             what="the job out of time to end whole")
    states = {job: slurm("sacct", "-n", "-X", "-P", "-j", job, "-o", "State").strip() for job in (cancelled, timed_out)}
    assert states[cancelled].startswith("CANCELLED") and states[timed_out] == "TIMEOUT", states


# --- a node dies in the middle of a 2-node training ------------------------------------------------------------


def test_a_node_failure_requeues_the_job_and_it_resumes_with_every_epoch_once(cluster, hub, demo_data, no_jobs_left):
    """One crash for a 2-node job of each program (PROGRAMS), side by side on both nodes: each has its own job
    script (mpirun's, torchrun's whose rendezvous must start clean after a requeue), while the crash, Slurm's
    requeue and the node's return are the box's and were waited for once per program before (about 60 s each)."""
    client = portal_client(hub, "alice")
    runs = []
    for program in PROGRAMS:
        submitted = client.post(f"{client.base}jobs", json={**TINY, "template": program, "nodes": 2,
                                                            "gpus_per_node": 1, "epochs": EPOCHS}, timeout=60)
        assert submitted.status_code == 201, submitted.text
        job = jobs.get(submitted.json()["id"], user="alice")
        runs.append((program, job, Path(job.job_dir) / "checkpoints"))
    wait_for(lambda: all(epochs_recorded(checkpoints) >= 2 for _, _, checkpoints in runs), JOB_TIMEOUT_S,
             interval=0.2, what="each job's first checkpoint")
    # node2 loses its power mid-training: link down, every process on it killed, no goodbye to its peers.
    assert box("crash", NODES[1]).returncode == 0
    wait_for(lambda: all(job.state == "PENDING" for _, job, _ in runs), 120, interval=2,
             what="Slurm to requeue both jobs")
    # Each run's half on node1 (mpirun or torchrun, its worker) ended with it: no process of alice's is left.
    wait_for(lambda: not any(user_processes("alice").values()), KILL_WAIT_S, what="the first runs' processes to end")
    # What each first run recorded: at most one epoch past its last checkpoint (the record's line comes first).
    recorded = {program: epochs_recorded(checkpoints) for program, _, checkpoints in runs}
    assert all(1 <= epochs < EPOCHS for epochs in recorded.values()), recorded
    # The dashboard's history of the requeue is read at the end, with its resume (not waited for here: 16 s alone).
    assert box("start", NODES[1]).returncode == 0
    # Slurm holds a requeued job for 120 s before it may start again; the admin who brought the node back lets it
    # go sooner, though not at once: a requeued job started within a second of its node's return can find that node
    # still finishing the killed run (its first step is refused), which is what Slurm's hold avoids. Once Slurm
    # calls the node idle again, it has.
    node_taken_back(NODES[1])
    for _, job, _ in runs:
        slurm("scontrol", "update", f"jobid={job.id}", "starttime=now")
    # Each second run goes on from its first's last checkpoint; once it has recorded the epoch after that, what the
    # test checks is there, and it is cancelled then, each on its own (the other may still be starting: under
    # coverage, the PyTorch job trained its last epoch while the test waited for the TensorFlow one's).
    saved: dict[str, int] = {}  # each second run's resume, from its log (read until it says it)
    cancelled: set[str] = set()

    def cancel_each_once_resumed() -> bool:
        for program, job, checkpoints in runs:
            if program not in saved:
                said = re.search(rf"([0-9]+) epochs done, continuing with epoch ([0-9]+) of {EPOCHS}", job.logs())
                if not said:
                    continue
                saved[program] = int(said.group(1))
                assert int(said.group(2)) == saved[program] + 1, (program, said.group(0))
            if program not in cancelled and epochs_recorded(checkpoints) >= saved[program] + 2:
                job.cancel()
                cancelled.add(program)
        return len(cancelled) == len(runs)
    wait_for(cancel_each_once_resumed, JOB_TIMEOUT_S, interval=0.5, what="each requeued run's second epoch")
    for program, job, checkpoints in runs:
        resumed_once(program, job, checkpoints, recorded[program], saved[program], client)


def resumed_once(program: str, job: jobs.Job, checkpoints: Path, recorded: int, saved: int, client) -> None:
    """The second run, cancelled, went on from the first's last checkpoint (`saved`: the epoch recorded, or the one
    before it). Its TensorBoard holds every epoch once, and its page tells the requeue and the resume."""
    assert recorded - 1 <= saved <= recorded, (program, saved, recorded)
    assert job.wait(timeout=JOB_TIMEOUT_S, poll=2) == "CANCELLED", job.logs(tail=60)
    assert "restarted (restart 1) after it was requeued" in job.logs(), program
    steps = tensorboard_steps(Path(job.job_dir) / "tensorboard")
    every_epoch_once_up_to(steps, ("loss/train", "loss/val", "lr", "auroc/mean"), saved + 1)
    throughput = steps["throughput/images_per_sec"]
    assert throughput and len(throughput) == len(set(throughput)), (program, throughput)
    history = client.get(f"{client.base}jobs/{job.id}", timeout=60).json()["history"]
    assert len(history) == 1 and history[0].endswith(f"; resumed at epoch {saved + 1}"), (program, history)
    assert history[0].startswith(f"requeued after {NODES[1]} failed (Not responding) at "), (program, history)
    # The page's figure is the record's, or one behind it: the cancel may fall between an epoch's record line and
    # its TensorBoard write, which the page reads (make test, 2026-12-02: 3 against 4, and 4 against 5).
    at_cancel = epochs_recorded(checkpoints)
    assert at_cancel - 1 <= job.metrics().epochs_done <= at_cancel, (program, job.metrics(), at_cancel)
