"""The NetworkPolicies that fence users' pods in, as Zero to JupyterHub's chart does by default (pure builders,
unit-tested without a cluster). Made by the hub with each user's namespace (`user_network_policies`), by the
submitter with each training job (`job_network_policy`, owned by the job's record), and by the deployment for the
hub's own pod (`hub_network_policy`: deploy/kubernetes/kubeparts/hub.py in the box; values.yaml's hub.networkPolicy
for a Helm site).

In a user's namespace:
- `singleuser`: their JupyterLab pods (KubeSpawner's label component=singleuser-server) take connections on the
  server's port only from the hub's pods (z2jh's label hub.jupyter.org/network-access-singleuser=true, in the hub's
  namespace) and from a hub outside the cluster (`hub_api_ip`, when it is an address); they reach only the hub's
  API and the dashboard's port beside it (the lab's GPU figures), DNS, the MLflow server (mlflow_url, at an
  address) and what the site lists in `k8s_server_egress` (the API server: notebooks submit jobs).
- `training`: every training pod (app.kubernetes.io/component=training) takes no connection at all, but
- `<job id>` (one per job): from the pods of the same job (dsportal/job-id), so a job's launcher and workers reach
  each other (ssh, Open MPI, Gloo) and nothing else reaches them.

The user may create a job's policy (rbac.yaml), and so could widen what reaches their own pods or where they go;
never another's: a policy only ever selects pods of its own namespace, and every pod of another user, and the hub,
is fenced by its own ingress rules. A training pod's egress is not fenced (z2jh fences none of its own either).
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from portal.mlflow_accounts import tracking_uri
from portal.scheduler.kubernetes.settings import egress_entry

if TYPE_CHECKING:
    from portal.config import PortalConfig

API_VERSION, KIND = "networking.k8s.io/v1", "NetworkPolicy"
SERVER_POLICY, TRAINING_POLICY, HUB_POLICY = "singleuser", "training", "hub"
SERVER_PORT = 8888  # KubeSpawner's default port of the single-user server
SERVER_LABELS = {"component": "singleuser-server"}  # KubeSpawner's, on every server pod
TRAINING_LABELS = {"app.kubernetes.io/component": "training"}  # portal.scheduler.kubernetes.manifests'
HUB_POD_LABELS = {"component": "hub"}  # z2jh's hub pod (the box's hub pod carries it too)
SERVER_ACCESS = {"hub.jupyter.org/network-access-singleuser": "true"}  # z2jh's: who may reach the servers
NAMESPACE_NAME = "kubernetes.io/metadata.name"  # set on every namespace by Kubernetes 1.21+ (rbac.yaml sets it too)
LABEL_USER, LABEL_JOB = "dsportal/user", "dsportal/job-id"
DNS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


def egress_rules(entries: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
    """`k8s_server_egress` as egress rules (settings.egress_entry reads each entry)."""
    rules = []
    for entry in entries:
        cidr, first, last = egress_entry(entry)
        rule: dict[str, Any] = {"to": [{"ipBlock": {"cidr": cidr}}]}
        if first is not None:
            rule["ports"] = [{"protocol": "TCP", "port": first, **({"endPort": last} if last != first else {})}]
        rules.append(rule)
    return rules


def _hub_outside(cfg: PortalConfig) -> str | None:
    """The hub's address when it runs outside the cluster: `hub_api_ip` set to one address (in a pod it listens
    on 0.0.0.0 and is reached through its Service)."""
    try:
        address = ipaddress.ip_address(cfg.hub_api_ip)
    except ValueError:
        return None
    return None if address.is_unspecified else str(address)


def _to_mlflow(cfg: PortalConfig) -> list[dict[str, Any]]:
    """The MLflow tracking server, where the portal has one at an address (docs/mlflow.md): a notebook's `mlflow`
    client reaches it. A server named by a DNS name needs its address in k8s_server_egress."""
    parts = urlsplit(tracking_uri(cfg))
    try:
        address = ipaddress.ip_address(parts.hostname or "")
    except ValueError:
        return []
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return [{"to": [{"ipBlock": {"cidr": f"{address}/32"}}], "ports": [{"protocol": "TCP", "port": port}]}]


def _meta(name: str, namespace: str, user: str | None = None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/part-of": "dsportal", **({LABEL_USER: user} if user else {})}
    return {"name": name, "namespace": namespace, "labels": labels}


def server_policy(cfg: PortalConfig, user: str) -> dict[str, Any]:
    """The user's servers: in from the hub's pods (the proxy) only, out to the hub's API and the dashboard, DNS and
    the site's list."""
    hub_pods: dict[str, Any] = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME: cfg.k8s_namespace}}}
    outside = _hub_outside(cfg)
    sources: list[dict[str, Any]] = [{**hub_pods, "podSelector": {"matchLabels": dict(SERVER_ACCESS)}}]
    to_hub: list[dict[str, Any]] = [{**hub_pods, "podSelector": {"matchLabels": dict(HUB_POD_LABELS)}}]
    if outside:
        sources.append({"ipBlock": {"cidr": f"{outside}/32"}})
        to_hub.append({"ipBlock": {"cidr": f"{outside}/32"}})
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": _meta(SERVER_POLICY, cfg.user_namespace(user), user),
            "spec": {"podSelector": {"matchLabels": dict(SERVER_LABELS)}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{"from": sources, "ports": [{"protocol": "TCP", "port": SERVER_PORT}]}],
                     # the hub's API, and the dashboard beside it (the lab's GPU figures: portal.lab_gpus)
                     "egress": [{"to": to_hub, "ports": [{"protocol": "TCP", "port": port}
                                                         for port in (cfg.hub_api_port, cfg.dashboard_service_port)]},
                                {"ports": [dict(port) for port in DNS]},
                                *_to_mlflow(cfg), *egress_rules(cfg.k8s_server_egress)]}}


