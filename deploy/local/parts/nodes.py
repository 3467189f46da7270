"""Compute nodes as hosts of their own: a bridge on this machine, and for each node a network and UTS namespace
(named like its hostname), a veth pair onto the bridge, an /etc/hosts entry and its own slurmd.

The login host (this machine's own namespace) keeps slapd, munged, MariaDB, slurmdbd, slurmctld and the hub; the
bridge's address (`cfg.box_gateway`) is how nodes reach them. Nothing is routed: a node has no default route, so
nothing it sends can leave the machine. The filesystem is shared, as NFS would make it on a real cluster: the
munge socket, the state dir, the venv and the homes are the same on every node.

The namespaces, links and hosts entries are deploy/netns.py's (shared with the Kubernetes box); what the box made
is recorded in run/network.json, so `down` removes exactly that, whatever the settings say by then.
"""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

from deploy import netns
from deploy.local.parts.layout import Layout
from deploy.netns import (  # noqa: F401  (box.py and the tests reach these through this module)
    CGROUP_ROOT,
    KILLED_GONE_S,
    NETNS_DIR,
    NODE_STOP_GRACE_S,
    Network,
    Node,
    describe_process,
    hosts_with,
    hosts_without,
    is_mount_point,
    namespace_pids,
    signal_all,
)
from deploy.supervise import BoxError, Service


def network_of(cfg) -> Network:
    """The box's network from its settings (pure)."""
    subnet = ipaddress.ip_network(cfg.box_subnet)
    nodes = tuple(Node(name, cfg.box_node_address(i), f"ve-{name}")
                  for i, name in enumerate(cfg.box_node_names(), start=1))
    return Network(bridge=f"br-{cfg.box_node_prefix}", gateway=cfg.box_gateway, prefix_length=subnet.prefixlen,
                   nodes=nodes)


def hosts_marker(lay: Layout) -> str:
    return f"# dsportal box {lay.root}"


def _record_path(lay: Layout) -> Path:
    return lay.run / "network.json"


def bridge_up(lay: Layout) -> bool:
    """Whether the bridge exists: without it, the box's addresses would be sent to the default route, off this
    machine, so nothing may talk to Slurm before it is made (or after `down`)."""
    return netns.link_exists(network_of(lay.cfg).bridge)


def ensure_bridge(lay: Layout) -> None:
    """The bridge and the login host's address on it (idempotent)."""
    netns.ensure_bridge(network_of(lay.cfg), _record_path(lay))


def ensure_node_network(lay: Layout, node: Node) -> None:
    """The node's namespace, its link onto the bridge (up) and its hosts entry (idempotent)."""
    netns.ensure_node_network(network_of(lay.cfg), node, _record_path(lay), hosts_marker(lay))


def ours(lay: Layout, name: str) -> bool:
    """Whether the node's namespace is this box's (netns.owns): another state dir with the same node names never
    stops, crashes or removes it."""
    return netns.owns(_record_path(lay), name)


def own_nodes(lay: Layout) -> list[Node]:
    """The nodes whose namespaces this box made and still holds."""
    net = netns.recorded(_record_path(lay))
    return [node for node in (net.nodes if net else ()) if ours(lay, node.name)]


def stop_node(lay: Layout, name: str) -> None:
    """After slurmd stopped: what is left on the node (its jobs' steps), when the node is this box's."""
    if ours(lay, name):
        kill_namespace(name)


def kill_namespace(name: str, grace_s: float = NODE_STOP_GRACE_S) -> None:
    """Every process on the node (netns.kill_namespace); a job that slurmstepd was freezing to signal it is
    thawed first: a frozen process does not die."""
    _thaw(name)
    netns.kill_namespace(name, grace_s)


def node_cgroups(name: str) -> list[Path]:
    """The cgroup directories Slurm made for the node's jobs, one per hierarchy it used (the freezer).
    proctrack/cgroup puts each job's processes in a freezer cgroup (v1) under slurm_<node>: Slurm's own prefix
    when one machine runs several slurmd (`/slurm_%n`), so the boxes' nodes never share one."""
    return sorted(path for path in CGROUP_ROOT.glob(f"*/slurm_{name}") if path.is_dir())


