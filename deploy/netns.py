"""Hosts of their own on this machine: a bridge, and per node a network namespace with a veth pair onto the bridge
and an /etc/hosts entry. Shared by the Slurm box (deploy/local/parts/nodes.py: one slurmd per node) and the
Kubernetes box (deploy/kubernetes/kubeparts/nodes.py: one containerd and kubelet per node).

What a box made is recorded in a JSON file of its own (`record_file`), so its teardown removes exactly that
(namespaces, links, the bridge, the hosts entries under its marker, and /run/netns's mount when a box made it),
whatever the settings say by then. A namespace's name is machine-wide while a box's settings are not: each node's
namespace is claimed by the record of the box that made it (OWNERS_DIR), a box never makes, stops, crashes or
removes a node that another box's record holds, and another state dir with the same node names (a directory-only
box of the tests, a second checkout) finds nothing of its own to stop. Nothing here is routed off the machine: a
node gets no default route.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from deploy.daemons import wait_gone
from deploy.supervise import BoxError, run

HOSTS_FILE = Path("/etc/hosts")
NETNS_DIR = Path("/run/netns")
# Machine-wide (not per box): a box made /run/netns a mount point, so the last box to leave unmounts it.
NETNS_MOUNT_MARK = Path("/run/dsportal-netns-mount")
# Machine-wide, gone with a reboot as the namespaces are: per node namespace, the record file of the box that made it.
OWNERS_DIR = Path("/run/dsportal-netns-owners")
NODE_STOP_GRACE_S = 5.0
NETNS_DEL_TRIES = 3
KILLED_GONE_S = 30.0  # a killed process with gigabytes mapped can take seconds to go when the disk is busy
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Node:
    name: str  # the hostname inside its namespace, and the namespace's name
    address: str
    host_link: str  # the veth end on the bridge; the node's own end is eth0 in its namespace


@dataclass(frozen=True)
class Network:
    bridge: str
    gateway: str
    prefix_length: int
    nodes: tuple[Node, ...]


def hosts_with(text: str, entries: list[tuple[str, str]], marker: str) -> str:
    """/etc/hosts with exactly `entries` (address, name) under this box's marker, every other line as it was."""
    kept = hosts_without(text, marker)
    if kept and not kept.endswith("\n"):
        kept += "\n"
    return kept + "".join(f"{address}\t{name}\t{marker}\n" for address, name in entries)


def hosts_without(text: str, marker: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.rstrip().endswith(marker))


def _edit_hosts(change: Callable[[str], str]) -> bool:
    """Rewrite /etc/hosts with `change` applied; whether it changed. Under an exclusive lock on the file: boxes
    start side by side (`make test` starts the Slurm and the Kubernetes test boxes at once, beside a user's), and
    each reads, changes and writes the whole file. In place, not by rename: /etc/hosts is often a bind mount
    (containers), which a rename would break."""
    with open(HOSTS_FILE, "r+") as hosts:
        fcntl.flock(hosts, fcntl.LOCK_EX)
        before = hosts.read()
        after = change(before)
        if after != before:
            hosts.seek(0)
            hosts.write(after)
            hosts.truncate()
        return after != before


def is_mount_point(path: Path, mountinfo: str | None = None) -> bool:
    """Whether `path` is a mount point. os.path.ismount cannot tell a directory bind-mounted onto itself (what
    `ip netns add` does to /run/netns): it compares devices, and a bind mount has its parent's."""
    text = Path("/proc/self/mountinfo").read_text() if mountinfo is None else mountinfo
    return any(len(fields) > 4 and fields[4] == str(path) for fields in map(str.split, text.splitlines()))


# --- what was made, kept across runs ------------------------------------------------------------------


