"""The nodes of the Kubernetes box: each a host of its own (deploy/netns.py: a network namespace on the box's
bridge, as the Slurm box's nodes are) with its own containerd, kubelet and kube-proxy (node.sh runs them in the
node's mount namespace), a CNI bridge for its pods, its pods' cgroups under /<node>, and fake GPUs.

The fake GPUs are the one thing that cannot exist here: each node advertises `nvidia.com/gpu` as an extended
resource in its status (the documented way without a device plugin), with the GPU type as the node label
`k8s_gpu_node_label`. The scheduler, the quota and the kubelet's admission then treat them as real; no container
gets a device.

Routing: the host routes each node's pod range to the node's address, and each node the other nodes' ranges, so
pods, nodes and the hub reach each other; no node has a default route, so nothing leaves the machine.

State: everything a node writes goes to its own dir (box.node_dir): containerd's root (the image store), state,
sockets and runc root, the CNI config and the host-local IPAM's addresses, the kubelet's root and certificates.
What a program hard-codes (machine.HARD_CODED_PATHS: libcni's result cache in /var/lib/cni, the pod logs...)
node.sh binds from the node's dir/private, in the node's mount namespace only: no node writes to the machine's own
/var/lib/cni, which podman shares. Machine-wide (kubeparts/machine.py): those mount points, made when missing, and
the sysctls the kubelet changes, recorded before the first kubelet starts and put back when the last box goes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import yaml
from kubernetes import client as k8s

from deploy import netns
from deploy.kubernetes.kubeparts import machine
from deploy.kubernetes.kubeparts.api import api_client
from deploy.kubernetes.kubeparts.identities import read_tokens
from deploy.kubernetes.kubeparts.images import PAUSE_IMAGE
from deploy.kubernetes.kubeparts.layout import HERE, KUBE_BIN, PORTAL, KubeBox
from deploy.kubernetes.kubeparts.machine import Leftover, Teardown
from deploy.netns import CGROUP_ROOT, NETNS_DIR, Node
from deploy.supervise import BoxError, Service, write_if_changed

NODE_SCRIPT = HERE / "node.sh"
CONTAINERD = "/usr/bin/containerd"
CNI_BIN = "/usr/lib/cni"
GPU_RESOURCE = "nvidia.com/gpu"
NETWORK_CHANGES = threading.Lock()  # kubebox starts the nodes side by side
SOCKET_PATH_MAX = 104  # containerd's limit on a unix socket's path
# The longest socket paths under a node's dir: containerd's ttrpc socket, the kubelet's pod-resources socket.
NODE_SOCKETS = ("containerd.sock.ttrpc", "kubelet/pod-resources/kubelet.sock")
NODE_READY_S = 90
GPUS_SHOWN_S = 60  # the kubelet's next status update carries the patched capacity into allocatable (~10 s)
EVICTION_DISK_FREE = "512Mi"  # the kubelet evicts pods (and taints its node) below this much free disk
PRESSURE_TRANSITION = "10s"  # how long a node keeps a pressure condition after the pressure ended
SCHEDULABLE_S = 90  # after the images: the eviction manager's next look (10 s) plus PRESSURE_TRANSITION, with margin


def record_file(box: KubeBox) -> Path:
    return box.path("run", "network.json")


def hosts_marker(box: KubeBox) -> str:
    return f"# dsportal kubebox {box.state_dir}"


def socket(box: KubeBox, node: Node) -> Path:
    return box.node_dir(node.name) / "containerd.sock"


def private_root(box: KubeBox, node: Node) -> Path:
    """What node.sh binds over the hard-coded paths: ROOT/var/lib/cni over /var/lib/cni, and so on."""
    return box.node_dir(node.name) / "private"


def node_cgroups(node: Node) -> list[Path]:
    """The node's cgroup (its --cgroup-root) in every v1 hierarchy: its pods' processes are all below it."""
    return sorted(path for path in CGROUP_ROOT.glob(f"*/{node.name}") if path.is_dir())


# --- configuration -------------------------------------------------------------------------------------


def containerd_config(box: KubeBox, node: Node) -> str:
    """containerd's config: everything of its own under the node's dir and its image store, and the CRI settings
    this machine needs (restrict_oom_score_adj: no CAP_SYS_RESOURCE here, so runc cannot lower a sandbox's
    oom_score_adj, and every pod would fail with `can't get final child's PID from pipe: EOF`)."""
    own = box.node_dir(node.name)
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f'''# Written by deploy/kubernetes/kubeparts/nodes.py for {node.name}.
version = 2
root = "{box.image_store(node.name)}"
state = "{own / 'containerd-state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{socket(box, node)}"

[ttrpc]
  address = "{own / 'containerd.sock.ttrpc'}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{own / 'containerd-opt'}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{own / 'cni'}"
  conf_template = "{own / 'cni-template.json'}"

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  Root = "{own / 'runc'}"
  SystemdCgroup = false
'''


def cni_template(box: KubeBox, node: Node) -> str:
    """The pods' network: a bridge in the node's namespace with the node's pod range (containerd fills in
    {{.PodCIDR}} once the controller-manager gave the node one). host-local keeps the addresses it hands out in
    the node's dir, not in its default /var/lib/cni/networks, where podman keeps its own."""
    return json.dumps({
        "cniVersion": "0.4.0", "name": f"{node.name}-pods",
        "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                     "ipam": {"type": "host-local", "dataDir": str(box.node_dir(node.name) / "ipam"),
                              "ranges": [[{"subnet": "{{.PodCIDR}}"}]], "routes": [{"dst": "0.0.0.0/0"}]}}],
    }, indent=2) + "\n"


