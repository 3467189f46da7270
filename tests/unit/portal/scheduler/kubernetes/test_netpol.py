"""The NetworkPolicies the portal makes (portal.scheduler.kubernetes.netpol): valid for the API server's schema,
named and labelled as the portal finds them again, and the site's egress list read strictly. What they allow,
rule by rule: tests/unit/deploy/kubernetes/kubeparts/test_netpol_rules.py; on a cluster:
tests/kubernetes/test_network_policy.py."""

from __future__ import annotations

import dataclasses

import kubernetes_validate
import pytest

from portal.config import ConfigError, PortalConfig, load
from portal.scheduler.kubernetes.netpol import (
    egress_rules,
    hub_network_policy,
    job_network_policy,
    server_policy,
    user_network_policies,
)
from tests.unit.helpers import KUBERNETES_VERSIONS

CFG = dataclasses.replace(PortalConfig(), scheduler="kubernetes",
                          k8s_server_egress=("198.19.0.1/32:16443", "198.19.4.0/24:2000-2100"))


def test_every_policy_is_valid_for_the_api_server():
    made = [*user_network_policies(CFG, "alice"), job_network_policy(CFG, "alice", "k8s-20261128-170000-abcdef"),
            hub_network_policy("dsportal", {"app": "hub"}, 8000, 8081, (8090,))]
    for manifest in made:
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(manifest, version, strict=True)
    assert {m["metadata"]["namespace"] for m in made[:3]} == {"dsportal-u-alice"}
    assert [m["metadata"]["name"] for m in made] == ["singleuser", "training", "k8s-20261128-170000-abcdef", "hub"]


def test_a_jobs_policy_lets_in_its_own_pods_only():
    policy = job_network_policy(CFG, "bob", "k8s-1")
    own = {"matchLabels": {"dsportal/job-id": "k8s-1"}}
    assert policy["spec"] == {"podSelector": own, "policyTypes": ["Ingress"],
                              "ingress": [{"from": [{"podSelector": own}]}]}
    assert policy["metadata"]["labels"]["dsportal/user"] == "bob"


def test_the_sites_list_becomes_egress_rules():
    assert egress_rules(CFG.k8s_server_egress) == [
        {"to": [{"ipBlock": {"cidr": "198.19.0.1/32"}}], "ports": [{"protocol": "TCP", "port": 16443}]},
        {"to": [{"ipBlock": {"cidr": "198.19.4.0/24"}}], "ports": [{"protocol": "TCP", "port": 2000, "endPort": 2100}]}]
    assert egress_rules(["198.19.0.0/16"]) == [{"to": [{"ipBlock": {"cidr": "198.19.0.0/16"}}]}]
    assert server_policy(CFG, "alice")["spec"]["egress"][2:] == egress_rules(CFG.k8s_server_egress)


def test_a_server_reaches_the_mlflow_server_at_its_address_and_nowhere_else_for_it():
    """The notebook's `mlflow` client (docs/mlflow.md): one rule to the server's address and port, after the hub's
    API and DNS; none without a server, none for `box` (the Slurm box's, which no pod reaches; the Kubernetes box
    names its own server's URL), and none for a name (a NetworkPolicy takes addresses only)."""
    site = dataclasses.replace(CFG, mlflow_url="http://198.19.0.1:16446/services/portal/mlflow")
    assert server_policy(site, "alice")["spec"]["egress"][2] == {
        "to": [{"ipBlock": {"cidr": "198.19.0.1/32"}}], "ports": [{"protocol": "TCP", "port": 16446}]}
    for url in ("", "box", "https://mlflow.example.org/services/portal/mlflow"):
        rules = server_policy(dataclasses.replace(CFG, mlflow_url=url), "alice")["spec"]["egress"]
        assert rules[2:] == egress_rules(CFG.k8s_server_egress), url


@pytest.mark.parametrize("entry", ["198.19.0.1/32:", "198.19.0.1/33", "a.b.c.d", "198.19.0.1/32:5-1", "198.19.0.1:0",
                                   "198.19.0.1:1-2-3", "198.19.0.1:²", "198.19.0.3/24", "198.19.0.1:-5"])
def test_a_bad_entry_is_refused_naming_the_setting(entry):
    with pytest.raises(ConfigError) as err:
        load({"DSPORTAL_K8S_SERVER_EGRESS": entry})
    assert "k8s_server_egress" in str(err.value) and "CIDR:PORT" in str(err.value)


def test_the_hub_outside_the_cluster_only_when_its_api_listens_on_one_address():
    def outside(cfg: PortalConfig) -> list:
        ingress = server_policy(cfg, "alice")["spec"]["ingress"][0]["from"]
        return [peer["ipBlock"]["cidr"] for peer in ingress if "ipBlock" in peer]

    assert outside(CFG) == [] and outside(dataclasses.replace(CFG, hub_api_ip="0.0.0.0")) == []
    assert outside(dataclasses.replace(CFG, hub_api_ip="198.19.16.1")) == ["198.19.16.1/32"]
