"""The hub in a pod, as a site runs it on Kubernetes (issue 27, item 2).

A Deployment from the project's hub image with the `dsportal-hub` service account (deploy/kubernetes/rbac.yaml),
configured from deploy/kubernetes/values.yaml's `hub.extraEnv`, the variables the Helm chart's values give the hub,
with the box's own values over them (BOX_VALUES says which and why). Objects, in namespace `dsportal`:

    PersistentVolume dsportal-hub-state, claim hub-state   the hub's database and cookie secret (hostPath:
                                                           <state>/volumes/hub), kept when the pod is replaced
    Secret dsportal-ldap-ca                                the directory's CA (values.yaml: hub.extraVolumes)
    Secret dsportal-ldap-search                            the password of the portal's own directory identity
                                                           (ldap_search_user), as a file (values.yaml)
    Secret dsportal-hub-tls                                the proxy's HTTPS certificate, signed by the box's CA
                                                           for every node's address (tls/hub.pem), and its key
    Secret dsportal-mlflow-admin                           the box's MLflow server's admin (kubeparts/mlflow.py),
                                                           who makes each user's MLflow account
    Secret dsportal-prometheus                             the box's Prometheus server's scrape token (the hub
                                                           registers it) and its reader (kubeparts/prometheus.py)
    Service hub                                            ClusterIP: 8081 the hub's own API, 8090 the dashboard;
                                                           its address is the servers' way back to the hub
                                                           (DSPORTAL_HUB_CONNECT_IP), whichever pod runs it
    Service proxy-public                                   NodePort NODE_PORT to the proxy's 8000 (z2jh's name):
                                                           the URL `make up-k8s` prints, on a node's address
    NetworkPolicy hub                                      8000 from anywhere, 8081 and 8090 from users' servers
    Deployment hub                                         1 replica, Recreate (one hub at a time: sqlite)

The directory is the Slurm box's slapd (`python -m deploy.local.box start slapd`; the tests': their own box's).
The pods reach only the box's bridge (the nodes have no default route) and slapd listens on 127.0.0.1: the service
`ldap-relay` (socat; kubeparts/relay.py) relays the bridge address's LDAPS port to slapd's, for the pods' range
only, and the pod names the directory by this machine's hostname, which slapd's certificate carries, with a
hostAliases entry for the bridge address. Only LDAPS is relayed: no port that speaks plain LDAP is reachable from
a pod, and the hub's pod talks LDAPS (ldap_tls: ldaps). `install` writes <state>/hub/directory.json; while it is
there, every `up` starts the relay, the MLflow server (kubeparts/mlflow.py) and the Prometheus server
(kubeparts/prometheus.py), imports the hub image again when podman's copy changed, and brings the objects in line.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
import yaml
from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from deploy.kubernetes.kubeparts import images as box_images
from deploy.kubernetes.kubeparts import mlflow as box_mlflow
from deploy.kubernetes.kubeparts import prometheus as box_prometheus
from deploy.kubernetes.kubeparts import volumes as box_volumes
from deploy.kubernetes.kubeparts.api import apply, resource
from deploy.kubernetes.kubeparts.layout import HERE, HUB_NAMESPACE, HUB_SERVICE_ACCOUNT, PORTAL, KubeBox
from deploy.selfsigned import ensure_ca_and_server_cert
from deploy.supervise import BoxError
from portal.config import PortalConfig
from portal.directory import search_password_file
from portal.scheduler.kubernetes.netpol import HUB_POD_LABELS, SERVER_ACCESS, hub_network_policy

VALUES_FILE = HERE / "values.yaml"
HUB_IMAGE = "localhost/dsportal-hub:latest"
NODE_PORT = 30080
HUB_API_PORT, DASHBOARD_PORT, PROXY_PORT = 8081, 8090, 8000
# The hub's CPU request: its share when users' pods on its node compute. At 100m it got a tenth of one busy pod's
# (a request is a cgroup weight) and missed its readiness probe and the directory's 5 s: logins answered 503 and
# the test box's GPU watch failed (make test, 2026-12-06). Half a CPU leaves the node 1.5 for users' pods.
HUB_CPU = "500m"
STATE_MOUNT = "/var/lib/dsportal"  # the image's DSPORTAL_STATE_DIR default; /srv/jupyterhub holds its config
CA_MOUNT = "/etc/dsportal/ldap-ca"
SEARCH_MOUNT = "/etc/dsportal/ldap-search"  # the Secret dsportal-ldap-search's `password`
TLS_MOUNT = "/etc/dsportal/hub-tls"  # the Secret's tls.crt and tls.key (a kubernetes.io/tls Secret's names)
LABELS = {"app.kubernetes.io/part-of": "dsportal", "app.kubernetes.io/component": "hub"}
PODS = {**LABELS, **HUB_POD_LABELS, **SERVER_ACCESS}  # its pod's labels: z2jh's too, which the users' policies name
IMAGE_ANNOTATION = "dsportal/hub-image"  # podman's image id: a rebuilt image rolls the Deployment
READY_S = 180  # the hub's pod, from the Deployment's change to /hub/health: ~20 s here
DIRECTORY_FIELDS = ("ldaps_port", "ldap_base_dn", "ldap_bind_dn_template", "ldap_user_search_base",
                    "ldap_group_search_base", "ldap_search_user", "directory_dir")
# What the box sets over values.yaml, and why: values.yaml is written for a site (its LDAP, its registry).
BOX_VALUES = {
    "DSPORTAL_LDAP_HOST": "this machine's hostname: in slapd's certificate; hostAliases maps it to the bridge",
    "DSPORTAL_LDAP_TLS": "ldaps: the relay carries the LDAPS port only",
    "DSPORTAL_LDAP_PORT": "ldap_port is not relayed: set to ldaps_port, so that no setting names a port pods lack",
    "DSPORTAL_LDAP_SEARCH_USER": "the demo directory's portal identity",
    "DSPORTAL_LDAP_BASE_DN": "the demo directory's",
    "DSPORTAL_LDAP_BIND_DN_TEMPLATE": "the demo directory's",
    "DSPORTAL_LDAP_USER_SEARCH_BASE": "the demo directory's",
    "DSPORTAL_LDAP_GROUP_SEARCH_BASE": "the demo directory's",
    "DSPORTAL_STATE_DIR": f"{STATE_MOUNT}: the hub's claim is mounted there (the image keeps its config in "
                          "/srv/jupyterhub, values.yaml's z2jh mount point)",
    "DSPORTAL_K8S_IMAGE": "the image podman built, imported into the nodes",
    "DSPORTAL_K8S_GPU_TYPES": "the box's nodes are all one GPU type",
    "DSPORTAL_K8S_SERVER_EGRESS": "the box's API server (KubeBox.portal): notebooks in the servers submit jobs",
}
# Not in values.yaml (a site's defaults or the chart's own wiring are right there), set for the box:
BOX_EXTRA = {
    "DSPORTAL_HUB_CONNECT_IP": "the Service `hub`'s address (the chart: the Service's DNS name; the box has no DNS)",
    "DSPORTAL_K8S_NODE_GPUS": "the box's fake GPUs per node",
    "DSPORTAL_K8S_NODE_CPUS": "every node reports the whole machine's CPUs",
    "DSPORTAL_K8S_NODE_MEMORY_GB": "what a node can give one pod here",
    "DSPORTAL_HUB_SSL_CERT": "HTTPS at the NodePort: the box's CA signs it for the nodes' addresses (a site: "
                             "its own certificate, or TLS ended at its ingress)",
    "DSPORTAL_HUB_SSL_KEY": "its key",
    "DSPORTAL_LDAPS_PORT": "the box's slapd LDAPS port (relayed on the bridge)",
    "DSPORTAL_MLFLOW_URL": "the box's MLflow server, on the bridge (kubeparts/mlflow.py)",
    "DSPORTAL_MLFLOW_ADMIN_FILE": "its admin, from the Secret dsportal-mlflow-admin",
    "DSPORTAL_PROMETHEUS_URL": "the box's Prometheus server, on the bridge (kubeparts/prometheus.py)",
    "DSPORTAL_METRICS_TOKEN_FILE": "the token it scrapes with, from the Secret dsportal-prometheus",
    "DSPORTAL_PROMETHEUS_READER_FILE": "the password the Operations page reads it with, from the same Secret",
}


# --- the directory the hub logs users in against ----------------------------------------------------------------

def directory_file(box: KubeBox) -> Path:
    """Written by `install`: the directory's settings; while it exists, the box runs the hub."""
    return box.path("hub", "directory.json")