def kubelet_config(box: KubeBox, node: Node) -> str:
    own = box.node_dir(node.name)
    return yaml.safe_dump({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": node.address, "port": 10250, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,  # the node's own loopback
        # Only the API server (its client certificate, signed by the box's CA) may call the kubelet.
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(box.ca_file)}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{node.name}", "cgroupsPerQOS": True,
        "failSwapOn": False, "makeIPTablesUtilChains": False, "hairpinMode": "hairpin-veth",
        # No nameserver for the pods: the box has no cluster DNS, and the machine's resolver is off the box's
        # networks (traffic stays on this machine). A pod's lookup of a name it does not have in /etc/hosts then fails
        # at once (glibc asks its own loopback) instead of after resolver timeouts: torchrun's store looks up each
        # client's address, 5 s a lookup against an unreachable server (15 s of a 2-node PyTorch job's start).
        "resolvConf": "", "maxPods": 40, "serializeImagePulls": False,
        # The images come from podman once per machine (images.py): never collect them, evict only when full.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        # The nodes share the machine's disk with everything else on it, so a percentage of it says little: 1% of
        # a 252 GB disk is 2.5 GB. Pressure means "this disk is nearly full", and it ends as soon as the disk is
        # not: the default 5 min would keep a short dip (an image import) as a NoSchedule taint on every node.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": EVICTION_DISK_FREE,
                         "imagefs.available": EVICTION_DISK_FREE, "nodefs.inodesFree": "1%"},
        "evictionPressureTransitionPeriod": PRESSURE_TRANSITION,
        "volumePluginDir": str(own / "volume-plugins"),
        "containerLogMaxSize": "10Mi",
    }, sort_keys=False)


def proxy_config(box: KubeBox, node: Node) -> str:
    """kube-proxy in the node's namespace: Service IPs (the `kubernetes` Service a pod's client uses) become
    iptables rules there. It leaves the machine-wide conntrack settings alone (each 0: not set)."""
    return yaml.safe_dump({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(box.path("auth", "kube-proxy.kubeconfig"))},
        "hostnameOverride": node.name, "bindAddress": node.address, "clusterCIDR": box.cluster_cidr,
        "mode": "iptables", "metricsBindAddress": "127.0.0.1:10249", "healthzBindAddress": "127.0.0.1:10256",
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }, sort_keys=False)


