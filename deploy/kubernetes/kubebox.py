"""Kubernetes in a box: etcd and the control plane as plain processes, nodes (each a network namespace with its own
containerd and kubelet) that run pods, and the hub in a pod.

Run as root from the repository root (after `make kube-build`, which builds the Kubernetes servers):

    /opt/dsportal/venv/bin/python -m deploy.kubernetes.kubebox up     [--hub] [--state DIR] [--port 16443] ...
    /opt/dsportal/venv/bin/python -m deploy.kubernetes.kubebox status [--state DIR]
    /opt/dsportal/venv/bin/python -m deploy.kubernetes.kubebox crash NODE | down [--state DIR]

`up` starts what is stopped, waits for /readyz, applies mpijob-crd.yaml (waits until Established) and rbac.yaml,
waits for the hub ServiceAccount's token, writes a kubeconfig per identity (kubeparts/identities.py), starts the
nodes with their fake GPUs and the NetworkPolicy enforcer (kubeparts/netpol.py: each node's firewall, the box's
stand-in for a CNI plugin's), imports the images and waits until every node takes pods (no taint, no pressure);
with `--hub` (and on every later `up`) it runs the hub in a pod (kubeparts/hub.py). `down` deletes the pods,
stops the processes by their recorded PIDs and removes what the nodes made on the machine; it tries every step,
prints what it left ("left /var/lib/cni: holds networks/podman, not the box's") and exits 1 only when something
of the box's own is left (kubeparts/machine.py). It is built like
deploy/local/box.py: supervision (deploy/supervise.py) and TLS (deploy/selfsigned.py) are the local box's; one
module per part (kubeparts/).

Everything lives under the state dir; certificates, keys, tokens and etcd's data are kept, so `down` then `up`
gives back the same cluster:

    tls/ca.pem, ca.key          a CA made for this box
    tls/apiserver.pem, .key     the API server's certificate: 127.0.0.1, localhost, kubernetes.default...
    tls/sa.key, sa.pub          ServiceAccount token signing key
    auth/tokens.json, .csv      the static tokens (0600)
    etcd/                       etcd's data
    kubeconfig/NAME.kubeconfig  one per identity (0600)
    run/NAME.pid, log/NAME.log  recorded PIDs and each process's output; run/kubebox.lock
    hub/, volumes/hub/          the hub's directory settings and CA; its claim (database, cookie secret)

As a module, for the tests (clients are the official `kubernetes` client's DynamicClient):

    box = KubeBox(Path("/var/lib/dsportal/kube"), api_port=16443)
    cluster = up(box)                       # -> Cluster: api_url, ca_file, kubeconfigs
    hub = from_kubeconfig(cluster.kubeconfigs["hub"])
    namespace = ensure_user_namespace(hub, "alice")          # "dsportal-u-alice", with its RoleBinding
    resource(as_user(hub, "alice"), "kubeflow.org/v2beta1", "MPIJob").get(namespace=namespace)
    down(box)
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from deploy import netns
from deploy.kubernetes.kubeparts import apiserver, bootstrap, etcd, gpus, netpol, nodes, relay, volumes
from deploy.kubernetes.kubeparts import hub as box_hub
from deploy.kubernetes.kubeparts import images as box_images
from deploy.kubernetes.kubeparts import mlflow as box_mlflow
from deploy.kubernetes.kubeparts import prometheus as box_prometheus
from deploy.kubernetes.kubeparts.api import (  # noqa: F401  (the tests reach the box's clients through this module)
    ApiError,
    api_client,
    as_user,
    ensure_user_namespace,
    from_kubeconfig,
    impersonating,
    resource,
    with_token,
)
from deploy.kubernetes.kubeparts.identities import ensure_tls, ensure_tokens, read_tokens, write_kubeconfig  # noqa: F401
from deploy.kubernetes.kubeparts.layout import (  # noqa: F401
    DEFAULT_API_PORT,
    DEFAULT_NETWORK,
    DEFAULT_STATE,
    DEMO_USERS,
    HUB_NAMESPACE,
    HUB_SERVICE_ACCOUNT,
    LOCALHOST,
    PORTAL,
    Cluster,
    KubeBox,
    user_namespace,
    user_principal,
)
from deploy.kubernetes.kubeparts.machine import LeftBehind, Teardown
from deploy.local.parts import directory, users
from deploy.supervise import (
    BoxError,
    Lock,
    Service,
    await_service,
    begin_service,
    service_pid,
    start_service,
    stop_service,
)
from portal.config import ConfigError, PortalConfig, load

KubeBoxError = BoxError
CONTROL_PLANE = [etcd.service(), apiserver.apiserver_service(), apiserver.controller_manager_service(),
                 apiserver.scheduler_service()]
LDAP_RELAY = relay.relay_service()  # runs while the hub is installed (kubeparts/hub.py)
MLFLOW = box_mlflow.service()  # so does the MLflow tracking server (kubeparts/mlflow.py)
PROMETHEUS = box_prometheus.service(box_hub.url)  # and the operators' Prometheus (kubeparts/prometheus.py)
NETPOL = netpol.service()  # the nodes enforce the NetworkPolicies (kubeparts/netpol.py); stopped, it removes its rules
PODS_GONE_S = 60  # `down` deletes every pod first and waits this long for the kubelets to stop them


def node_services(box: KubeBox) -> list[Service]:
    return [nodes.service(node) for node in box.node_network.nodes]


def services(box: KubeBox) -> list[Service]:
    """In start order: the control plane, each node (its containerd and kubelet), the NetworkPolicy enforcer, and
    while the hub is installed its LDAP relay, its MLflow and Prometheus servers and each node's GPU reader (into the
    hub's claim)."""
    return [*CONTROL_PLANE, *node_services(box), NETPOL,
            *([LDAP_RELAY, MLFLOW, PROMETHEUS, *gpus.services(box)] if box_hub.installed(box) else [])]