def ca_file(box: KubeBox) -> Path:
    return box.path("hub", "ldap-ca.pem")


def search_password_copy(box: KubeBox) -> Path:
    return box.path("hub", "ldap-search-password")


def installed(box: KubeBox) -> dict[str, Any] | None:
    try:
        return json.loads(directory_file(box).read_text())
    except FileNotFoundError:
        return None


# --- the hub's environment and objects ---------------------------------------------------------------------------

def values_env(values_file: Path = VALUES_FILE) -> dict[str, str]:
    """values.yaml's hub.extraEnv: what a Helm deployment puts in the hub's environment."""
    values = yaml.safe_load(values_file.read_text())
    return {str(k): str(v) for k, v in (values.get("hub", {}).get("extraEnv") or {}).items()}


def box_env(box: KubeBox, connect_ip: str, directory: dict[str, Any]) -> dict[str, str]:
    """values.yaml's environment with the box's values over it (BOX_VALUES, BOX_EXTRA), and its `hub_settings` last.
    `directory`: the LDAP settings (DIRECTORY_FIELDS), as portal.config has them."""
    env = values_env()
    env.update({
        "DSPORTAL_LDAP_HOST": socket.gethostname(), "DSPORTAL_LDAP_TLS": "ldaps",
        "DSPORTAL_LDAPS_PORT": str(directory["ldaps_port"]), "DSPORTAL_LDAP_PORT": str(directory["ldaps_port"]),
        "DSPORTAL_LDAP_SEARCH_USER": directory["ldap_search_user"],
        "DSPORTAL_LDAP_SEARCH_PASSWORD_FILE": f"{SEARCH_MOUNT}/password",
        "DSPORTAL_LDAP_BASE_DN": directory["ldap_base_dn"],
        "DSPORTAL_LDAP_BIND_DN_TEMPLATE": directory["ldap_bind_dn_template"],
        "DSPORTAL_LDAP_USER_SEARCH_BASE": directory["ldap_user_search_base"],
        "DSPORTAL_LDAP_GROUP_SEARCH_BASE": directory["ldap_group_search_base"],
        "DSPORTAL_STATE_DIR": STATE_MOUNT, "DSPORTAL_K8S_IMAGE": PORTAL.k8s_image,
        "DSPORTAL_K8S_GPU_TYPES": box.gpu_type,
        "DSPORTAL_HUB_CONNECT_IP": connect_ip, "DSPORTAL_K8S_NODE_GPUS": str(box.gpus_per_node),
        "DSPORTAL_K8S_NODE_CPUS": str(os.cpu_count() or 1), "DSPORTAL_K8S_NODE_MEMORY_GB": "8",
        "DSPORTAL_HUB_SSL_CERT": f"{TLS_MOUNT}/tls.crt", "DSPORTAL_HUB_SSL_KEY": f"{TLS_MOUNT}/tls.key",
        "DSPORTAL_K8S_SERVER_EGRESS": ",".join(box.portal.k8s_server_egress), **box_mlflow.hub_env(box),
        **box_prometheus.hub_env(box), **box_volumes.hub_site_programs(box)[2],
    })
    env.update({f"DSPORTAL_{name.upper()}": value for name, value in box.hub_settings})
    return env


