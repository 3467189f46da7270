"""Users' pods fenced in on the Kubernetes box: the portal's NetworkPolicies (the users' namespaces', a job's, the
hub's), enforced by the box's nodes (deploy/kubernetes/kubeparts/netpol.py), tried from pods with nc, each rule
both ways: a user's server reaches the hub's API (its pod, and its Service) and the API server, but not the hub's
other ports, another user's server, a job's workers or any other pod; a job's pods reach each other across nodes
and the same node, another job's pods do not; the hub's pods (a proxy's label) reach the servers. With the enforcer
stopped, its rules are gone from every node and the refused connections pass: it is the rules that refuse."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import requests
from kubernetes import client as k8s
from kubernetes.dynamic.exceptions import ForbiddenError
from kubernetes.stream import stream

from deploy.kubernetes.kubeparts import netpol
from portal.scheduler.kubernetes.netpol import (
    SERVER_ACCESS,
    SERVER_LABELS,
    SERVER_PORT,
    TRAINING_LABELS,
    job_network_policy,
)
from tests.conftest import wait_for
from tests.kubernetes.conftest import kubebox

pytestmark = pytest.mark.integration
BUSYBOX = "localhost/dsportal-busybox:latest"
ALICE_NS, BOB_NS, HUB_NS, OTHER_NS = "dsportal-u-alice", "dsportal-u-bob", "dsportal", "dsportal-netpol-checks"
JOB_X, JOB_Y = "k8s-20261128-000000-aaaaaa", "k8s-20261128-000000-bbbbbb"
FENCED_S = 60  # the enforcer programs a change within a second or two; pods start in seconds
LISTEN = "httpd -p 2222 -h /etc; httpd -f -p 40000 -h /etc"  # a worker's ssh port and one of Open MPI's


def job_labels(job: str, role: str) -> dict[str, str]:
    return {**TRAINING_LABELS, "dsportal/job-id": job, "dsportal/role": role, "dsportal/user": "alice"}


def pod(name: str, namespace: str, labels: dict[str, str], node: str, command: str = "sleep 3600") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "automountServiceAccountToken": False, "nodeSelector": {"kubernetes.io/hostname": node},
                     "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", command]}]}}


def probe(core: k8s.CoreV1Api, name: str, namespace: str, targets: dict[str, tuple[str, int]]) -> dict[str, str]:
    """From inside the pod: each target "open", "refused" or what else nc said."""
    script = "; ".join(
        f"out=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 8 nc -w 5 {ip} {port} 2>&1 >/dev/null); "
        f"rc=$?; echo \"{label} $rc $out\"" for label, (ip, port) in targets.items())
    text = stream(core.connect_get_namespaced_pod_exec, name, namespace, command=["sh", "-c", script],
                  stderr=True, stdin=False, stdout=True, tty=False)
    found = {}
    for line in text.splitlines():
        label, rc, *said = line.split(" ", 2) + [""]
        found[label] = "open" if rc == "0" else "refused" if "refused" in " ".join(said) else f"rc {rc}: {said}"
    return found


@pytest.fixture(scope="module")
def fenced(kube, pod_hub, core):
    """alice's server and two jobs' pods, bob's server, a proxy's pod and a plain pod elsewhere, on fixed nodes;
    the jobs' policies made by alice herself (as the portal submits them); returns every pod's address."""
    node1, node2 = (node.name for node in kube.box.node_network.nodes)
    core.create_namespace({"metadata": {"name": OTHER_NS}})
    wait_for(lambda: core.list_namespaced_service_account(OTHER_NS).items, 30, what="the namespace's ServiceAccount")
    made = [
        pod("alice-server", ALICE_NS, {**SERVER_LABELS, "hub.jupyter.org/username": "alice"}, node1,
            f"httpd -f -p {SERVER_PORT} -h /etc"),
        pod("x-worker-1", ALICE_NS, job_labels(JOB_X, "worker"), node1, LISTEN),
        pod("x-worker-2", ALICE_NS, job_labels(JOB_X, "worker"), node2, LISTEN),
        pod("x-launcher", ALICE_NS, job_labels(JOB_X, "launcher"), node2),
        pod("y-worker", ALICE_NS, job_labels(JOB_Y, "worker"), node2),
        pod("bob-server", BOB_NS, {**SERVER_LABELS, "hub.jupyter.org/username": "bob"}, node1),
        pod("proxy", HUB_NS, dict(SERVER_ACCESS), node2),
        pod("plain", OTHER_NS, {"app": "plain"}, node2, "httpd -f -p 8080 -h /etc")]
    policies = kubebox.resource(kube.alice, "networking.k8s.io/v1", "NetworkPolicy")
    try:
        for job in (JOB_X, JOB_Y):
            policies.create(body=job_network_policy(kubebox.PORTAL, "alice", job), namespace=ALICE_NS)
        for manifest in made:
            core.create_namespaced_pod(manifest["metadata"]["namespace"], manifest)
        addresses = {}
        for manifest in made:
            meta = manifest["metadata"]
            running = wait_for(lambda meta=meta: (p := core.read_namespaced_pod(meta["name"], meta["namespace"]))
                               .status.phase == "Running" and p, 90, what=f"pod {meta['name']} to run")
            addresses[meta["name"]] = running.status.pod_ip
        expected = {f"{ALICE_NS}/alice-server in+out", f"{BOB_NS}/bob-server in+out", f"{ALICE_NS}/x-worker-1 in",
                    f"{ALICE_NS}/x-worker-2 in", f"{ALICE_NS}/x-launcher in", f"{ALICE_NS}/y-worker in"}
        wait_for(lambda: expected <= programmed(kube), FENCED_S, what=f"the enforcer to fence {sorted(expected)}")
        yield addresses
    finally:
        for manifest in made:
            try:
                core.delete_namespaced_pod(manifest["metadata"]["name"], manifest["metadata"]["namespace"],
                                           grace_period_seconds=0)
            except k8s.ApiException:
                pass
        for job in (JOB_X, JOB_Y):
            try:
                kubebox.resource(kube.admin, "networking.k8s.io/v1", "NetworkPolicy").delete(name=job,
                                                                                              namespace=ALICE_NS)
            except Exception:  # noqa: BLE001  (never made)
                pass
        core.delete_namespace(OTHER_NS)


def programmed(kube) -> set[str]:
    try:
        written = json.loads(netpol.status_file(kube.box).read_text())
    except (OSError, ValueError):
        return set()
    return {entry for node in written["nodes"].values() for entry in node["fenced"]}


def hub_address(core: k8s.CoreV1Api) -> tuple[str, str]:
    # The running one: a pod that an earlier module's test deleted (test_hub_in_a_pod) may still be terminating.
    (hub,) = [p for p in kubebox.box_hub.hub_pods(core) if p.status.phase == "Running" and
              p.metadata.deletion_timestamp is None]
    return hub.status.pod_ip, core.read_namespaced_service("hub", HUB_NS).spec.cluster_ip


def test_the_portals_policies_are_there_and_a_user_cannot_remove_them(kube, pod_hub):
    policies = kubebox.resource(kube.admin, "networking.k8s.io/v1", "NetworkPolicy")
    for namespace in (ALICE_NS, BOB_NS):
        assert {"singleuser", "training"} <= {p.metadata.name for p in policies.get(namespace=namespace).items}
    assert "hub" in {p.metadata.name for p in policies.get(namespace=HUB_NS).items}
    with pytest.raises(ForbiddenError):
        kubebox.resource(kube.bob, "networking.k8s.io/v1", "NetworkPolicy").delete(name="singleuser",
                                                                                 namespace=BOB_NS)


def test_a_users_server_reaches_the_hubs_api_and_dashboard_and_nothing_of_anyone_else(kube, core, fenced):
    """The dashboard: a server asks it for its lab's GPU figures (portal.lab_gpus), with its own token."""
    hub_ip, hub_service = hub_address(core)
    seen = probe(core, "bob-server", BOB_NS, {
        "hub-api": (hub_ip, 8081), "hub-service": (hub_service, 8081), "api-server": (kube.box.api_address,
                                                                                        kube.box.api_port),
        "hub-dashboard": (hub_ip, 8090), "hub-proxy": (hub_ip, 8000), "alice-server": (fenced["alice-server"],
                                                                                        SERVER_PORT),
        "worker-same-node": (fenced["x-worker-1"], 2222), "worker-other-node": (fenced["x-worker-2"], 2222),
        "plain-pod": (fenced["plain"], 8080)})
    assert seen == {"hub-api": "open", "hub-service": "open", "api-server": "open", "hub-dashboard": "open",
                    "hub-proxy": "refused", "alice-server": "refused", "worker-same-node": "refused",
                    "worker-other-node": "refused", "plain-pod": "refused"}


