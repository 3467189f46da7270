"""The box's NetworkPolicy enforcer's translation (deploy/kubernetes/kubeparts/netpol_rules.py), without a cluster:
the portal's own policies (portal.scheduler.kubernetes.netpol) over a set of pods on two nodes, and each node's
rules run by a small interpreter of the iptables subset they use, packet by packet: who reaches whom. The rules in
a real node's firewall, from a real pod: tests/kubernetes/test_network_policy.py."""

from __future__ import annotations

import dataclasses
import ipaddress
import shlex
from collections import defaultdict

import pytest

from deploy.kubernetes.kubeparts.layout import KubeBox
from deploy.kubernetes.kubeparts.netpol_rules import (
    ALLOWED,
    CHAIN,
    Pod,
    namespace_labels,
    node_program,
    our_chains,
    pods_of,
    removal,
)
from portal.config import PortalConfig
from portal.scheduler.kubernetes.netpol import (
    HUB_POD_LABELS,
    SERVER_ACCESS,
    SERVER_LABELS,
    hub_network_policy,
    job_network_policy,
    user_network_policies,
)

BOX = KubeBox(network="198.19.128.0/20")
CFG = BOX.portal  # the box's settings: the servers may reach its API server
HUB_LABELS = {"app.kubernetes.io/component": "hub", "app.kubernetes.io/part-of": "dsportal"}
GATEWAY = BOX.api_address  # the machine, on the nodes' bridge


def training(job: str, role: str) -> dict[str, str]:
    return {"app.kubernetes.io/component": "training", "dsportal/job-id": job, "dsportal/role": role}


PODS = {
    "hub": Pod("dsportal", "hub-1", "198.19.136.5", "n1", {**HUB_LABELS, **HUB_POD_LABELS, **SERVER_ACCESS},
               {"api": ("TCP", 8081)}),
    "alice-server": Pod("dsportal-u-alice", "jupyter-alice", "198.19.136.6", "n1", dict(SERVER_LABELS)),
    "bob-server": Pod("dsportal-u-bob", "jupyter-bob", "198.19.137.6", "n2", dict(SERVER_LABELS)),
    "x-launcher": Pod("dsportal-u-alice", "x-launcher", "198.19.137.7", "n2", training("x", "launcher")),
    "x-worker1": Pod("dsportal-u-alice", "x-worker-1", "198.19.136.8", "n1", training("x", "worker")),
    "x-worker2": Pod("dsportal-u-alice", "x-worker-2", "198.19.137.8", "n2", training("x", "worker")),
    "y-worker": Pod("dsportal-u-alice", "y-worker-1", "198.19.137.9", "n2", training("y", "worker")),
    "bob-job": Pod("dsportal-u-bob", "z-worker-1", "198.19.136.9", "n1", training("z", "worker")),
    "other": Pod("default", "plain", "198.19.136.10", "n1", {"app": "plain"}),  # selected by no policy
}
NAMESPACES = namespace_labels([{"metadata": {"name": name, "labels": labels}} for name, labels in (
    ("dsportal", {"app.kubernetes.io/part-of": "dsportal"}), ("default", {}),
    ("dsportal-u-alice", {"dsportal/user": "alice"}), ("dsportal-u-bob", {"dsportal/user": "bob"}))])


def policies(cfg: PortalConfig = CFG) -> list[dict]:
    return [*user_network_policies(cfg, "alice"), *user_network_policies(cfg, "bob"),
            job_network_policy(cfg, "alice", "x"), job_network_policy(cfg, "alice", "y"),
            job_network_policy(cfg, "bob", "z"), hub_network_policy("dsportal", HUB_LABELS, 8000, 8081, (8090,))]


def _options(rule: list[str]) -> tuple[dict[str, str], set[str]]:
    options, negated, index = {}, set(), 0
    while index < len(rule):
        if rule[index] == "!":
            negated.add(rule[index + 1])
            index += 1
            continue
        options[rule[index]] = rule[index + 1] if index + 1 < len(rule) else ""
        index += 2
    return options, negated