def hub_services() -> list[dict]:
    """The two Services; `hub` first: its ClusterIP goes into the Deployment's environment."""
    meta = {"namespace": HUB_NAMESPACE, "labels": LABELS}
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hub", **meta},
         "spec": {"selector": LABELS, "ports": [{"name": "hub", "port": HUB_API_PORT, "targetPort": HUB_API_PORT},
                                                {"name": "portal", "port": DASHBOARD_PORT,
                                                 "targetPort": DASHBOARD_PORT}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "proxy-public", **meta},
         "spec": {"type": "NodePort", "selector": LABELS,
                  "ports": [{"name": "http", "port": 80, "targetPort": PROXY_PORT, "nodePort": NODE_PORT}]}}]


def hub_objects(box: KubeBox, env: dict[str, str], ca_pem: str, image_id: str = "",
                tls: tuple[str, str] = ("", ""), search_password: str = "", mlflow_admin: str = "") -> list[dict]:
    """The claim, its volume, the CA's Secret, the portal's directory password's Secret, the TLS Secret (`tls`:
    certificate and key, PEM), the MLflow admin's Secret and the Deployment (the Services: hub_services)."""
    meta = {"namespace": HUB_NAMESPACE, "labels": LABELS}
    site_mounts, site_volumes, _ = box_volumes.hub_site_programs(box)  # its environment: box_env's
    return [
        {"apiVersion": "v1", "kind": "PersistentVolume",
         "metadata": {"name": "dsportal-hub-state", "labels": LABELS},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                  "persistentVolumeReclaimPolicy": "Retain",
                  "hostPath": {"path": str(state_dir(box)), "type": "Directory"},
                  "claimRef": {"namespace": HUB_NAMESPACE, "name": "hub-state"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "hub-state", **meta},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": "dsportal-hub-state",
                  "resources": {"requests": {"storage": "1Gi"}}}},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "dsportal-ldap-ca", **meta},
         "stringData": {"ca.pem": ca_pem}},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "dsportal-ldap-search", **meta},
         "stringData": {"password": search_password}},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
         "metadata": {"name": "dsportal-hub-tls", **meta}, "stringData": {"tls.crt": tls[0], "tls.key": tls[1]}},
        box_mlflow.admin_secret(mlflow_admin, LABELS),
        box_prometheus.secret(box, LABELS),
        hub_network_policy(HUB_NAMESPACE, LABELS, PROXY_PORT, HUB_API_PORT, (DASHBOARD_PORT,)),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hub", **meta},
         "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": LABELS},
                  "template": {"metadata": {"labels": PODS, "annotations": {IMAGE_ANNOTATION: image_id}}, "spec": {
                      "serviceAccountName": HUB_SERVICE_ACCOUNT, "enableServiceLinks": False,
                      "hostAliases": [{"ip": box.api_address, "hostnames": [env["DSPORTAL_LDAP_HOST"]]}],
                      "containers": [{
                          "name": "hub", "image": HUB_IMAGE, "imagePullPolicy": "IfNotPresent",
                          "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
                          "ports": [{"containerPort": p} for p in (PROXY_PORT, HUB_API_PORT, DASHBOARD_PORT)],
                          # Ready again within 2 s, but not dropped from its Service for one slow answer.
                          "readinessProbe": {"httpGet": {"path": "/hub/health", "port": HUB_API_PORT},
                                             "periodSeconds": 2, "timeoutSeconds": 5, "failureThreshold": 3},
                          "resources": {"requests": {"cpu": HUB_CPU, "memory": "512Mi"}},
                          "volumeMounts": [{"name": "state", "mountPath": STATE_MOUNT},
                                           {"name": "ldap-ca", "mountPath": CA_MOUNT, "readOnly": True},
                                           {"name": "ldap-search", "mountPath": SEARCH_MOUNT, "readOnly": True},
                                           {"name": "tls", "mountPath": TLS_MOUNT, "readOnly": True},
                                           {"name": "mlflow", "mountPath": box_mlflow.ADMIN_MOUNT, "readOnly": True},
                                           box_prometheus.mount()[0], *site_mounts]}],
                      "volumes": [{"name": "state", "persistentVolumeClaim": {"claimName": "hub-state"}},
                                  {"name": "ldap-ca", "secret": {"secretName": "dsportal-ldap-ca"}},
                                  {"name": "ldap-search", "secret": {"secretName": "dsportal-ldap-search",
                                                                     "defaultMode": 0o400}},
                                  {"name": "tls", "secret": {"secretName": "dsportal-hub-tls",
                                                             "defaultMode": 0o400}},
                                  {"name": "mlflow", "secret": {"secretName": box_mlflow.ADMIN_SECRET,
                                                                "defaultMode": 0o400}},
                                  box_prometheus.mount()[1], *site_volumes]}}}}]