def test_a_jobs_pods_reach_each_other_and_no_other_pod_reaches_them(core, fenced):
    assert probe(core, "x-launcher", ALICE_NS, {"other-node": (fenced["x-worker-1"], 2222),
                                                "same-node": (fenced["x-worker-2"], 40000)}) == \
        {"other-node": "open", "same-node": "open"}
    assert probe(core, "y-worker", ALICE_NS, {"other-node": (fenced["x-worker-1"], 2222),
                                              "same-node": (fenced["x-worker-2"], 40000)}) == \
        {"other-node": "refused", "same-node": "refused"}


def test_the_hubs_pods_reach_the_servers_and_the_hub_its_dashboard(kube, core, pod_hub, fenced):
    assert probe(core, "proxy", HUB_NS, {"alice-server": (fenced["alice-server"], SERVER_PORT),
                                         "plain-pod": (fenced["plain"], 8080),
                                         "worker": (fenced["x-worker-2"], 2222)}) == \
        {"alice-server": "open", "plain-pod": "open", "worker": "refused"}
    # The dashboard answers through the proxy (the hub's pod to its own port 8090, by the Service).
    answer = requests.get(f"{pod_hub.url}/services/portal/", verify=pod_hub.ca, timeout=30, allow_redirects=False)
    assert answer.status_code in (200, 302), answer.status_code


def test_stopped_the_enforcer_leaves_no_rule_and_started_again_it_refuses_again(kube, core, fenced):
    target = {"alice-server": (fenced["alice-server"], SERVER_PORT)}
    print(kubebox.stop_service(kubebox.NETPOL, kube.box))
    try:
        for node in kube.box.node_network.nodes:
            saved = subprocess.run(["nsenter", f"--net=/run/netns/{node.name}", "/usr/sbin/iptables-save"],
                                   capture_output=True, text=True, check=True).stdout
            assert "DSP-" not in saved, saved
        assert probe(core, "bob-server", BOB_NS, target) == {"alice-server": "open"}
    finally:
        print(kubebox.start_service(kubebox.NETPOL, kube.box))
    started = time.monotonic()
    wait_for(lambda: probe(core, "bob-server", BOB_NS, target) == {"alice-server": "refused"}, FENCED_S,
             what="the enforcer to refuse again")
    print(f"refused again {time.monotonic() - started:.1f} s after the start")