def up(box: KubeBox, report: Callable[[str], None] = print, hub_directory: PortalConfig | None = None) -> Cluster:
    """Start what is stopped, apply the CRD and RBAC, write the kubeconfigs, bring the nodes up with their fake
    GPUs, routes and images (box.images); idempotent. Run as root. `report` gets one line per step.

    `hub_directory`: install the hub in a pod (kubeparts/hub.py), logging users in against that configuration's
    LDAP directory. Once installed, every `up` runs it (its relay, image and objects)."""
    for sub in ("run", "log", "auth", "kubeconfig"):
        box.path(sub).mkdir(parents=True, exist_ok=True)
    os.chmod(box.state_dir, 0o755)
    with Lock(box):
        netns.ensure_bridge(box.node_network, nodes.record_file(box))  # the API server listens on it
        ensure_tls(box)
        tokens = ensure_tokens(box)
        for component, namespace in [("controller-manager", "kube-system"), ("scheduler", "kube-system"),
                                     ("kube-proxy", "kube-system"),
                                     *((node.name, "default") for node in box.node_network.nodes)]:
            write_kubeconfig(box, box.path("auth", f"{component}.kubeconfig"), component, tokens[component],
                             namespace)
        etcd_svc, apiserver_svc, cm_svc, scheduler_svc = CONTROL_PLANE
        for svc in (etcd_svc, apiserver_svc):
            _report(start_service(svc, box), report)
        admin = with_token(box, tokens["admin"])
        _report(bootstrap.apply_manifests(admin, box.log_file(apiserver_svc.name)), report)
        for svc in (cm_svc, scheduler_svc):
            _report(start_service(svc, box), report)
        hub_token = bootstrap.service_account_token(admin, HUB_NAMESPACE, HUB_SERVICE_ACCOUNT,
                                                    box.log_file(cm_svc.name))
        identities = {"admin": (tokens["admin"], "default"), "hub": (hub_token, HUB_NAMESPACE)}
        identities.update({name: (tokens[name], user_namespace(name)) for name in DEMO_USERS})
        for identity, (token, namespace) in identities.items():
            write_kubeconfig(box, box.kubeconfig(identity), identity, token, namespace)
        _report(volumes.ensure_user_volumes(box, from_kubeconfig(box.kubeconfig("hub")), nodes.admin_api(box)),
                report)
        with ThreadPoolExecutor() as starting:  # the nodes register side by side
            for lines in starting.map(lambda svc: start_service(svc, box), node_services(box)):
                _report(lines, report)
        _report(nodes.ensure_routes(box), report)
        _report(start_service(NETPOL, box), report)  # before any user's pod: the policies hold from the start
        wanted = [box_images.ensure_busybox(), *(box.images or [PORTAL.k8s_image])]
        _report(box_images.ensure_images(box, box.node_network.nodes, nodes.socket, wanted), report)
        _report(nodes.wait_schedulable(box), report)
        if hub_directory is not None:  # the shared directory, claimed for this box (started unless it runs)
            _report(directory.acquire(hub_directory, box.state_dir, users.report_sync), report)
            box_hub.install(box, hub_directory)
        if box_hub.installed(box):
            _report(start_service(LDAP_RELAY, box), report)
            # Started beside the hub's pod: its admin (made before it starts) is the hub's Secret; ready at the end.
            mlflow_begun = begin_service(MLFLOW, box)
            box_hub.ensure(box, admin, nodes.admin_api(box), nodes.socket, report)
            _report(await_service(MLFLOW, box, mlflow_begun), report)
            _report(start_service(PROMETHEUS, box), report)  # it scrapes the hub: started once the hub answers
            for svc in gpus.services(box):
                _report(start_service(svc, box), report)
    return cluster_of(box)