def _thaw(name: str) -> None:
    for top in node_cgroups(name):
        for state in top.rglob("freezer.state"):
            try:
                state.write_text("THAWED")
            except OSError:
                pass  # the cgroup went meanwhile


def crash(lay: Layout, node: Node) -> str:
    """A power cut: the node's link goes down first (so its peers get no goodbye), then every process on it is
    killed at once. `start` brings it back."""
    if not (NETNS_DIR / node.name).exists():
        raise BoxError(f"{node.name}: the node is not up")
    netns.require_own(_record_path(lay), node.name)
    netns.ip("link", "set", node.host_link, "down", check=False)
    count = len(namespace_pids(node.name))
    kill_namespace(node.name, grace_s=0)
    lay.pid_file(node.name).unlink(missing_ok=True)
    return (f"{node.name}: crashed (link down, {count} processes killed); "
            f"`python -m deploy.local.box start {node.name}` brings it back")


def teardown(lay: Layout) -> list[str]:
    """Remove what the box made (netns.teardown): per node its processes, namespace and job cgroups."""
    return netns.teardown(_record_path(lay), hosts_marker(lay), lambda node: [
        (f"namespace {node.name}", lambda: netns.remove_node(node, kill_namespace)),
        (f"cgroups of {node.name}'s jobs", lambda: netns.remove_cgroups(node_cgroups(node.name)))])


# --- the node's slurmd ------------------------------------------------------------------------------------


def node_state(lay: Layout, name: str) -> str:
    """Slurm's word for the node ("idle", "mixed", "down*", "drained" ...), or "" when Slurm does not answer."""
    try:
        info = subprocess.run([lay.slurm_cmd("sinfo"), "-h", "-N", "-n", name, "-o", "%T"], env=lay.slurm_env,
                              text=True, capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        return ""
    return info.stdout.strip().splitlines()[0] if info.returncode == 0 and info.stdout.strip() else ""


def node_ready(lay: Layout, name: str) -> str | None:
    """Registered with slurmctld. A node left down by an earlier run is resumed; a drained node stays drained
    (an admin's decision), and counts as up."""
    state = node_state(lay, name)
    if state and not state.endswith("*") and not state.startswith(("down", "unknown", "future")):
        return None
    if state.startswith("down") and not state.endswith("*"):
        subprocess.run([lay.slurm_cmd("scontrol"), "update", f"nodename={name}", "state=resume"],
                       env=lay.slurm_env, capture_output=True)
    return f"node {name} is {state or 'unknown to slurmctld'}"


def node_service(node: Node, prepare_slurm) -> Service:
    """slurmd of one node, in the node's namespaces. `nsenter`, `unshare` and sh all exec, so the recorded PID is
    slurmd's own; its hostname is the node's name (mpirun and Slurm compare it with the node list). Not `ip netns
    exec`: it mounts a fresh sysfs over /sys, which hides /sys/fs/cgroup and with it proctrack/cgroup's freezer;
    a mount namespace of its own (slave: the host's mounts still reach it) is what slurmd gets instead."""
    def prepare(lay: Layout) -> None:
        prepare_slurm(lay)
        ensure_node_network(lay, node)

    return Service(
        node.name, "slurmd", prepare,
        lambda lay: ["nsenter", f"--net={NETNS_DIR / node.name}", "unshare", "--mount", "--propagation", "slave",
                     "--uts", "/bin/sh", "-c",
                     'hostname "$1" && shift && exec "$@"', "sh", node.name,
                     lay.slurm_daemon("slurmd"), "-D", "-N", node.name, "-f", str(lay.cfg.slurm_conf_path)],
        lambda lay: node_ready(lay, node.name), 30,
        env=lambda lay: lay.slurm_env,
        extra_logs=lambda lay: [lay.slurm / f"slurmd.{node.name}.log"],
        after_stop=lambda lay: stop_node(lay, node.name))