def recorded(record_file: Path) -> Network | None:
    try:
        data = json.loads(record_file.read_text())
        return Network(bridge=data["bridge"], gateway=data["gateway"], prefix_length=data["prefix_length"],
                       nodes=tuple(Node(**node) for node in data["nodes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _record(record_file: Path, net: Network) -> None:
    """What is recorded is the union of what exists already and what this run makes."""
    before = recorded(record_file)
    nodes = {n.name: n for n in (before.nodes if before else ())} | {n.name: n for n in net.nodes}
    union = Network(net.bridge, net.gateway, net.prefix_length, tuple(nodes.values()))
    record_file.write_text(json.dumps(asdict(union), indent=2) + "\n")


# --- whose a namespace is ------------------------------------------------------------------------------


def owner_of(name: str) -> str | None:
    """The record file of the box that claimed the node's namespace, or None when none did."""
    try:
        return (OWNERS_DIR / name).read_text().strip() or None
    except OSError:
        return None


def owns(record_file: Path, name: str) -> bool:
    """Whether the node's namespace is this box's: its record lists the node and no other box has claimed it (a
    namespace made before claims existed is its record's)."""
    net = recorded(record_file)
    if net is None or name not in {node.name for node in net.nodes}:
        return False
    owner = owner_of(name)
    return owner is None or owner == _key(record_file)


def require_own(record_file: Path, name: str) -> None:
    """BoxError unless the node's namespace is this box's (`owns`): what a crash of one node checks first."""
    if not owns(record_file, name):
        raise BoxError(f"{name}: not this box's node ({owner_of(name) or 'no box'}'s record holds its namespace)")


def claim(record_file: Path, name: str) -> None:
    """Mark the node's namespace as this box's before it records or makes it; BoxError when the namespace exists
    and another box's record still holds it."""
    owner = owner_of(name)
    if owner and owner != _key(record_file) and (NETNS_DIR / name).exists() and owns(Path(owner), name):
        raise BoxError(f"network namespace {name} is another box's (its record: {owner}): give this box other "
                       "node names (box_node_prefix), or take that box down first")
    for attempt in range(3):  # another box's release may remove the empty directory between the two steps
        OWNERS_DIR.mkdir(mode=0o755, exist_ok=True)
        try:
            (OWNERS_DIR / name).write_text(_key(record_file) + "\n")
            return
        except FileNotFoundError:
            if attempt == 2:
                raise


def release(record_file: Path, name: str) -> bool:
    """Drop this box's claim (after its namespace is gone); another box's claim stays. Whether it dropped one."""
    if owner_of(name) != _key(record_file):
        return False
    (OWNERS_DIR / name).unlink(missing_ok=True)
    try:
        OWNERS_DIR.rmdir()  # the last claim gone: nothing of the boxes is left in /run (else: not empty, kept)
    except OSError:
        pass
    return True


def _key(record_file: Path) -> str:
    return os.path.abspath(record_file)


# --- making it ------------------------------------------------------------------------------------------


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["ip", *args], f"network: ip {' '.join(args)}") if check else subprocess.run(
        ["ip", *args], text=True, capture_output=True)


def link_exists(name: str, netns: str | None = None) -> bool:
    return ip(*(["-n", netns] if netns else []), "link", "show", name, check=False).returncode == 0


def ensure_bridge(net: Network, record_file: Path) -> None:
    """The bridge and this machine's address on it (idempotent)."""
    _record(record_file, Network(net.bridge, net.gateway, net.prefix_length, ()))
    if not link_exists(net.bridge):
        ip("link", "add", net.bridge, "type", "bridge")
    cidr = f"{net.gateway}/{net.prefix_length}"
    if cidr not in ip("-o", "addr", "show", "dev", net.bridge).stdout:
        ip("addr", "add", cidr, "dev", net.bridge)
    ip("link", "set", net.bridge, "up")


def ensure_node_network(net: Network, node: Node, record_file: Path, hosts_marker: str) -> None:
    """The node's namespace, its link onto the bridge (up) and its hosts entry (idempotent)."""
    claim(record_file, node.name)
    ensure_bridge(net, record_file)
    _record(record_file, Network(net.bridge, net.gateway, net.prefix_length, (node,)))
    if not (NETNS_DIR / node.name).exists():
        if not is_mount_point(NETNS_DIR) and not NETNS_MOUNT_MARK.exists():
            NETNS_MOUNT_MARK.write_text("ip netns add made /run/netns a mount point; dsportal's box removes it\n")
        ip("netns", "add", node.name)
    if not link_exists("eth0", node.name):
        if link_exists(node.host_link):  # the other end went with an old namespace
            ip("link", "del", node.host_link)
        ip("link", "add", node.host_link, "type", "veth", "peer", "name", "eth0", "netns", node.name)
    if f"{node.address}/" not in ip("-n", node.name, "-o", "addr", "show", "dev", "eth0").stdout:
        ip("-n", node.name, "addr", "add", f"{node.address}/{net.prefix_length}", "dev", "eth0")
    ip("link", "set", node.host_link, "master", net.bridge, "up")
    ip("-n", node.name, "link", "set", "lo", "up")
    ip("-n", node.name, "link", "set", "eth0", "up")
    hosts = recorded(record_file) or net
    _edit_hosts(lambda text: hosts_with(text, [(n.address, n.name) for n in hosts.nodes], hosts_marker))


# --- a node's processes ---------------------------------------------------------------------------------


def namespace_pids(name: str) -> list[int]:
    """Every process in the node's network namespace, including the daemonized ones (slurmstepd, containerd's
    shims) that are nobody's descendants."""
    if not (NETNS_DIR / name).exists():
        return []
    out = ip("netns", "pids", name, check=False).stdout
    return [int(pid) for pid in out.split() if pid.isdigit() and int(pid) != os.getpid()]


def kill_namespace(name: str, grace_s: float = NODE_STOP_GRACE_S) -> None:
    """TERM every process on the node, KILL what is left after `grace_s` (0: KILL at once, a power cut). The
    namespace is listed again after each round, so what was forked meanwhile goes too."""
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


def describe_process(pid: int) -> str:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"pid {pid} (gone now)"
    return f"pid {pid} state {state}: {command[:120]}"


def cgroup_pids(tops: list[Path]) -> list[int]:
    """Every process in these cgroups and below them."""
    return sorted({int(pid) for top in tops for procs in top.rglob("cgroup.procs") if procs.exists()
                   for pid in _read(procs).split() if pid.isdigit()})


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""  # the cgroup went meanwhile


def remove_cgroups(tops: list[Path]) -> bool:
    """Whether there were any. Run after their processes were killed: cgroups are removed deepest first, and one
    that still holds a process is an error naming it."""
    for top in tops:
        below = sorted((path for path in top.rglob("*") if path.is_dir()), key=lambda path: -len(path.parts))
        for path in [*below, top]:
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError as err:
                procs = _read(path / "cgroup.procs").split()
                raise BoxError(f"cgroup {path}: {err.strerror}"
                               + (": " + "; ".join(describe_process(int(pid)) for pid in procs) if procs else "")
                               ) from err
    return bool(tops)


# --- taking it all down ---------------------------------------------------------------------------------

Step = tuple[str, Callable[[], bool]]  # what, and the step (True when it removed something)


def teardown(record_file: Path, hosts_marker: str, node_steps: Callable[[Node], list[Step]]) -> list[str]:
    """Remove what the box made: per node of its own (`owns`) its `node_steps` (which remove its namespace, and
    with it its veth pair) and its claim, then the bridge, the hosts entries, and /run/netns's mount when a box
    made it and no namespace is left in it. Every step is tried whatever failed before it; BoxError at the end
    names what is left and why (the record is kept, so `down` again retries)."""
    net = recorded(record_file)
    steps: list[Step] = []
    for node in net.nodes if net else ():
        if owns(record_file, node.name):
            steps += [*node_steps(node), (f"the claim on {node.name}", lambda name=node.name: (
                not (NETNS_DIR / name).exists() and release(record_file, name)))]
    if net:
        steps.append((f"bridge {net.bridge}", lambda: remove_link(net.bridge)))
    steps += [("/etc/hosts entries", lambda: _remove_hosts(hosts_marker)),
              ("the /run/netns mount", _remove_netns_mount)]
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
    record_file.unlink(missing_ok=True)
    return lines


def remove_node(node: Node, kill: Callable[[str], None] = kill_namespace) -> bool:
    """Its processes (`kill`), then its namespace, which takes its veth pair along (the kernel frees a
    namespace's links a moment after its last user, so the host end may vanish on its own)."""
    kill(node.name)
    present = (NETNS_DIR / node.name).exists()
    for attempt in range(NETNS_DEL_TRIES):
        if not (NETNS_DIR / node.name).exists():
            break
        deleted = ip("netns", "del", node.name, check=False)
        if deleted.returncode != 0 and attempt + 1 == NETNS_DEL_TRIES:
            raise BoxError(f"ip netns del {node.name}: {deleted.stderr.strip()}")
        time.sleep(1.0 if deleted.returncode else 0)  # busy while another tool (podman) remounts /run/netns
    remove_link(node.host_link)
    return present


def remove_link(name: str) -> bool:
    """Whether the link was there to remove (one that vanishes meanwhile is as good as removed)."""
    if not link_exists(name):
        return False
    gone = ip("link", "del", name, check=False)
    if gone.returncode != 0 and link_exists(name):
        raise BoxError(f"ip link del {name}: {gone.stderr.strip()}")
    return True


def _remove_netns_mount() -> bool:
    """/run/netns's mount, when a box made it (`ip netns add` does) and no namespace is left in it."""
    if not (NETNS_MOUNT_MARK.exists() and is_mount_point(NETNS_DIR) and not any(NETNS_DIR.iterdir())):
        return False
    run(["umount", str(NETNS_DIR)], "network: unmounting /run/netns")
    NETNS_MOUNT_MARK.unlink()
    return True


def _remove_hosts(marker: str) -> bool:
    return _edit_hosts(lambda text: hosts_without(text, marker))