def node_command(box: KubeBox, node: Node) -> list[str]:
    """nsenter, unshare and node.sh all exec: the recorded PID becomes the kubelet's. Not `ip netns exec`: it
    mounts a fresh sysfs over /sys, which hides the cgroup hierarchies from the kubelet. The kubelet's state in
    the node's dir: --root-dir, and --cert-dir, whose default is /var/lib/kubelet/pki whatever the root."""
    own = box.node_dir(node.name)
    labels = f"{PORTAL.k8s_gpu_node_label}={box.gpu_type}"
    return ["nsenter", f"--net={NETNS_DIR / node.name}", "unshare", "--mount", "--propagation", "slave", "--uts",
            "/bin/sh", str(NODE_SCRIPT), node.name, str(own), str(own / "containerd.toml"), str(socket(box, node)),
            str(own / "kube-proxy.yaml"), "--", str(KUBE_BIN / "kubelet"), f"--config={own / 'kubelet.yaml'}",
            f"--kubeconfig={box.path('auth', f'{node.name}.kubeconfig')}", f"--root-dir={own / 'kubelet'}",
            f"--cert-dir={own / 'kubelet' / 'pki'}", "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{socket(box, node)}", f"--hostname-override={node.name}",
            f"--node-ip={node.address}", f"--node-labels={labels}", f"--pod-infra-container-image={PAUSE_IMAGE}",
            "--v=1"]


# --- a node's life -------------------------------------------------------------------------------------


def prepare(box: KubeBox, node: Node) -> None:
    for program in (KUBE_BIN / "kubelet", KUBE_BIN / "kube-proxy", Path(CONTAINERD), Path(CNI_BIN) / "bridge"):
        if not os.access(program, os.X_OK):
            raise BoxError(f"{node.name}: {program} is missing; `make kube-build` installs it")
    longest = max((box.node_dir(node.name) / name for name in NODE_SOCKETS), key=lambda path: len(str(path)))
    if len(str(longest)) > SOCKET_PATH_MAX:
        raise BoxError(f"{node.name}: the state dir {box.state_dir} is too long for the node's sockets "
                       f"({longest} is over {SOCKET_PATH_MAX} characters): choose a shorter one")
    with NETWORK_CHANGES:  # its record and /etc/hosts are read, changed and written
        netns.ensure_node_network(box.node_network, node, record_file(box), hosts_marker(box))
        machine.claim(_box_id(box), box.state_dir)
    own = box.node_dir(node.name)
    for path in (own / "cni", box.image_store(node.name)):
        path.mkdir(parents=True, exist_ok=True)
    write_if_changed(own / "containerd.toml", containerd_config(box, node))
    write_if_changed(own / "cni-template.json", cni_template(box, node))
    write_if_changed(own / "kubelet.yaml", kubelet_config(box, node))
    write_if_changed(own / "kube-proxy.yaml", proxy_config(box, node))
    for hierarchy in CGROUP_ROOT.iterdir():
        if hierarchy.name != "unified" and (hierarchy / "cgroup.procs").exists():
            _make_cgroup(hierarchy / node.name, box.node_cpu_shares)


def _make_cgroup(path: Path, cpu_shares: int) -> None:
    """The kubelet wants its --cgroup-root in every hierarchy; a v1 cpuset starts with no CPUs or memory nodes,
    so it gets its parent's. The cpu hierarchy's weighs the node (KubeBox.node_cpu_shares)."""
    path.mkdir(exist_ok=True)
    if cpu_shares and (path / "cpu.shares").exists():
        (path / "cpu.shares").write_text(str(cpu_shares))
    for name in ("cpuset.cpus", "cpuset.mems"):
        if (path / name).exists() and not (path / name).read_text().strip():
            (path / name).write_text((path.parent / name).read_text())


def admin_api(box: KubeBox) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client(box, read_tokens(box)["admin"]))


