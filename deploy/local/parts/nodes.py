"""Compute nodes as hosts of their own: a bridge on this machine, and for each node a network and UTS namespace
(named like its hostname), a veth pair onto the bridge, an /etc/hosts entry and its own slurmd.

The login host (this machine's own namespace) keeps slapd, munged, MariaDB, slurmdbd, slurmctld and the hub; the
bridge's address (`cfg.box_gateway`) is how nodes reach them. Nothing is routed: a node has no default route, so
nothing it sends can leave the machine. The filesystem is shared, as NFS would make it on a real cluster: the
munge socket, the state dir, the venv and the homes are the same on every node.

What the box made is recorded in run/network.json, so `down` removes exactly that (namespaces, links, the bridge,
the hosts entries, and /run/netns's mount when the box made it), whatever the settings say by then.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from daemons import wait_gone
from supervise import BoxError, Service, run

from parts.layout import Layout

HOSTS_FILE = Path("/etc/hosts")
NETNS_DIR = Path("/run/netns")
# Machine-wide (not per box): a box made /run/netns a mount point, so the last box to leave unmounts it.
NETNS_MOUNT_MARK = Path("/run/dsportal-netns-mount")
NODE_STOP_GRACE_S = 5.0
NETNS_DEL_TRIES = 3
KILLED_GONE_S = 30.0  # a killed process with gigabytes mapped can take seconds to go when the disk is busy
# proctrack/cgroup puts each job's processes in a freezer cgroup (v1) under slurm_<node>: Slurm's own prefix when
# one machine runs several slurmd (`/slurm_%n`), so the boxes' nodes never share one.
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Node:
    name: str  # Slurm's NodeName, the hostname inside its namespace, and the namespace's name
    address: str
    host_link: str  # the veth end on the bridge; the node's own end is eth0 in its namespace


@dataclass(frozen=True)
class Network:
    bridge: str
    gateway: str
    prefix_length: int
    nodes: tuple[Node, ...]


def network_of(cfg) -> Network:
    """The box's network from its settings (pure)."""
    subnet = ipaddress.ip_network(cfg.box_subnet)
    nodes = tuple(Node(name, cfg.box_node_address(i), f"ve-{name}")
                  for i, name in enumerate(cfg.box_node_names(), start=1))
    return Network(bridge=f"br-{cfg.box_node_prefix}", gateway=cfg.box_gateway, prefix_length=subnet.prefixlen,
                   nodes=nodes)


def hosts_marker(lay: Layout) -> str:
    return f"# dsportal box {lay.root}"


def hosts_with(text: str, entries: list[tuple[str, str]], marker: str) -> str:
    """/etc/hosts with exactly `entries` (address, name) under this box's marker, every other line as it was."""
    kept = hosts_without(text, marker)
    if kept and not kept.endswith("\n"):
        kept += "\n"
    return kept + "".join(f"{address}\t{name}\t{marker}\n" for address, name in entries)


def hosts_without(text: str, marker: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.rstrip().endswith(marker))


def _rewrite_hosts(new_text: str) -> None:
    # In place, not by rename: /etc/hosts is often a bind mount (containers), which a rename would break.
    if HOSTS_FILE.read_text() != new_text:
        with open(HOSTS_FILE, "r+") as hosts:
            hosts.write(new_text)
            hosts.truncate()


def is_mount_point(path: Path, mountinfo: str | None = None) -> bool:
    """Whether `path` is a mount point. os.path.ismount cannot tell a directory bind-mounted onto itself (what
    `ip netns add` does to /run/netns): it compares devices, and a bind mount has its parent's."""
    text = Path("/proc/self/mountinfo").read_text() if mountinfo is None else mountinfo
    return any(len(fields) > 4 and fields[4] == str(path) for fields in map(str.split, text.splitlines()))


# --- what was made, kept across runs ------------------------------------------------------------------


def _record_path(lay: Layout) -> Path:
    return lay.run / "network.json"