def state_dir(box: KubeBox) -> Path:
    """The hub's claim: its database and cookie secret in hub/ (the image runs the hub as root)."""
    return box.path("volumes", "hub")


def url(box: KubeBox) -> str:
    """The hub's public URL: HTTPS at the first node's NodePort (any node's answers), signed by box.ca_file."""
    return f"https://{box.node_network.nodes[0].address}:{NODE_PORT}"


def ensure_tls(box: KubeBox) -> tuple[str, str]:
    """The proxy's certificate (PEM) and key, signed by the box's CA for every node's address; made once, again when
    the nodes' addresses change."""
    tls = box.path("tls")
    ensure_ca_and_server_cert(tls, "hub", ca_cn="dsportal kubebox CA", server_cn="dsportal hub",
                              alt_names=[f"IP:{node.address}" for node in box.node_network.nodes], what="hub's HTTPS")
    return (tls / "hub.pem").read_text(), (tls / "hub.key").read_text()


# --- install, bring in line, remove ----------------------------------------------------------------------------

def install(box: KubeBox, cfg: PortalConfig) -> None:
    """Record the directory the hub uses (cfg: its port, DNs, CA and the portal's password); `ensure` then runs
    the hub."""
    ca, password = Path(cfg.ca_file), search_password_file(cfg)
    if not ca.is_file() or not password.is_file():
        raise BoxError(f"the directory's CA {ca} or the portal's password {password} is missing: start the "
                       "directory first (`make up`, or `python -m deploy.local.box start slapd`)")
    directory_file(box).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ca, ca_file(box))
    search_password_copy(box).touch(mode=0o600)
    os.chmod(search_password_copy(box), 0o600)
    shutil.copyfile(password, search_password_copy(box))
    directory_file(box).write_text(json.dumps({k: getattr(cfg, k) for k in DIRECTORY_FIELDS}, indent=1,
                                              default=str) + "\n")


