"""What holds GPUs on one node of a Kubernetes cluster, for that node's GPU reader: each job's and server's running
pods there with their uids, keyed as the dashboard's queue keys them; whose they are from the namespace alone."""

from __future__ import annotations

from datetime import UTC, datetime

from portal.scheduler.cluster import NodeHolding
from portal.scheduler.kubernetes.holders import node_holdings, pod_queue, pods_ahead
from portal.scheduler.kubernetes.manifests import ANNOTATION_TIME_LIMIT, ANNOTATION_TRIALS, LABEL_JOB, LABEL_ROLE
from tests.unit.helpers import K8S_CFG as CFG
from tests.unit.helpers import K8S_JOB_ID as JOB_ID


def gpu_pod(name: str, gpus: int, node: str = "node1", job: str | None = None, phase: str = "Running",
            namespace: str = "dsportal-u-alice") -> dict:
    labels = {LABEL_JOB: job} if job else {"component": "singleuser-server"}
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels, "uid": f"uid-{name}"},
            "status": {"phase": phase, "startTime": "2026-12-05T10:00:00Z"},
            "spec": {"nodeName": node if phase == "Running" else None,
                     "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}


PODS = [gpu_pod("jupyter-alice", 1), gpu_pod("w-1", 1, job=JOB_ID), gpu_pod("w-2", 2, job=JOB_ID, node="node2"),
        gpu_pod("w-3", 1, job=JOB_ID, node="node2"), gpu_pod("launcher", 0, job=JOB_ID),
        gpu_pod("w-4", 1, job=JOB_ID, phase="Pending"), gpu_pod("old", 4, job="k8s-20261121-090000-000000",
                                                                  phase="Succeeded"),
        gpu_pod("b-1", 4, node="node2", job=JOB_ID, namespace="dsportal-u-bob"),  # bob's label: alice's job id
        gpu_pod("system", 1, namespace="kube-system")]


def test_each_holder_on_a_node_has_its_gpus_and_pods_there_keyed_as_the_queue_keys_it():
    assert node_holdings(PODS, CFG.namespace_user, "node1") == {
        "jupyter-alice": NodeHolding("alice", 1, ("uid-jupyter-alice",)), JOB_ID: NodeHolding("alice", 1, ("uid-w-1",))}
    on_two = node_holdings(PODS, CFG.namespace_user, "node2")
    assert on_two == {JOB_ID: NodeHolding("alice", 3, ("uid-w-2", "uid-w-3")),
                      f"dsportal-u-bob/{JOB_ID}": NodeHolding("bob", 4, ("uid-b-1",))}
    assert set(on_two) <= set(pod_queue(PODS, CFG.namespace_user, datetime.now(UTC)))  # the pages' names
    assert node_holdings(PODS, CFG.namespace_user, "node3") == {}
    assert node_holdings(PODS, CFG.namespace_user, "") == {}  # a pending pod's node is no node


def test_a_queue_entry_says_when_its_first_pod_was_made_and_the_gpu_pool_it_asked_for():
    def made(pod: dict, when: str, selector: dict | None = None) -> dict:
        spec = {**pod["spec"], **({"nodeSelector": selector} if selector is not None else {})}
        return {**pod, "metadata": {**pod["metadata"], "creationTimestamp": when}, "spec": spec}
    pods = [made(gpu_pod("w-1", 1, job=JOB_ID, phase="Pending"), "2026-12-05T10:00:07Z", {"nvidia": "t4"}),
            made(gpu_pod("w-2", 1, job=JOB_ID, phase="Pending"), "2026-12-05T10:00:05Z", {"nvidia": "t4"}),
            made(gpu_pod("jupyter-alice", 1), "not a time", {"a": "x", "b": "y"})]
    queue = pod_queue(pods, CFG.namespace_user, datetime.now(UTC))
    job, server = queue[JOB_ID], queue["jupyter-alice"]
    assert (job.submitted, job.partition) == (int(datetime(2026, 12, 5, 10, 0, 5, tzinfo=UTC).timestamp()), "t4")
    assert (server.submitted, server.partition) == (0, "")  # no time it can read, no one pool asked for: not said


def test_a_sweeps_trial_pods_are_its_trials_running_and_waiting_and_no_other_pod_is():
    def trial(name: str, phase: str) -> dict:
        pod = gpu_pod(name, 1, job=JOB_ID, phase=phase)
        return {**pod, "metadata": {**pod["metadata"], "labels": {LABEL_JOB: JOB_ID, LABEL_ROLE: "trial"}}}
    pods = [trial("t-0", "Running"), trial("t-1", "Running"), trial("t-2", "Pending"), trial("t-3", "Succeeded"),
            gpu_pod("w-1", 1, job="k8s-20261205-100000-000000"), gpu_pod("jupyter-alice", 1)]
    queue = pod_queue(pods, CFG.namespace_user, datetime.now(UTC))
    assert (queue[JOB_ID].trials_running, queue[JOB_ID].trials_waiting) == (2, 1)  # an ended pod: a trial done
    assert {(j.trials_running, j.trials_waiting) for key, j in queue.items() if key != JOB_ID} == {(0, 0)}


def test_what_pods_may_still_hold_is_their_gpus_times_what_is_left_of_their_time_limit():
    """What the weekly budget charges ahead on Kubernetes: a job's pods say its time limit (the portal's
    annotation), a server's pod its deadline; a waiting pod counts all of it, a running one the rest; a pod that
    says neither, or says it wrongly, charges nothing; a sweep's trials without a pod yet count whole."""
    now = datetime(2026, 12, 5, 10, 30, tzinfo=UTC)  # the pods started at 10:00

    def said(pod: dict, minutes: object) -> dict:
        return {**pod, "metadata": {**pod["metadata"], "annotations": {ANNOTATION_TIME_LIMIT: minutes}}}
    server = gpu_pod("jupyter-alice", 1)
    server["spec"]["activeDeadlineSeconds"] = 3600
    pods = [said(gpu_pod("w-1", 2, job=JOB_ID), "60"), said(gpu_pod("w-2", 2, job=JOB_ID, phase="Pending"), "60"),
            server, said(gpu_pod("x-1", 1, job="k8s-x"), "sixty"), said(gpu_pod("x-2", 1, job="k8s-y"), "٣")]
    assert pods_ahead(pods, now) == 2 * 30 + 2 * 60 + 30
    queue = pod_queue(pods, CFG.namespace_user, now)
    assert (queue[JOB_ID].gpu_minutes_ahead, queue["jupyter-alice"].gpu_minutes_ahead) == (180, 30)
    assert pods_ahead([said(gpu_pod("w-1", 1, job=JOB_ID, phase="Pending"), "99999999")], now) == 0

    def trial(name: str, phase: str) -> dict:  # a trial pod of a sweep of 6 trials of 2 GPUs, an hour each
        pod = said(gpu_pod(name, 2, job=JOB_ID, phase=phase), "60")
        pod["metadata"]["annotations"][ANNOTATION_TRIALS] = "6"
        return {**pod, "metadata": {**pod["metadata"], "labels": {LABEL_JOB: JOB_ID, LABEL_ROLE: "trial"}}}
    sweep = [trial("t-0", "Succeeded"), trial("t-1", "Failed"), trial("t-2", "Running"), trial("t-3", "Pending")]
    # t-0 done, t-1 lost (made again), t-2 half an hour left, t-3 an hour; 6 - 3 made: 3 trials of 2 GPU-hours
    assert pods_ahead(sweep, now) == 2 * 30 + 2 * 60 + 3 * 2 * 60