def recorded(lay: Layout) -> Network | None:
    try:
        data = json.loads(_record_path(lay).read_text())
        return Network(bridge=data["bridge"], gateway=data["gateway"], prefix_length=data["prefix_length"],
                       nodes=tuple(Node(**node) for node in data["nodes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _record(lay: Layout, net: Network) -> None:
    """What is recorded is the union of what exists already and what this run makes."""
    before = recorded(lay)
    nodes = {n.name: n for n in (before.nodes if before else ())} | {n.name: n for n in net.nodes}
    union = Network(net.bridge, net.gateway, net.prefix_length, tuple(nodes.values()))
    _record_path(lay).write_text(json.dumps(asdict(union), indent=2) + "\n")


# --- making it ------------------------------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["ip", *args], f"network: ip {' '.join(args)}") if check else subprocess.run(
        ["ip", *args], text=True, capture_output=True)


def _link_exists(name: str, netns: str | None = None) -> bool:
    return _ip(*(["-n", netns] if netns else []), "link", "show", name, check=False).returncode == 0


def bridge_up(lay: Layout) -> bool:
    """Whether the bridge exists: without it, the box's addresses would be sent to the default route, off this
    machine, so nothing may talk to Slurm before it is made (or after `down`)."""
    return _link_exists(network_of(lay.cfg).bridge)


def ensure_bridge(lay: Layout) -> None:
    """The bridge and the login host's address on it (idempotent)."""
    net = network_of(lay.cfg)
    _record(lay, Network(net.bridge, net.gateway, net.prefix_length, ()))
    if not _link_exists(net.bridge):
        _ip("link", "add", net.bridge, "type", "bridge")
    cidr = f"{net.gateway}/{net.prefix_length}"
    if cidr not in _ip("-o", "addr", "show", "dev", net.bridge).stdout:
        _ip("addr", "add", cidr, "dev", net.bridge)
    _ip("link", "set", net.bridge, "up")


def ensure_node_network(lay: Layout, node: Node) -> None:
    """The node's namespace, its link onto the bridge (up) and its hosts entry (idempotent)."""
    ensure_bridge(lay)
    net = network_of(lay.cfg)
    _record(lay, Network(net.bridge, net.gateway, net.prefix_length, (node,)))
    if not (NETNS_DIR / node.name).exists():
        if not is_mount_point(NETNS_DIR) and not NETNS_MOUNT_MARK.exists():
            NETNS_MOUNT_MARK.write_text("ip netns add made /run/netns a mount point; dsportal's box removes it\n")
        _ip("netns", "add", node.name)
    if not _link_exists("eth0", node.name):
        if _link_exists(node.host_link):  # the other end went with an old namespace
            _ip("link", "del", node.host_link)
        _ip("link", "add", node.host_link, "type", "veth", "peer", "name", "eth0", "netns", node.name)
    if f"{node.address}/" not in _ip("-n", node.name, "-o", "addr", "show", "dev", "eth0").stdout:
        _ip("-n", node.name, "addr", "add", f"{node.address}/{net.prefix_length}", "dev", "eth0")
    _ip("link", "set", node.host_link, "master", net.bridge, "up")
    _ip("-n", node.name, "link", "set", "lo", "up")
    _ip("-n", node.name, "link", "set", "eth0", "up")
    _ensure_hosts(lay)


def _ensure_hosts(lay: Layout) -> None:
    net = recorded(lay) or network_of(lay.cfg)
    _rewrite_hosts(hosts_with(HOSTS_FILE.read_text(), [(n.address, n.name) for n in net.nodes], hosts_marker(lay)))


# --- a node's processes ---------------------------------------------------------------------------------


def namespace_pids(name: str) -> list[int]:
    """Every process in the node's network namespace: slurmd, and the slurmstepd and jobs it started (which
    are not slurmd's descendants: slurmstepd daemonizes)."""
    if not (NETNS_DIR / name).exists():
        return []
    out = _ip("netns", "pids", name, check=False).stdout
    return [int(pid) for pid in out.split() if pid.isdigit() and int(pid) != os.getpid()]


def kill_namespace(name: str, grace_s: float = NODE_STOP_GRACE_S) -> None:
    """TERM every process on the node, KILL what is left after `grace_s` (0: KILL at once, a power cut). The
    namespace is listed again after each round, so what was forked meanwhile goes too. A job that slurmstepd was
    freezing to signal it is thawed first: a frozen process does not die."""
    _thaw(name)
    if grace_s:
        signal_all(namespace_pids(name), signal.SIGTERM, grace_s)
    for _ in range(3):
        pids = namespace_pids(name)
        if not pids:
            return
        left = signal_all(pids, signal.SIGKILL, KILLED_GONE_S)
        if left:
            raise BoxError(f"{name}: still there {KILLED_GONE_S:.0f} s after SIGKILL: "
                           + "; ".join(describe_process(pid) for pid in left))
    raise BoxError(f"{name}: processes keep appearing: " + "; ".join(map(describe_process, namespace_pids(name))))


def signal_all(pids: list[int], sig: signal.Signals, wait_s: float) -> list[int]:
    """Send `sig` to each; the ones still there after `wait_s` seconds."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    return [pid for pid in pids if not wait_gone(pid, max(0.0, deadline - time.monotonic()))]


def node_cgroups(name: str) -> list[Path]:
    """The cgroup directories Slurm made for the node's jobs, one per hierarchy it used (the freezer)."""
    return sorted(path for path in CGROUP_ROOT.glob(f"*/slurm_{name}") if path.is_dir())


def _thaw(name: str) -> None:
    for top in node_cgroups(name):
        for state in top.rglob("freezer.state"):
            try:
                state.write_text("THAWED")
            except OSError:
                pass  # the cgroup went meanwhile


def _remove_cgroups(name: str) -> bool:
    """Whether there were any. Run after the node's processes were killed: cgroups are removed deepest first,
    and one that still holds a process (which would be outside the node's namespace) is an error naming it."""
    tops = node_cgroups(name)
    for top in tops:
        below = sorted((path for path in top.rglob("*") if path.is_dir()), key=lambda path: -len(path.parts))
        for path in [*below, top]:
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError as err:
                procs = (path / "cgroup.procs").read_text().split() if (path / "cgroup.procs").exists() else []
                raise BoxError(f"cgroup {path}: {err.strerror}"
                               + (": " + "; ".join(describe_process(int(pid)) for pid in procs) if procs else "")
                               ) from err
    return bool(tops)


def describe_process(pid: int) -> str:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"pid {pid} (gone now)"
    return f"pid {pid} state {state}: {command[:120]}"


def crash(lay: Layout, node: Node) -> str:
    """A power cut: the node's link goes down first (so its peers get no goodbye), then every process on it is
    killed at once. `start` brings it back."""
    if not (NETNS_DIR / node.name).exists():
        raise BoxError(f"{node.name}: the node is not up")
    _ip("link", "set", node.host_link, "down", check=False)
    count = len(namespace_pids(node.name))
    kill_namespace(node.name, grace_s=0)
    lay.pid_file(node.name).unlink(missing_ok=True)
    return f"{node.name}: crashed (link down, {count} processes killed); `box.py start {node.name}` brings it back"


# --- taking it all down ---------------------------------------------------------------------------------


def teardown(lay: Layout) -> list[str]:
    """Remove what the box made: namespaces (and with them their veth pairs), the bridge, the hosts entries,
    and /run/netns's mount when a box made it and no namespace is left in it. Every step is tried whatever failed
    before it; BoxError at the end names what is left and why (the record is kept, so `down` again retries)."""
    net = recorded(lay)
    steps = []
    for node in net.nodes if net else ():
        steps += [(f"namespace {node.name}", lambda node=node: _remove_node(node)),
                  (f"cgroups of {node.name}'s jobs", lambda node=node: _remove_cgroups(node.name))]
    if net:
        steps.append((f"bridge {net.bridge}", lambda: _remove_link(net.bridge)))
    steps += [("/etc/hosts entries", lambda: _remove_hosts(lay)), ("the /run/netns mount", _remove_netns_mount)]
    done, failed = [], []
    for what, step in steps:
        try:
            if step():
                done.append(what)
        except BoxError as err:
            failed.append(f"{what}: {err}")
    lines = [f"network: removed {', '.join(done)}"] if done else []
    if failed:
        raise BoxError("\n".join([*lines, "network: could not remove:", *failed]))
    _record_path(lay).unlink(missing_ok=True)
    return lines


def _remove_node(node: Node) -> bool:
    """Its processes, then its namespace, which takes its veth pair along (the kernel frees a namespace's links
    a moment after its last user, so the host end may vanish on its own)."""
    kill_namespace(node.name)
    present = (NETNS_DIR / node.name).exists()
    for attempt in range(NETNS_DEL_TRIES):
        if not (NETNS_DIR / node.name).exists():
            break
        deleted = _ip("netns", "del", node.name, check=False)
        if deleted.returncode != 0 and attempt + 1 == NETNS_DEL_TRIES:
            raise BoxError(f"ip netns del {node.name}: {deleted.stderr.strip()}")
        time.sleep(1.0 if deleted.returncode else 0)  # busy while another tool (podman) remounts /run/netns
    _remove_link(node.host_link)
    return present


def _remove_link(name: str) -> bool:
    """Whether the link was there to remove (one that vanishes meanwhile is as good as removed)."""
    if not _link_exists(name):
        return False
    gone = _ip("link", "del", name, check=False)
    if gone.returncode != 0 and _link_exists(name):
        raise BoxError(f"ip link del {name}: {gone.stderr.strip()}")
    return True


def _remove_netns_mount() -> bool:
    """/run/netns's mount, when a box made it (`ip netns add` does) and no namespace is left in it."""
    if not (NETNS_MOUNT_MARK.exists() and is_mount_point(NETNS_DIR) and not any(NETNS_DIR.iterdir())):
        return False
    run(["umount", str(NETNS_DIR)], "network: unmounting /run/netns")
    NETNS_MOUNT_MARK.unlink()
    return True


def _remove_hosts(lay: Layout) -> bool:
    before = HOSTS_FILE.read_text()
    _rewrite_hosts(hosts_without(before, hosts_marker(lay)))
    return HOSTS_FILE.read_text() != before


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
                     "/usr/sbin/slurmd", "-D", "-N", node.name, "-f", str(lay.cfg.slurm_conf_path)],
        lambda lay: node_ready(lay, node.name), 30,
        env=lambda lay: lay.slurm_env,
        extra_logs=lambda lay: [lay.slurm / f"slurmd.{node.name}.log"],
        after_stop=lambda lay: kill_namespace(node.name))