def verdict(text: str, src: str, dst: str, port: int, protocol: str = "tcp") -> bool:
    """Whether a new connection passes the node's rules: the subset of iptables they use, interpreted."""
    chains: dict[str, list[list[str]]] = defaultdict(list)
    for line in text.splitlines():
        if line.startswith("-A "):
            parts = shlex.split(line)
            chains[parts[1]].append(parts[2:])
    marked = False

    def run(chain: str) -> bool:  # False: rejected
        nonlocal marked
        for rule in chains[chain]:
            options, negated = _options(rule)
            if "--ctstate" in options:
                continue  # a new connection
            if "-s" in options and ipaddress.ip_address(src) not in ipaddress.ip_network(options["-s"]):
                continue
            if "-d" in options and ipaddress.ip_address(dst) not in ipaddress.ip_network(options["-d"]):
                continue
            if options.get("-p", protocol) != protocol:
                continue
            if "--dport" in options:
                low, _, high = options["--dport"].partition(":")
                if not int(low) <= port <= int(high or low):
                    continue
            if "--mark" in options and ("--mark" in negated) == marked:
                continue
            target = options["-j"]
            if target == "MARK":
                marked = options["--set-xmark"] == ALLOWED
            elif target == "REJECT":
                return False
            elif target == "RETURN":
                return True
            elif not run(target):
                return False
        return True

    return run(CHAIN)


def reaches(source: str, target: str, port: int, protocol: str = "tcp", cfg: PortalConfig = CFG,
            extra: list[dict] | None = None) -> bool:
    """Through the source's node and the target's (each checks its own pods); a name of PODS, or an address."""
    pods = list(PODS.values())
    src = PODS[source].ip if source in PODS else source
    dst = PODS[target].ip if target in PODS else target
    nodes = {PODS[name].node for name in (source, target) if name in PODS}
    made = [node_program(node, [*policies(cfg), *(extra or [])], pods, NAMESPACES) for node in sorted(nodes)]
    return all(verdict(program.text, src, dst, port, protocol) for program in made)


def test_a_server_reaches_the_hubs_api_the_dashboard_and_dns_but_nothing_else_of_the_hub():
    assert reaches("bob-server", "hub", 8081)
    assert reaches("bob-server", "hub", 8090)  # the dashboard: the lab's GPU figures (portal.lab_gpus)
    assert not reaches("bob-job", "hub", 8090)  # a training pod is no server
    assert reaches("bob-server", "198.19.0.53", 53, "udp") and reaches("bob-server", "198.19.0.53", 53)
    for port in (8000, 22):
        assert not reaches("bob-server", "hub", port), port


def test_no_pod_reaches_another_users_server_and_the_hub_does():
    for source in ("bob-server", "bob-job", "x-worker1", "other"):
        assert not reaches(source, "alice-server", 8888), source
    assert reaches("hub", "alice-server", 8888)
    assert not reaches("hub", "alice-server", 9999)  # the server's port only


def test_a_jobs_pods_reach_each_other_and_nothing_else_reaches_them():
    for port in (2222, 1024, 40000, 65535):
        assert reaches("x-launcher", "x-worker1", port) and reaches("x-worker2", "x-worker1", port)
    for source in ("y-worker", "bob-server", "alice-server", "bob-job", "hub", "other"):
        assert not reaches(source, "x-worker1", 2222), source
    assert not reaches(GATEWAY, "x-worker2", 2222)
    assert reaches("x-worker1", "198.19.0.99", 443)  # a training pod's egress is not fenced


def test_the_servers_reach_what_the_site_lists_and_only_that():
    assert reaches("bob-server", GATEWAY, BOX.api_port)
    assert not reaches("bob-server", GATEWAY, 22)
    assert not reaches("bob-server", "198.19.0.99", 443)
    wide = dataclasses.replace(CFG, k8s_server_egress=("198.19.0.0/24:400-500",))
    assert reaches("bob-server", "198.19.0.99", 443, cfg=wide) and not reaches("bob-server", "198.19.0.99", 501,
                                                                             cfg=wide)


def test_a_hub_outside_the_cluster_is_named_by_its_address():
    assert not reaches(GATEWAY, "alice-server", 8888)  # the hub in a pod: the machine is not the hub
    outside = dataclasses.replace(CFG, hub_api_ip=GATEWAY, hub_api_port=18281)
    assert reaches(GATEWAY, "alice-server", 8888, cfg=outside)
    assert reaches("alice-server", GATEWAY, 18281, cfg=outside) and not reaches("alice-server", GATEWAY, 18290,
                                                                               cfg=outside)