def remove_hub(box: KubeBox) -> list[str]:
    """Delete the hub's pod and objects, stop its relay, MLflow server and GPU readers, forget its directory, its
    state and MLflow's (the tests' undo of `up(hub_directory=...)`)."""
    with Lock(box):
        admin = with_token(box, read_tokens(box)["admin"])
        found = box_hub.installed(box)
        lines = box_hub.remove(box, admin, nodes.admin_api(box), lambda: "; ".join(
            stop_service(svc, box) for svc in (*gpus.services(box), PROMETHEUS, LDAP_RELAY, MLFLOW)))
        box_mlflow.forget(box)
        box_prometheus.forget(box)
        return lines + ([directory.release(Path(found["directory_dir"]), box.state_dir)]
                        if found and "directory_dir" in found else [])


def _report(lines: list[str], report: Callable[[str], None]) -> None:
    for line in lines:
        report(line)


def cluster_of(box: KubeBox) -> Cluster:
    names = ["admin", "hub", *DEMO_USERS]
    return Cluster(box.state_dir, box.api_url, box.ca_file, {name: box.kubeconfig(name) for name in names})


def down(box: KubeBox) -> list[str]:
    """Stop the scheduler and the controllers, delete every pod (so the kubelets stop them as a cluster would),
    stop the other processes by their recorded PIDs in reverse order, then remove the nodes' namespaces, cgroups
    and routes and undo what the kubelets changed on the machine. etcd's data, the keys and the image stores
    stay: `up` gives back the same cluster, with its Jobs (which make their pods again).

    Every step runs whatever failed before it. The lines end with what was left ("left WHAT: WHY"); LeftBehind
    (a BoxError, its `lines` the same report) when any of that is the box's own, not when it is another
    program's (podman's networks in a mount point the box made)."""
    box.path("run").mkdir(parents=True, exist_ok=True)
    with Lock(box):
        done = Teardown()
        # The scheduler and the controllers first: a Job (or the hub's Deployment) would make its deleted pods again.
        for svc in reversed(CONTROL_PLANE[2:]):
            done.step(svc.name, lambda svc=svc: stop_service(svc, box))
        done.lines += _delete_pods(box)
        for svc in reversed(services(box)):
            if svc not in CONTROL_PLANE[2:]:
                done.step(svc.name, lambda svc=svc: stop_service(svc, box))
        nodes.teardown(box, done)
        found = box_hub.installed(box)
        if found and "directory_dir" in found:  # the shared directory: stopped unless another box needs it
            done.step("slapd", lambda: directory.release(Path(found["directory_dir"]), box.state_dir))
    if done.ours:
        raise LeftBehind(done)
    return done.report()


def _delete_pods(box: KubeBox) -> list[str]:
    """Best effort: only while the API server and a kubelet run."""
    if not (service_pid(CONTROL_PLANE[1], box) and any(service_pid(nodes.service(n), box)
                                                       for n in box.node_network.nodes)):
        return []
    try:
        api = nodes.admin_api(box)
        pods = api.list_pod_for_all_namespaces().items
        for pod in pods:
            api.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=5)
        deadline = time.monotonic() + PODS_GONE_S
        while api.list_pod_for_all_namespaces().items and time.monotonic() < deadline:
            time.sleep(1)
        left = len(api.list_pod_for_all_namespaces().items)
    except Exception as err:  # noqa: BLE001  (whatever the API says, the processes are stopped next)
        return [f"pods: not deleted ({err}); their processes are killed with the nodes"]
    return [f"pods: deleted {len(pods)}" + (f" ({left} still there after {PODS_GONE_S} s: killed)" if left else "")]


def status(box: KubeBox) -> dict[str, int | None]:
    """process name -> PID, or None when it is not running."""
    return {svc.name: service_pid(svc, box) for svc in services(box)}


def _hub_directory(box: KubeBox) -> PortalConfig:
    """The directory as the hub's pod uses it (LDAPS, the CA and the password `install` copied), reached here on
    127.0.0.1: for `status`'s check that its logins work."""
    found = box_hub.installed(box) or {}
    return PortalConfig(ldap_tls="ldaps", ldaps_port=int(found.get("ldaps_port", 0)),
                        ldap_ca_file=str(box_hub.ca_file(box)),
                        ldap_search_password_file=str(box_hub.search_password_copy(box)),
                        **{k: found[k] for k in box_hub.DIRECTORY_FIELDS
                           if k in found and k not in ("ldaps_port", "directory_dir")})


