"""What a pending job waits for, as the jobs list, a job's page and the API say it (portal.service.summary.waiting):
the reason in words once, what holds what it asks for, and Slurm's estimate of its start; and what a submit says
of a job that will wait (portal.scheduler.cluster.start_note)."""

from __future__ import annotations

from datetime import datetime

import portal.jobs  # noqa: F401  (before the Kubernetes scheduler's modules, as the portal imports them)
from portal.scheduler.cluster import ClusterNode, NodePool, start_note, users_jobs
from portal.scheduler.kubernetes.holders import pod_queue
from portal.scheduler.kubernetes.manifests import LABEL_JOB
from portal.scheduler.slurm.json_answers import read_squeue
from portal.scheduler.snapshot import ClusterSnapshot
from portal.service.summary import waiting
from tests.slurm_answers import squeue_job, squeue_json

NOW = datetime(2026, 11, 26, 18, 0).timestamp()


def snapshot(*jobs) -> ClusterSnapshot:
    return ClusterSnapshot(taken_at=0.0, queue=read_squeue(squeue_json(*jobs), NOW), asked_at=NOW)


def test_a_job_behind_alices_own_server_names_it_and_slurms_estimate():
    found = snapshot(
        squeue_job(4, "alice", gpus_per_node=1, name="spawner-jupyterhub"),
        squeue_job(7, "alice", gpus_per_node=1),
        squeue_job(8, "bob", gpus_per_node=1, uid=10002),
        squeue_job(9, "alice", "PENDING", gpus_per_node=1, nodes=2, reason="Resources", start_time=int(NOW) + 1500))
    line = found.queue["9"]
    assert line.expected_start == int(NOW) + 1500
    said = waiting(line, found, NOW)
    assert said == {"reason": "waiting for GPUs, CPUs or memory to free up (Slurm: Resources)",
                    "held_by": "your server (job 4), your job 7",  # not bob's: alice can act on her own
                    "expected_start": "18:25"}
    # An admin reading of alice's job: they are alice's, not "yours".
    assert waiting(line, found, NOW, whose="alice's")["held_by"] == "alice's server (job 4), alice's job 7"


def test_with_nothing_of_hers_running_it_is_other_users_jobs_and_no_estimate_is_said_as_none():
    found = snapshot(squeue_job(8, "bob", gpus_per_node=4, uid=10002),
                     squeue_job(9, "alice", "PENDING", gpus_per_node=1, reason="(Resources)"))
    said = waiting(found.queue["9"], found, NOW)
    assert said["reason"].count("Resources") == 1  # squeue's %R parentheses are not repeated
    assert said["held_by"] == "other users' jobs" and said["expected_start"] == ""


def test_a_reason_not_about_held_resources_names_no_holder_and_a_past_estimate_is_not_shown():
    found = snapshot(squeue_job(4, "alice", gpus_per_node=1, name="spawner-jupyterhub"),
                     squeue_job(9, "alice", "PENDING", reason="JobHeldUser", start_time=int(NOW) - 60))
    said = waiting(found.queue["9"], found, NOW)
    assert said == {"reason": "the job is held (Slurm: JobHeldUser)", "held_by": "", "expected_start": ""}
    tomorrow = snapshot(squeue_job(9, "alice", "PENDING", reason="Priority",
                                   start_time=int(datetime(2026, 11, 27, 9, 30).timestamp())))
    assert waiting(tomorrow.queue["9"], tomorrow, NOW)["expected_start"] == "Fri 27 Nov 09:30"


def test_on_kubernetes_the_schedulers_words_and_her_running_server_pod():
    def pod(name, job, phase, message=""):
        labels = {LABEL_JOB: job} if job else {}
        conditions = [{"type": "PodScheduled", "status": "False", "message": message}] if message else []
        return {"metadata": {"name": name, "namespace": "dsportal-u-alice", "labels": labels},
                "spec": {"nodeName": "kube-node1" if phase == "Running" else "",
                         "containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}}}]},
                "status": {"phase": phase, "conditions": conditions, "startTime": "2026-11-26T17:00:00Z"}}
    queue = pod_queue([pod("jupyter-alice", "", "Running"),
                       pod("k8s-1-worker-0", "k8s-1", "Pending",
                           "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")],
                      lambda namespace: "alice", datetime.now().astimezone())
    found = ClusterSnapshot(taken_at=0.0, queue=queue, asked_at=NOW)
    said = waiting(found.queue["k8s-1"], found, NOW)
    assert said["reason"] == "none of the 2 nodes can run it now: 2 with too few free GPUs"  # once, in words
    assert said["held_by"] == "your server (job jupyter-alice)" and said["expected_start"] == ""


def node(name: str, free_gpus: int = 4, free_cpus: int = 8, free_mb: int = 24576) -> ClusterNode:
    return ClusterNode(name, cpus=8, memory_mb=24576, gpus=4, free_gpus=free_gpus, usable=True, partitions=("gpu",),
                     state="MIXED", free_cpus=free_cpus, free_memory_mb=free_mb)


def test_a_submit_that_will_wait_says_for_what_before_it_waits():
    """Her server holds 1 GPU, 2 CPUs and 4 GB of node1: a 2-node job asking 21 GB per node will wait for it."""
    gpu = NodePool("gpu", (node("node1", 3, 6, 20480), node("node2")), max_minutes=None, default=True)
    found = snapshot(squeue_job(4, "alice", gpus_per_node=1, name="spawner-jupyterhub", node_list="node1"),
                     squeue_job(8, "bob", gpus_per_node=1, uid=10002, node_list="node2"))
    mine = users_jobs(found.queue, "alice")
    assert start_note(2, 1, 4, 21, gpu, mine) == \
        "will wait for your server (job 4) to end: node1 has 20 of 24 GB free"
    assert start_note(2, 1, 4, 16, gpu, mine) == ""  # the defaults fit beside her server
    assert start_note(1, 1, 4, 21, gpu, mine) == ""  # node2 alone holds it
    assert start_note(2, 4, 8, 16, gpu, mine) == \
        "will wait for your server (job 4) to end: node1 has 3 of 4 GPUs and 6 of 8 CPUs free"
    theirs = NodePool("gpu", (node("node1"), node("node2", 0)), max_minutes=None, default=True)
    assert start_note(2, 1, 1, 1, theirs, mine) == \
        "will wait for other users' jobs to end: node2 has 0 of 4 GPUs free"
