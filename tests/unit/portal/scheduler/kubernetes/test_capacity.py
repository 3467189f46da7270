"""What a Kubernetes job can ever have of the pool's nodes (portal.scheduler.kubernetes.nodes and records.limits_for):
their allocatable, less what the cluster's own pods request (never a user's); the launcher counted at submit."""

from __future__ import annotations

import pytest

from portal.config import PortalConfig
from portal.jobs import JobSpecError
from portal.records.fit import Shape
from portal.records.spec import parse_job_spec
from portal.scheduler.kubernetes.client import kube_user
from portal.scheduler.kubernetes.errors import KubernetesError
from portal.scheduler.kubernetes.nodes import node_pools
from portal.scheduler.kubernetes.records import limits_for
from portal.scheduler.kubernetes.scheduler import KubernetesScheduler

CFG = PortalConfig(scheduler="kubernetes", k8s_gpu_types=("t4",), gpu_quota={"gpu-users": 4})


def two_cpu_node(name: str) -> dict:
    """A node of the Kubernetes test box: the whole machine's 2 CPUs, 8 GiB, 2 fake GPUs, in pool t4."""
    return {"metadata": {"name": name, "labels": {CFG.k8s_gpu_node_label: "t4"}}, "spec": {},
            "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "2"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def bound(name: str, node_name: str, namespace: str, cpu: str, memory: str, gpus: str) -> dict:
    """A running pod on `node_name` with these requests."""
    return {"metadata": {"name": name, "namespace": namespace, "labels": {}}, "status": {"phase": "Running"},
            "spec": {"nodeName": node_name, "containers": [
                {"resources": {"requests": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus}}}]}}


class FakeCore:
    """CoreV1Api's answers, as the API server gives them: the nodes, and the pods (of a namespace, or all)."""

    def __init__(self, nodes: list[dict], pods: list[dict]):
        self.nodes, self.pods = nodes, pods

    def list_namespaced_pod(self, namespace, **query):
        return {"items": [p for p in self.pods if p["metadata"]["namespace"] == namespace]}

    def list_pod_for_all_namespaces(self, **query):
        return {"items": self.pods}

    def list_node(self, **query):
        return {"items": self.nodes}


NODES = [two_cpu_node("kubec-1"), two_cpu_node("kubec-2")]
HUB = bound("hub-abc", "kubec-1", namespace="dsportal", cpu="100m", memory="512Mi", gpus="0")
ALICE_SERVER = bound("jupyter-alice", "kubec-2", "dsportal-u-alice", cpu="1", memory="2Gi", gpus="1")


def test_the_clusters_own_pods_are_kept_and_users_pods_are_only_busy():
    (pool,) = node_pools(NODES, [HUB, ALICE_SERVER], "nvidia", ("t4",), CFG.namespace_user)
    one, two = pool.nodes
    assert (one.room, one.kept) == (Shape(1900, 7680, 2), Shape(100, 512, 0))
    assert (two.room, two.kept) == (Shape(2000, 8192, 2), Shape(0, 0, 0))  # alice's server ends: not kept
    assert (two.free_cpus, two.free_gpus) == (1, 1)
    assert [room.room for room in pool.rooms()] == [one.room, two.room]
    # without saying whose namespaces are whose, nothing is kept (the cluster page's reading, as before)
    (plain,) = node_pools(NODES, [HUB], "nvidia", ("t4",))
    assert plain.nodes[0].room == Shape(2000, 8192, 2)


