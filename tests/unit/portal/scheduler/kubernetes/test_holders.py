"""What holds GPUs on one node of a Kubernetes cluster, for that node's GPU reader: each job's and server's running
pods there with their uids, keyed as the dashboard's queue keys them; whose they are from the namespace alone."""

from __future__ import annotations

from datetime import UTC, datetime

from portal.scheduler.cluster import NodeHolding
from portal.scheduler.kubernetes.holders import node_holdings, pod_queue
from portal.scheduler.kubernetes.manifests import LABEL_JOB
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