def ready(box: KubeBox, node: Node) -> str | None:
    try:
        found = admin_api(box).read_node(node.name)
    except k8s.ApiException as err:
        return f"Node {node.name}: {err.status} {err.reason}" if err.status != 404 else \
            f"Node {node.name} not registered yet"
    except Exception as err:  # noqa: BLE001  (the API server restarting: connection errors of any kind)
        return f"Node {node.name}: {err}"
    conditions = {c.type: c for c in found.status.conditions or []}
    if "Ready" in conditions and conditions["Ready"].status == "True":
        return None
    return f"Node {node.name} not Ready ({conditions['Ready'].message if 'Ready' in conditions else 'no status'})"


def unschedulable(box: KubeBox) -> list[str]:
    """What keeps a pod off each node: its taints (with the condition behind each, such as DiskPressure and the
    kubelet's message) or `spec.unschedulable`; empty when every node takes pods."""
    found = []
    for node in admin_api(box).list_node().items:
        conditions = {c.type: c for c in node.status.conditions or []}
        reasons = [f"{taint.key}:{taint.effect}" for taint in node.spec.taints or []]
        reasons += [f"{kind} ({c.message})" for kind, c in conditions.items() if kind != "Ready" and c.status == "True"]
        if node.spec.unschedulable:
            reasons.append("cordoned")
        if reasons:
            found.append(f"{node.metadata.name}: {', '.join(reasons)}")
    return found


def wait_schedulable(box: KubeBox) -> list[str]:
    """Until no node is tainted or under pressure: importing the images can fill the disk for a moment, and the
    kubelet then taints its node (node.kubernetes.io/disk-pressure) for PRESSURE_TRANSITION after it ends. A
    BoxError names what stays, with the disk's free space."""
    started = time.monotonic()
    first = blocked = unschedulable(box)
    while blocked:
        if time.monotonic() > started + SCHEDULABLE_S:
            free = shutil.disk_usage(box.cache_dir).free / 2**30
            raise BoxError(f"nodes still take no pods {SCHEDULABLE_S} s after the images: {'; '.join(blocked)}. "
                           f"{free:.1f} GiB free on the disk of {box.cache_dir} (the kubelet wants "
                           f"{EVICTION_DISK_FREE}); read {box.log_file(box.node_network.nodes[0].name)}")
        time.sleep(1)
        blocked = unschedulable(box)
    if not first:
        return ["nodes: every node takes pods"]
    return [f"nodes: every node takes pods after {time.monotonic() - started:.0f} s ({'; '.join(first)})"]


def advertise_gpus(box: KubeBox, node: Node) -> str:
    """The fake GPUs as capacity in the Node's status (once; it survives kubelet restarts), and as allocatable
    until the kubelet's next status says the same; then wait until it did."""
    api = admin_api(box)
    want = str(box.gpus_per_node)
    if (api.read_node(node.name).status.capacity or {}).get(GPU_RESOURCE) != want:
        api.patch_node_status(node.name, [{"op": "add", "path": f"/status/{field}/nvidia.com~1gpu", "value": want}
                                          for field in ("capacity", "allocatable")])
    deadline = time.monotonic() + GPUS_SHOWN_S
    while (api.read_node(node.name).status.allocatable or {}).get(GPU_RESOURCE) != want:
        if time.monotonic() > deadline:
            raise BoxError(f"{node.name}: {GPU_RESOURCE} not allocatable {GPUS_SHOWN_S} s after patching its "
                           f"capacity; read {box.log_file(node.name)}")
        time.sleep(1)
    return f"{node.name}: {want} fake GPUs ({GPU_RESOURCE}, {PORTAL.k8s_gpu_node_label}={box.gpu_type})"


def ensure_routes(box: KubeBox) -> list[str]:
    """Each node's pod range, routed from the host and from every other node to the node's address."""
    api = admin_api(box)
    ranges = {node.name: api.read_node(node.name).spec.pod_cidr for node in box.node_network.nodes}
    lines = []
    for node in box.node_network.nodes:
        cidr = ranges[node.name]
        if not cidr:
            raise BoxError(f"{node.name} has no pod range: read {box.log_file('kube-controller-manager')}")
        netns.ip("route", "replace", cidr, "via", node.address, "dev", box.node_network.bridge)
        for other in box.node_network.nodes:
            if other != node:
                netns.ip("-n", other.name, "route", "replace", cidr, "via", node.address, "dev", "eth0")
        lines.append(f"{node.name}: pods {cidr}")
    return lines