def training_policy(cfg: PortalConfig, user: str) -> dict[str, Any]:
    """No connection into a training pod, unless its job's own policy lets its job's pods in."""
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": _meta(TRAINING_POLICY, cfg.user_namespace(user), user),
            "spec": {"podSelector": {"matchLabels": dict(TRAINING_LABELS)}, "policyTypes": ["Ingress"],
                     "ingress": []}}


def user_network_policies(cfg: PortalConfig, user: str) -> list[dict[str, Any]]:
    """What the hub makes in every user's namespace (and replaces when the settings changed)."""
    return [server_policy(cfg, user), training_policy(cfg, user)]


def job_network_policy(cfg: PortalConfig, user: str, job_id: str) -> dict[str, Any]:
    """A job's pods reach each other (mpirun over ssh, Open MPI's and Gloo's ports): named by the job id, made
    after the job's record with an owner reference to it, so the garbage collector deletes it with the job."""
    own = {"matchLabels": {LABEL_JOB: job_id}}
    meta = _meta(job_id, cfg.user_namespace(user), user)
    meta["labels"][LABEL_JOB] = job_id
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta,
            "spec": {"podSelector": own, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": own}]}]}}


def hub_network_policy(namespace: str, hub_labels: dict[str, str], proxy_port: int, api_port: int,
                       other_ports: tuple[int, ...]) -> dict[str, Any]:
    """The hub's pod (hub, proxy and dashboard in one): the proxy's port from anywhere, the hub's API and its other
    ports (the dashboard, which the servers ask for the lab's GPU figures: portal.lab_gpus) from the users' servers
    and the hub's own pods."""
    own = {"podSelector": {"matchLabels": dict(hub_labels)}}
    servers = {"namespaceSelector": {"matchExpressions": [{"key": LABEL_USER, "operator": "Exists"}]},
               "podSelector": {"matchLabels": dict(SERVER_LABELS)}}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": _meta(HUB_POLICY, namespace),
            "spec": {"podSelector": {"matchLabels": dict(hub_labels)}, "policyTypes": ["Ingress"], "ingress": [
                {"ports": [{"protocol": "TCP", "port": proxy_port}]},
                {"from": [own, servers], "ports": [{"protocol": "TCP", "port": port}
                                                   for port in (api_port, *other_ports)]}]}}