def ensure(box: KubeBox, admin: DynamicClient, core: k8s.CoreV1Api, socket_of: Callable,
           report: Callable[[str], None]) -> None:
    """The hub image on every node, then the objects (each brought in line), then wait until the hub answers its
    readiness probe. Idempotent; run by `up` while `installed`."""
    directory = installed(box)
    if directory is None:
        raise BoxError(f"the hub is not installed ({directory_file(box)} is missing)")
    for line in box_images.ensure_images(box, box.node_network.nodes, socket_of, [HUB_IMAGE]):
        report(line)
    hub_state = state_dir(box) / "hub"
    hub_state.mkdir(parents=True, exist_ok=True)
    os.chmod(hub_state, 0o700)
    for manifest in hub_services():  # made once: a Service's address must not change
        report(f"hub: {apply(admin, manifest, replaceable=())}")
    connect_ip = resource(admin, "v1", "Service").get(name="hub", namespace=HUB_NAMESPACE).spec.clusterIP
    env = box_env(box, connect_ip, directory)
    image_id = box_images.podman_id(HUB_IMAGE) or ""
    tls = ensure_tls(box)
    password = search_password_copy(box).read_text().split("\n", 1)[0]
    for manifest in hub_objects(box, env, ca_file(box).read_text(), image_id, tls, password,  # a bound claim's spec
                                box_mlflow.admin_text(box)):
        # is fixed; the Secrets and the Deployment are replaced
        report(f"hub: {apply(admin, manifest, replaceable=('Secret', 'NetworkPolicy', 'Deployment'))}")
    report(wait_ready(box, core))


def _label(manifest: dict) -> str:
    meta = manifest["metadata"]
    return f"{manifest['kind']} {meta.get('namespace') + '/' if meta.get('namespace') else ''}{meta['name']}"


def hub_pods(core: k8s.CoreV1Api) -> list[k8s.V1Pod]:
    selector = ",".join(f"{k}={v}" for k, v in LABELS.items())
    return core.list_namespaced_pod(HUB_NAMESPACE, label_selector=selector).items