def test_the_limits_come_from_the_nodes_and_the_default_job_fits_them():
    (pool,) = node_pools(NODES, [HUB], "nvidia", ("t4",), CFG.namespace_user)
    limits = limits_for(CFG, ["gpu-users"], pools=lambda: [pool])
    assert (limits.cpus_per_node, limits.memory_gb_per_node, limits.gpus_per_node) == (2, 8, 2)
    assert (limits.launcher, limits.own_nodes) == (Shape(500, 2048), True)  # one node pod per node, as on Slurm
    spec = parse_job_spec({}, limits, lambda path: True)
    assert (spec.nodes, spec.gpus_per_node, spec.cpus_per_task) == (1, 1, 1)  # 2 CPUs could meet the launcher
    assert parse_job_spec({"nodes": 2, "cpus_per_task": 1}, limits, lambda path: True).nodes == 2
    with pytest.raises(JobSpecError) as err:  # the job: 2 nodes x 2 CPUs and the launcher
        parse_job_spec({"nodes": 2, "cpus_per_task": 2}, limits, lambda path: True)
    assert err.value.field == "cpus_per_task" and "launcher pod of 0.5 CPUs and 2 GB" in str(err.value)
    assert "0 of its 2 nodes wherever the launcher lands" in str(err.value)
    with pytest.raises(JobSpecError) as err:  # each node pod on a node of its own: 3 nodes are more than there are
        parse_job_spec({"nodes": 3, "cpus_per_task": 1, "gpus_per_node": 0}, limits, lambda path: True)
    assert err.value.field == "nodes", str(err.value)


def test_a_torchrun_job_brings_no_launcher_pod_so_a_job_that_fills_the_nodes_fits_as_pytorch():
    """A PyTorch job's node 0 is its own launcher (portal.scheduler.kubernetes.torchjob): 2 node pods of 7 GB fill
    these nodes (7.5 and 8 GB) so a Horovod job's 2 GB launcher pod has no room; as PyTorch the same job fits, and
    its default memory is not lowered for a launcher it does not have."""
    (pool,) = node_pools(NODES, [HUB], "nvidia", ("t4",), CFG.namespace_user)
    limits = limits_for(CFG, ["gpu-users"], pools=lambda: [pool])
    assert limits.adds_launcher("horovod") and not limits.adds_launcher("torchrun")
    job = {"nodes": 2, "cpus_per_task": 1, "memory_gb": 7}
    spec = parse_job_spec({**job, "template": "chexnet-torch"}, limits, lambda path: True)
    assert (spec.nodes, spec.memory_gb) == (2, 7)
    with pytest.raises(JobSpecError) as err:  # the same job with Horovod: its launcher pod has no room left
        parse_job_spec(job, limits, lambda path: True)
    assert err.value.field == "memory_gb" and "launcher pod of 0.5 CPUs and 2 GB" in str(err.value)
    defaults = {"nodes": 2, "cpus_per_task": 1}
    assert parse_job_spec({**defaults, "template": "chexnet-torch"}, limits, lambda path: True).memory_gb > \
        parse_job_spec(defaults, limits, lambda path: True).memory_gb


def test_where_the_nodes_cannot_be_read_the_configured_shape_stands():
    def refused():
        raise KubernetesError("the users' pods: forbidden (403)", status=403)
    limits = limits_for(CFG, ["gpu-users"], pools=refused)
    assert (limits.cpus_per_node, limits.rooms) == (CFG.k8s_node_cpus, ())
    assert len(limits.node_rooms()) == CFG.k8s_max_nodes and limits.launcher is not None


def test_the_scheduler_weighs_a_submit_against_the_nodes_it_lists():
    core = FakeCore(NODES, [HUB, ALICE_SERVER])
    scheduler = KubernetesScheduler(CFG)
    scheduler._apis = lambda user: (None, core, None)  # type: ignore[method-assign]
    limits = scheduler.limits(kube_user("alice", ["gpu-users"], CFG))
    assert [room.name for room in limits.rooms] == ["kubec-1", "kubec-2"]
    assert limits.rooms[0].room == Shape(1900, 7680, 2)
    assert limits.rooms[1].room == Shape(2000, 8192, 2)  # alice's server is busy, not kept
    assert limits.quota.in_use == 1  # ... and holds a GPU of her quota