def stop_pods(box: KubeBox, node: Node) -> None:
    """After the kubelet (and its containerd) stopped: the shims (in the node's namespace) and the containers
    (in the node's cgroups, in namespaces of their own), then the cgroups. Only a node of this box's own
    (netns.owns): another state dir with the same node names finds nothing to stop."""
    if not netns.owns(record_file(box), node.name):
        return
    netns.kill_namespace(node.name)
    tops = node_cgroups(node)
    left = netns.signal_all(netns.cgroup_pids(tops), signal.SIGKILL, netns.KILLED_GONE_S)
    if left:
        raise BoxError(f"{node.name}: pods' processes still there after SIGKILL: "
                       + "; ".join(map(netns.describe_process, left)))
    netns.remove_cgroups(tops)


def crash(box: KubeBox, node: Node) -> str:
    """A node lost: its link goes down, then its kubelet, containerd and every container are killed at once.
    `python -m deploy.kubernetes.kubebox up` brings it back."""
    if not (NETNS_DIR / node.name).exists():
        raise BoxError(f"{node.name}: the node is not up")
    netns.require_own(record_file(box), node.name)
    netns.ip("link", "set", node.host_link, "down", check=False)
    pids = netns.namespace_pids(node.name) + netns.cgroup_pids(node_cgroups(node))
    netns.signal_all(pids, signal.SIGKILL, netns.KILLED_GONE_S)
    stop_pods(box, node)
    box.pid_file(node.name).unlink(missing_ok=True)
    netns.ip("link", "set", node.host_link, "up", check=False)  # the node's address answers nobody now
    return f"{node.name}: crashed ({len(pids)} processes killed)"


def service(node: Node) -> Service:
    return Service(node.name, "kubelet", lambda box: prepare(box, node), lambda box: node_command(box, node),
                   lambda box: ready(box, node), NODE_READY_S,
                   extra_logs=lambda box: [box.node_dir(node.name) / name for name in ("containerd.log",
                                                                                       "kube-proxy.log")],
                   after_start=lambda box: advertise_gpus(box, node),
                   after_stop=lambda box: stop_pods(box, node))


def teardown(box: KubeBox, done: Teardown) -> None:
    """Every node's namespace and cgroups, the bridge and the hosts entries (netns.teardown, whose record stays
    when something could not go, so `down` again retries), then, once no process of the nodes is left, what the
    machine had before the first box's kubelet (machine.release). Every step runs; what is left goes to
    `done.left`."""
    recorded = netns.recorded(record_file(box))
    every = {node.name: node for node in (recorded.nodes if recorded else ())
             if netns.owns(record_file(box), node.name)}
    done.step("the nodes' network (its record is kept: `down` again retries)", lambda: netns.teardown(
        record_file(box), hosts_marker(box), lambda node: [
            (f"namespace {node.name}", lambda: netns.remove_node(node, lambda name: stop_pods(box, node))),
            (f"cgroups of {node.name}", lambda: netns.remove_cgroups(node_cgroups(node)))]))
    running = [pid for node in every.values()
               for pid in (*netns.namespace_pids(node.name), *netns.cgroup_pids(node_cgroups(node)))]
    if running:
        # Released now, the sysctls would go back under a running kubelet, and removing a made mount point
        # would take a running node's private copy away from it.
        shown = "; ".join(map(netns.describe_process, running[:3]))
        done.left.append(Leftover(f"the machine's record {machine.MACHINE}", f"kept while {len(running)} "
                                  f"processes of the nodes run ({shown}): `down` again releases it"))
        return
    released = machine.release(_box_id(box), [private_root(box, node) for node in every.values()])
    done.lines += released.lines
    done.left += released.left


def _box_id(box: KubeBox) -> str:
    return hashlib.sha256(str(box.state_dir).encode()).hexdigest()[:16]