def test_the_hubs_proxy_port_is_open_and_its_dashboard_its_own():
    assert reaches(GATEWAY, "hub", 8000) and reaches("other", "hub", 8000)
    assert reaches("hub", "hub", 8090) and not reaches("other", "hub", 8090) and not reaches(GATEWAY, "hub", 8090)
    assert reaches("alice-server", "hub", 8081) and not reaches("other", "hub", 8081)


def test_an_ip_block_with_exceptions_and_a_named_port():
    policy = {"metadata": {"namespace": "default", "name": "p"}, "spec": {
        "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["plain"]}]},
        "ingress": [{"from": [{"ipBlock": {"cidr": "198.19.0.0/16", "except": ["198.19.137.0/24"]}}],
                     "ports": [{"port": "web"}]}]}}
    pods = [dataclasses.replace(PODS["other"], ports={"web": ("TCP", 8080)}),
            *(pod for name, pod in PODS.items() if name != "other")]
    program = node_program("n1", [policy], pods, NAMESPACES)
    assert program.fenced == ["default/plain in"]  # no policyTypes and no egress: Ingress only
    assert verdict(program.text, "198.19.136.6", PODS["other"].ip, 8080)
    assert not verdict(program.text, "198.19.137.6", PODS["other"].ip, 8080)  # excepted
    assert not verdict(program.text, "198.19.136.6", PODS["other"].ip, 8081)
    egress = {"metadata": {"namespace": "default", "name": "q"},
              "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": "web"}]}]}}
    program = node_program("n1", [egress], pods, NAMESPACES)
    assert program.notes and "allows nothing" in program.notes[0]
    assert not verdict(program.text, PODS["other"].ip, "198.19.0.1", 8080)


def test_a_node_programs_only_its_own_pods():
    n1 = node_program("n1", policies(), list(PODS.values()), NAMESPACES)
    assert n1.fenced == ["dsportal-u-alice/jupyter-alice in+out", "dsportal-u-alice/x-worker-1 in",
                         "dsportal-u-bob/z-worker-1 in", "dsportal/hub-1 in"]
    assert all(chain.startswith("DSP-") and len(chain) <= 28 for chain in n1.chains)
    assert node_program("n3", policies(), list(PODS.values()), NAMESPACES).fenced == []


def test_the_api_servers_pods_become_pods_and_stale_chains_go():
    items = [{"metadata": {"namespace": "a", "name": "p", "labels": {"x": "1"}},
              "spec": {"nodeName": "n1", "containers": [{"ports": [{"name": "web", "containerPort": 80}]}]},
              "status": {"podIP": "198.19.136.20", "phase": "Running"}},
             {"metadata": {"namespace": "a", "name": "done"}, "spec": {}, "status": {"podIP": "1", "phase": "Failed"}},
             {"metadata": {"namespace": "a", "name": "net"}, "spec": {"hostNetwork": True},
              "status": {"podIP": "198.19.0.11", "phase": "Running"}},
             {"metadata": {"namespace": "a", "name": "new"}, "spec": {}, "status": {"phase": "Pending"}}]
    assert pods_of(items) == [Pod("a", "p", "198.19.136.20", "n1", {"x": "1"}, {"web": ("TCP", 80)})]
    saved = "*filter\n:INPUT ACCEPT [0:0]\n:DSP-NETPOL - [0:0]\n:DSP-I-AB - [0:0]\n:KUBE-FORWARD - [0:0]\n"
    assert our_chains(saved) == ["DSP-NETPOL", "DSP-I-AB"]
    assert removal(["DSP-NETPOL", "DSP-I-AB"], ["DSP-NETPOL"]) == "*filter\n:DSP-I-AB - [0:0]\n-X DSP-I-AB\nCOMMIT\n"
    assert removal(["DSP-NETPOL"], ["DSP-NETPOL"]) == ""


@pytest.mark.parametrize(("selector", "labels", "selected"), [
    ({}, {}, True), ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True)])
def test_label_selectors(selector, labels, selected):
    from deploy.kubernetes.kubeparts.netpol_rules import matches

    assert matches(selector, labels) is selected
