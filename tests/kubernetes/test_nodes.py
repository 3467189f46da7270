"""The Kubernetes box's nodes run pods: each node a network namespace with its own containerd and kubelet, the pods'
network routed between nodes and from the host, fake GPUs scheduled as `nvidia.com/gpu`, a namespace's quota on
them, pod logs through the API server (the kubelet's client certificate), the nodes' CNI state in their own dirs,
and `down` leaving nothing behind."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests
from kubernetes import client as k8s

from tests.kubernetes.conftest import kubebox

pytestmark = pytest.mark.integration
BUSYBOX = "localhost/dsportal-busybox:latest"
NAMESPACE = "dsportal-box-checks"


def pod(name: str, command: str, node: str | None = None, gpus: int = 0) -> dict:
    spec: dict = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
        "name": "main", "image": BUSYBOX, "imagePullPolicy": "Never", "command": ["sh", "-c", command],
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def wait_phase(core: k8s.CoreV1Api, name: str, phases: set[str], timeout: float = 60) -> k8s.V1Pod:
    deadline = time.monotonic() + timeout
    while True:
        found = core.read_namespaced_pod(name, NAMESPACE)
        if found.status.phase in phases:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {name} is {found.status.phase}, not {phases}, after {timeout} s: "
                                 f"{found.status.conditions}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def core(kube):
    api = k8s.CoreV1Api(kubebox.api_client(kube.box, kubebox.read_tokens(kube.box)["admin"]))
    api.create_namespace({"metadata": {"name": NAMESPACE}})
    deadline = time.monotonic() + 30  # pods are refused until the namespace's `default` ServiceAccount has a token
    while not (api.read_namespaced_service_account("default", NAMESPACE).secrets
               if api.list_namespaced_service_account(NAMESPACE).items else None):
        assert time.monotonic() < deadline, "the controller-manager made no token for the default ServiceAccount"
        time.sleep(0.5)
    yield api
    api.delete_namespace(NAMESPACE)


def test_every_node_is_ready_with_its_fake_gpus_and_its_own_pod_range(kube, core):
    box = kube.box
    nodes = {node.metadata.name: node for node in core.list_node().items}
    assert sorted(nodes) == [f"{box.name}-node1", f"{box.name}-node2"]
    ranges = []
    for name, node in nodes.items():
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True", (name, ready)
        assert node.status.allocatable["nvidia.com/gpu"] == "4"
        assert node.metadata.labels["nvidia"] == kubebox.PORTAL.k8s_gpu_types[0]
        assert Path("/sys/fs/cgroup/cpu", name, "cpu.shares").read_text().strip() == str(box.node_cpu_shares)
        address = [a.address for a in node.status.addresses if a.type == "InternalIP"][0]
        assert ipaddress.ip_address(address) in ipaddress.ip_network(box.network)
        ranges.append(ipaddress.ip_network(node.spec.pod_cidr))
    assert all(r.subnet_of(ipaddress.ip_network(box.cluster_cidr)) for r in ranges)
    assert not ranges[0].overlaps(ranges[1])


def test_pods_on_two_nodes_reach_each_other_and_the_host_reaches_them(kube, core):
    node1, node2 = (node.name for node in kube.box.node_network.nodes)
    core.create_namespaced_pod(NAMESPACE, pod("server", "echo serving; httpd -f -p 8080 -h /etc", node=node1))
    server = wait_phase(core, "server", {"Running"})
    assert server.spec.node_name == node1
    assert ipaddress.ip_address(server.status.pod_ip) in ipaddress.ip_network(kube.box.cluster_cidr)
    core.create_namespaced_pod(NAMESPACE, pod(
        "client", f"wget -qO- http://{server.status.pod_ip}:8080/hostname && echo fetched", node=node2))
    client = wait_phase(core, "client", {"Succeeded", "Failed"})
    assert client.spec.node_name == node2
    log = core.read_namespaced_pod_log("client", NAMESPACE)  # through the API server to node2's kubelet
    assert client.status.phase == "Succeeded", log
    assert log.splitlines() == ["server", "fetched"]  # the server pod's hostname, served from node1
    assert requests.get(f"http://{server.status.pod_ip}:8080/hostname", timeout=5).text.strip() == "server"
    assert core.read_namespaced_pod_log("server", NAMESPACE).startswith("serving")
    for name in ("server", "client"):
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def test_a_pod_reaches_the_api_server_at_its_service_ip(kube, core):
    """kube-proxy in each node's namespace: the `kubernetes` Service's IP (what a pod's in-cluster client uses,
    a notebook submitting a job) leads to the API server on the host."""
    service = core.read_namespaced_service("kubernetes", "default")
    assert service.spec.cluster_ip == kube.box.api_service_ip
    for node in kube.box.node_network.nodes:
        name = f"service-{node.name}"
        reach = f"echo | nc -w 5 {service.spec.cluster_ip} 443 >/dev/null && echo reached"  # TLS closes on it
        core.create_namespaced_pod(NAMESPACE, pod(name, reach, node=node.name))
        done = wait_phase(core, name, {"Succeeded", "Failed"})
        assert done.status.phase == "Succeeded", core.read_namespaced_pod_log(name, NAMESPACE)
        assert core.read_namespaced_pod_log(name, NAMESPACE).strip() == "reached"
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def test_gpus_are_scheduled_as_a_resource(kube, core):
    """Two pods of 3 GPUs fill 3 of each node's 4; a third of 2 fits nowhere and says why."""
    for name in ("gpus-a", "gpus-b", "gpus-c"):
        core.create_namespaced_pod(NAMESPACE, pod(name, "sleep 600", gpus=3 if name != "gpus-c" else 2))
    placed = {wait_phase(core, name, {"Running"}).spec.node_name for name in ("gpus-a", "gpus-b")}
    assert len(placed) == 2
    deadline = time.monotonic() + 30
    while True:
        waiting = core.read_namespaced_pod("gpus-c", NAMESPACE)
        conditions = [c for c in waiting.status.conditions or [] if c.type == "PodScheduled"]
        if conditions and "Insufficient nvidia.com/gpu" in (conditions[0].message or ""):
            break
        assert time.monotonic() < deadline, waiting.status
        time.sleep(0.5)
    assert waiting.status.phase == "Pending" and not waiting.spec.node_name
    core.delete_namespaced_pod("gpus-a", NAMESPACE, grace_period_seconds=0)
    assert wait_phase(core, "gpus-c", {"Running"}).spec.node_name  # the freed GPUs are used
    for name in ("gpus-b", "gpus-c"):
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def test_a_namespace_quota_on_gpus_refuses_a_pod_over_it(core):
    """The API server's quota admission reads quotas from its own informer, which sees the quota controller's
    status a moment after the API does: until then a pod over the quota is let in. So the pod is tried again
    (each one let in is deleted) until the quota is in force, and the refusal must come within 30 s."""
    core.create_namespaced_resource_quota(NAMESPACE, {"metadata": {"name": "gpus"},
                                                      "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                core.create_namespaced_pod(NAMESPACE, pod("over-quota", "true", gpus=3))
            except k8s.ApiException as answer:
                if answer.status != 409:  # 409: the last one let in is still being deleted
                    refused = answer
                    break
            else:
                core.delete_namespaced_pod("over-quota", NAMESPACE, grace_period_seconds=0)
            assert time.monotonic() < deadline, "a pod over the namespace's GPU quota was still let in after 30 s"
            time.sleep(0.5)
        assert refused.status == 403
        assert "exceeded quota: gpus" in refused.body and "requested: requests.nvidia.com/gpu=3" in refused.body
    finally:
        core.delete_namespaced_resource_quota("gpus", NAMESPACE)
        try:
            core.delete_namespaced_pod("over-quota", NAMESPACE, grace_period_seconds=0)
        except k8s.ApiException as gone:
            assert gone.status == 404


def machine_state(box: kubebox.KubeBox) -> dict:
    """What a box leaves on the machine, by name."""
    names = [node.name for node in box.node_network.nodes]
    return {
        "namespaces": [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                 text=True).stdout.split() if n in names],
        "links": [n for n in (box.node_network.bridge, *(node.host_link for node in box.node_network.nodes))
                  if Path("/sys/class/net", n).exists()],
        "cgroups": [str(p) for name in names for p in Path("/sys/fs/cgroup").glob(f"*/{name}")],
        "mounts": [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                   if str(box.state_dir) in line or str(box.image_store("")) in line],
        "processes": [pid for pid in kubebox.status(box).values() if pid],
        "hosts": [line for line in Path("/etc/hosts").read_text().splitlines() if str(box.state_dir) in line],
        "routes": [line for line in subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
                   .splitlines() if box.node_network.bridge in line],
    }


def test_down_deletes_the_pods_and_leaves_nothing_behind(kube):
    """A second, one-node box with a Job's pod running: `down` deletes it (and the Job does not make it again),
    and afterwards none of the box's namespaces, links, cgroups, mounts, processes, hosts entries or routes is
    left (the test session's box keeps the machine-wide sysctls)."""
    state = Path(f"{kube.box.state_dir}-down")  # short: containerd's sockets live there
    shutil.rmtree(state, ignore_errors=True)
    box = kubebox.KubeBox(state, api_port=kube.box.api_port + 10, name="kubed",
                          network="198.19.48.0/20", nodes=1, images=(BUSYBOX,), cache_dir=kube.box.cache_dir)
    try:
        kubebox.up(box, report=lambda line: None)
        admin = kubebox.api_client(box, kubebox.read_tokens(box)["admin"])
        api = k8s.CoreV1Api(admin)
        template = pod("left", "sleep 600")
        k8s.BatchV1Api(admin).create_namespaced_job("default", {
            "metadata": {"name": "left"}, "spec": {"template": {"spec": template["spec"]}}})
        deadline = time.monotonic() + 60
        while not [p for p in api.list_namespaced_pod("default").items if p.status.phase == "Running"]:
            assert time.monotonic() < deadline, "the Job's pod did not run"
            time.sleep(0.5)
        assert machine_state(box)["cgroups"] and machine_state(box)["namespaces"]
        # Its pod's CNI state is the node's own: the address host-local handed out and libcni's cached result in
        # the node's dir, nothing in the machine's /var/lib/cni (where podman keeps its networks).
        own = box.node_dir(box.node_network.nodes[0].name)
        assert list((own / "ipam").glob(f"{box.name}-node1-pods/*")), sorted(own.rglob("*"))[:40]
        assert list((own / "private" / "var/lib/cni" / "results").glob(f"{box.name}-node1-pods-*"))
        assert not [p for p in Path("/var/lib/cni").rglob("*") if box.name in p.name]
    finally:
        lines = kubebox.down(box)
        shutil.rmtree(state, ignore_errors=True)
    assert "pods: deleted 1" in lines, lines  # not "... still there after 60 s": nothing made it again
    assert machine_state(box) == {key: [] for key in machine_state(box)}, lines