def wait_ready(box: KubeBox, core: k8s.CoreV1Api, timeout: float = READY_S) -> str:
    """Until the Deployment's newest pod is Ready (its /hub/health answers); BoxError with the pod's state, its
    events and its log's tail when it is not within `timeout`."""
    apps = k8s.AppsV1Api(core.api_client)
    began = time.monotonic()
    while True:
        deployment = apps.read_namespaced_deployment("hub", HUB_NAMESPACE)
        status = deployment.status
        pod_ready = (status.observed_generation or 0) >= deployment.metadata.generation and \
            status.ready_replicas == 1 and status.updated_replicas == 1 and (status.replicas or 0) == 1
        # Ready is the pod's own word (its API port); users come through the NodePort and the proxy, whose rules
        # and routes follow a moment later (a 404 there once, in a whole `make test`): both must answer.
        answer = _health(box) if pod_ready else "its pod is not ready"
        if answer == "":
            pods = [p for p in hub_pods(core) if p.metadata.deletion_timestamp is None]
            where = ", ".join(f"{p.metadata.name} on {p.spec.node_name}" for p in pods)
            return f"hub: ready in {time.monotonic() - began:.1f} s ({where}); {url(box)}/"
        if time.monotonic() - began > timeout:
            raise BoxError(f"the hub is not ready after {timeout:.0f} s ({answer}):\n{describe(core)}")
        time.sleep(1)


def _health(box: KubeBox) -> str:
    """"" when the hub answers /hub/health at its public URL (the NodePort, through the proxy), else what it did."""
    try:
        answer = requests.get(f"{url(box)}/hub/health", timeout=5, verify=str(box.ca_file))
    except requests.RequestException as err:
        return f"{url(box)}/hub/health: {type(err).__name__}"
    return "" if answer.status_code == 200 else f"{url(box)}/hub/health answered {answer.status_code}"


def describe(core: k8s.CoreV1Api) -> str:
    """The hub's pods: phase, waiting reasons, the last events and the log's tail; for an operator."""
    lines = []
    for pod in hub_pods(core):
        name = pod.metadata.name
        waiting = [f"{s.name}: {s.state.waiting.reason}: {s.state.waiting.message or ''}"
                   for s in (pod.status.container_statuses or []) if s.state and s.state.waiting]
        lines.append(f"pod {name}: {pod.status.phase} on {pod.spec.node_name or '(no node)'} {'; '.join(waiting)}")
        events = core.list_namespaced_event(HUB_NAMESPACE, field_selector=f"involvedObject.name={name}").items
        lines += [f"  event: {e.reason}: {e.message}" for e in events[-5:]]
        try:
            log = core.read_namespaced_pod_log(name, HUB_NAMESPACE, tail_lines=20)
        except k8s.ApiException:
            log = "(no log yet)"
        lines += [f"  log: {line}" for line in log.splitlines()]
    return "\n".join(lines) or "no pod of the hub's Deployment"


def remove(box: KubeBox, admin: DynamicClient, core: k8s.CoreV1Api, stop_relay: Callable[[], str]) -> list[str]:
    """Everything `install` and `ensure` made, and the hub's state: the Deployment (its pod gone first), the
    Services, the claim, its volume, the Secret, the relay and the records."""
    lines = []
    for manifest in reversed([*hub_services(), *hub_objects(box, {"DSPORTAL_LDAP_HOST": ""}, "")]):
        meta = manifest["metadata"]
        try:
            resource(admin, manifest["apiVersion"], manifest["kind"]).delete(
                name=meta["name"], namespace=meta.get("namespace"), body={"propagationPolicy": "Foreground"})
            lines.append(f"hub: {_label(manifest)} deleted")
        except NotFoundError:
            pass
        if manifest["kind"] == "Deployment":
            deadline = time.monotonic() + 60
            while hub_pods(core) and time.monotonic() < deadline:
                time.sleep(1)
    lines.append(stop_relay())
    directory_file(box).unlink(missing_ok=True)
    shutil.rmtree(state_dir(box), ignore_errors=True)
    return lines


def hub_log(core: k8s.CoreV1Api, tail: int = 200) -> str:
    """The running hub pod's log (for a test's failure message)."""
    pods = [p for p in hub_pods(core) if p.status.phase == "Running"]
    if not pods:
        return "(no running hub pod)"
    try:
        return core.read_namespaced_pod_log(pods[0].metadata.name, HUB_NAMESPACE, tail_lines=tail)
    except k8s.ApiException as err:
        return f"(its log: {err.status} {err.reason})"

