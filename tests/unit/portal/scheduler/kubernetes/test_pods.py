"""A pod's status in words (portal.scheduler.kubernetes.pods): why it cannot start, and the scheduler's reasons."""

from __future__ import annotations

import pytest

from portal.scheduler.kubernetes.pods import cannot_start, event_in_words, scheduling_in_words


def pod(phase="Pending", waiting=None, terminated=None, scheduled=None) -> dict:
    status: dict = {"phase": phase}
    if waiting or terminated:
        state = {"waiting": waiting} if waiting else {"terminated": terminated}
        status["containerStatuses"] = [{"name": "notebook", "image": "img:1", "state": state}]
    if scheduled:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": scheduled}]
    return {"metadata": {"name": "jupyter-alice"}, "spec": {"containers": [{"name": "notebook",
                                                                            "image": "registry/lab:2"}]},
            "status": status}


@pytest.mark.parametrize(("message", "words"), [
    ("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
     "none of the 2 nodes can run it now: 2 with too few free GPUs"),
    ("0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match node selector.",
     "none of the 3 nodes can run it now: 1 with too few free CPUs; 2 not of the GPU type asked for"),
    ("0/1 nodes are available: 1 Insufficient memory.", "none of the 1 nodes can run it now: 1 with too little "
                                                         "free memory"),
    ("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match pod anti-affinity rules. preemption: "
     "0/2 nodes are available: 2 No preemption victims found for incoming pod.",
     "none of the 2 nodes can run it now: 1 with too few free CPUs; 1 holding another of the job's node pods"),
    ("0/0 nodes are available", "there are no nodes"),
    ("0/2 nodes are available: 2 something new.", "none of the 2 nodes can run it now: 2 something new"),
    ("a message of another shape", "a message of another shape"),
])
def test_the_schedulers_reasons_in_words(message, words):
    assert scheduling_in_words(message) == words


def test_a_pod_that_cannot_start_says_why():
    assert cannot_start(pod(waiting={"reason": "ErrImageNeverPull", "message": "not present"})) == \
        "its image registry/lab:2 is not on the node, and the pull policy is Never: not present"
    assert cannot_start(pod(waiting={"reason": "ImagePullBackOff"})).startswith(
        "its image registry/lab:2 cannot be pulled")
    assert cannot_start(pod(waiting={"reason": "CrashLoopBackOff", "message": "back-off 10s"})) == \
        "it keeps exiting at start"
    assert cannot_start(pod("Failed", terminated={"exitCode": 3, "reason": "Error"})) == \
        "it ended before it was ready (exit code 3, Error)"
    assert cannot_start(pod(scheduled="0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")) == \
        "none of the 2 nodes can run it now: 2 with too few free GPUs"


@pytest.mark.parametrize("state", [
    {},
    {"waiting": {"reason": "ContainerCreating"}},
    {"waiting": {"reason": "PodInitializing"}},
    {"scheduled": "0/2 nodes are available: 2 pod has unbound immediate PersistentVolumeClaims."},
    {"scheduled": "0/2 nodes are available: 2 node(s) had taint {node.kubernetes.io/not-ready: }, that the pod "
                  "didn't tolerate."},
])
def test_a_pod_on_its_way_may_still_start(state):
    assert cannot_start(pod(**state)) is None
    assert cannot_start(None) is None


def test_events_in_words():
    assert event_in_words({"reason": "Scheduled", "message": "Successfully assigned ns/jupyter-alice to "
                                                             "kube-node2"}) == "Placed on node kube-node2"
    assert event_in_words({"reason": "FailedScheduling", "message": "0/2 nodes are available: 2 Insufficient "
                                                                    "nvidia.com/gpu."}) == \
        "Waiting for a node: none of the 2 nodes can run it now: 2 with too few free GPUs"
    assert event_in_words({"reason": "Started", "message": "Started container notebook"}) == \
        "Container started: JupyterLab is starting"
    assert event_in_words({"reason": "SuccessfulMount", "message": "mounted"}) == "mounted"