def crash(box: KubeBox, name: str) -> str:
    """A node lost (its kubelet, containerd and containers killed at once); `up` brings it back."""
    found = [node for node in box.node_network.nodes if node.name == name]
    if not found:
        raise BoxError(f"no node {name!r}; the nodes are {', '.join(n.name for n in box.node_network.nodes)}")
    with Lock(box):
        return nodes.crash(box, found[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.kubernetes.kubebox",
                                     description="Kubernetes in a box: a control plane and nodes that run pods.")
    parser.add_argument("command", choices=["up", "down", "status", "crash"])
    parser.add_argument("node", nargs="?", help="crash: the node to lose (its kubelet, containerd and pods)")
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE, help=f"state dir (default {DEFAULT_STATE})")
    parser.add_argument("--port", type=int, default=DEFAULT_API_PORT,
                        help=f"the API server's HTTPS port on the box's bridge (default {DEFAULT_API_PORT})")
    parser.add_argument("--etcd-port", type=int, default=0,
                        help=f"etcd's client port on {LOCALHOST} (default: --port + 1; its peer port the next one)")
    parser.add_argument("--name", default="kube", help="names the bridge and the nodes (default kube)")
    parser.add_argument("--network", default=DEFAULT_NETWORK,
                        help=f"a /20 inside 198.19.0.0/16 for nodes, Services and pods (default {DEFAULT_NETWORK})")
    parser.add_argument("--nodes", type=int, default=2, help="how many nodes (default 2)")
    parser.add_argument("--gpus-per-node", type=int, default=4, help="fake GPUs per node (default 4)")
    parser.add_argument("--hub", action="store_true",
                        help="up: run the hub in a pod, logging users in against the directory that portal.config "
                             "names (the Slurm box's slapd: `make up`, or `python -m deploy.local.box start slapd`); "
                             "once installed, every `up` runs it")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        box = KubeBox(args.state.resolve(), args.port, args.etcd_port, name=args.name, network=args.network,
                      nodes=args.nodes, gpus_per_node=args.gpus_per_node)
    except ValueError as err:
        parser.error(str(err))
    if args.command == "status":
        for name, pid in status(box).items():
            print(f"{name}: {f'running ({pid})' if pid else 'stopped'}")
        if box_hub.installed(box):
            print(f"directory: logins {directory.login_check(_hub_directory(box))} (as the hub's pod reaches it: "
                  "its CA, its password, LDAPS)")
        return 0
    if os.geteuid() != 0:
        print("kubebox.py: run as root (it writes keys under the state dir and runs daemons)", file=sys.stderr)
        return 2
    began = time.monotonic()
    try:
        if args.command == "down":
            _report(down(box), print)
            return 0
        if args.command == "crash":
            print(crash(box, args.node or ""))
            return 0
        # Once the hub is installed, every `up` claims the directory again and refreshes its CA and password copies.
        hub_directory = load() if args.hub or box_hub.installed(box) else None
        cluster = up(box, report=lambda line: print(line, flush=True), hub_directory=hub_directory)
    except LeftBehind as err:  # down's whole report, then what of the box's own is left
        _report(err.lines, print)
        print(f"kubebox.py down: {err}", file=sys.stderr)
        return 1
    except (BoxError, ValueError, ConfigError) as err:
        print(f"kubebox.py {args.command}: {err}", file=sys.stderr)
        return 1
    print(f"\nkubebox is up ({time.monotonic() - began:.1f} s): {cluster.api_url}, CA {cluster.ca_file}")
    for identity, path in cluster.kubeconfigs.items():
        print(f"  {identity}: KUBECONFIG={path}")
    if box_hub.installed(box):
        from deploy.local.parts.slapd import DEMO_GROUPS
        from deploy.local.parts.slapd import DEMO_USERS as ACCOUNTS

        print(f"hub (in a pod): {box_hub.url(box)}/  (NodePort {box_hub.NODE_PORT} of Service "
              f"{HUB_NAMESPACE}/proxy-public, on any node)")
        print(f"prometheus: {box_prometheus.url(box)} scrapes the hub and the portal (its reader's password in "
              f"{box_prometheus.data_dir(box) / 'reader'}); admins see its charts at {box_hub.url(box)}"
              "/services/portal/operations")
        print("demo accounts (user / password: groups):")
        for uid, password, *_ in ACCOUNTS:
            groups = [name for name, _, members in DEMO_GROUPS if uid in members]
            print(f"  {uid} / {password}: {', '.join(groups) or '(no group: login refused)'}")
    else:
        print("hub: not in the box (`up --hub` runs it in a pod)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
