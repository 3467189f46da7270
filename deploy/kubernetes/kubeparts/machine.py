"""What the nodes of every Kubernetes box change on the machine, and how the last box to go puts it back.

The kubelet sets sysctls when it starts (KUBELET_SYSCTLS). node.sh binds each node's private copy over the paths
that a program hard-codes (HARD_CODED_PATHS), and a bind needs its mount point on the machine. Before its first
kubelet, a box records (the first box on the machine) the sysctls and the mount points it had to make, in
/run/dsportal-kubebox/before.json, and registers itself under boxes/. The last box to go restores the sysctls,
removes the mount points it made and the record.

A mount point the box made is only ever a mount point: whatever the nodes write there lands in their private
copies, and the host never sees it. So a made directory that holds something at teardown holds another program's
files (podman keeps its CNI networks in the machine's /var/lib/cni): it is left where it is, said so, and the rest
is released all the same. Only what is the box's own (a leftover that its nodes' private copies hold too, a sysctl
that cannot be written back) makes `down` fail.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from deploy.supervise import BoxError

MACHINE = Path("/run/dsportal-kubebox")  # which boxes run nodes, and what the first one found
# Held while a box claims or releases the machine: a user's box and the tests' box may go up and down at once.
# (Outside MACHINE, which the last box removes; /run/lock is the machine's place for such files.)
MACHINE_LOCK = Path("/run/lock/dsportal-kubebox.lock")
SYSCTLS = Path("/proc/sys")
KUBELET_SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
# What node.sh binds per node, and which program hard-codes it (nothing in its configuration moves it). The rest of
# the nodes' state is configured into the node's dir: containerd's root, state, sockets and runc root, the CNI
# config and the host-local IPAM's dataDir, the kubelet's --root-dir and --cert-dir (nodes.py).
HARD_CODED_PATHS = {
    "/var/lib/kubelet": "the kubelet 1.20's device-plugin socket and checkpoint (device-plugins/), whatever its "
                        "--root-dir",
    "/var/log/pods": "the kubelet's pod logs (its log GC would delete another node's)",
    "/var/log/containers": "the kubelet's links to its containers' logs",
    "/var/lib/cni": "libcni's cache of CNI results (results/): containerd 1.6's CRI has no setting for it",
    "/run/containerd": "containerd 1.6's shim sockets (s/)",
}
PRIVATE_PATHS = tuple(HARD_CODED_PATHS)
SHOWN = 4  # entries of a leftover directory named in its line


@dataclass(frozen=True)
class Leftover:
    """Something a teardown could not remove: what, why, and whether it is the box's own (then `down` fails) or
    another program's (left to it)."""

    what: str
    why: str
    ours: bool = True

    def __str__(self) -> str:
        return f"left {self.what}: {self.why}"


@dataclass
class Teardown:
    """What a teardown did, line by line, and what it left. Each step runs whatever failed before it."""

    lines: list[str] = field(default_factory=list)
    left: list[Leftover] = field(default_factory=list)

    def step(self, what: str, action: Callable[[], str | list[str]]) -> None:
        try:
            done = action()
        except BoxError as err:
            self.left.append(Leftover(what, str(err)))
            return
        self.lines += [done] if isinstance(done, str) else done

    @property
    def ours(self) -> list[Leftover]:
        return [leftover for leftover in self.left if leftover.ours]

    def report(self) -> list[str]:
        return [*self.lines, *map(str, self.left)]


class LeftBehind(BoxError):
    """`down` tried every step, and something of the box's own is left; `lines` is its whole report."""

    def __init__(self, teardown: Teardown) -> None:
        self.lines = teardown.report()
        super().__init__("left behind: " + "; ".join(f"{left.what} ({left.why})" for left in teardown.ours))


# --- the decisions, apart from the machine they are made on ------------------------------------------------


def sysctls_to_restore(before: dict[str, str], now: dict[str, str]) -> dict[str, str]:
    """The recorded values that differ from the machine's now."""
    return {name: value for name, value in before.items() if now.get(name) != value}


def made_dir_verdict(path: str, entries: list[str], files: Iterable[str], nodes_write: Iterable[str]
                     ) -> Leftover | None:
    """None when the made mount point `path` is empty and can go; else what it holds (`entries`), and whose: the
    box's own when some of its `files` are files that the nodes' private copies hold at the same place (a bind
    that was missing), another program's otherwise. Only files count: a directory name alone says nothing (libcni
    makes results/ for podman as for the nodes)."""
    if not entries:
        return None
    own = sorted(set(files) & set(nodes_write))
    if own:
        return Leftover(path, f"holds {_listed(own)}, which the box's nodes write: remove it by hand")
    return Leftover(path, f"holds {_listed(sorted(entries))}, not the box's", ours=False)


def _listed(names: list[str]) -> str:
    return ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def contents(path: Path) -> list[str]:
    """What a directory holds, two levels deep ("networks/podman"): enough to name it in a line."""
    found = []
    for entry in sorted(path.iterdir()) if path.is_dir() else ():
        below = sorted(entry.iterdir()) if entry.is_dir() and not entry.is_symlink() else []
        found += [f"{entry.name}/{inner.name}" for inner in below] or [entry.name]
    return found


def files(path: Path) -> set[str]:
    """Every file (or link) below a directory, by its path relative to it."""
    return {str(found.relative_to(path)) for found in path.rglob("*") if found.is_symlink() or not found.is_dir()}


# --- claiming and releasing the machine ---------------------------------------------------------------------


@contextmanager
def machine_lock() -> Iterator[None]:
    MACHINE_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(MACHINE_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def claim(box_id: str, state_dir: Path) -> None:
    """Before a box's first kubelet: record the sysctls and the missing mount points (the first box on the
    machine), make those, and register the box."""
    with machine_lock():
        _claim(box_id, state_dir)


def _claim(box_id: str, state_dir: Path) -> None:
    (MACHINE / "boxes").mkdir(parents=True, exist_ok=True)
    before_file = MACHINE / "before.json"
    before = json.loads(before_file.read_text()) if before_file.exists() else {
        "sysctls": {name: (SYSCTLS / name).read_text().strip() for name in KUBELET_SYSCTLS}, "made": []}
    for path in map(Path, PRIVATE_PATHS):
        if not path.exists():
            path.mkdir(parents=True)
            if str(path) not in before["made"]:  # a record left by a teardown that was cut short
                before["made"].append(str(path))
    before_file.write_text(json.dumps(before, indent=1) + "\n")
    (MACHINE / "boxes" / box_id).write_text(f"{state_dir}\n")


def release(box_id: str, private_roots: list[Path]) -> Teardown:
    """The box is gone; when it was the last, put the sysctls back, remove the mount points it made (those that
    hold another program's files stay), and the record, whatever was left. `private_roots`: the box's nodes'
    private copies (node.sh binds ROOT/var/lib/cni over /var/lib/cni), to tell the box's files from others'."""
    with machine_lock():
        return _release(box_id, private_roots)


def _release(box_id: str, private_roots: list[Path]) -> Teardown:
    done = Teardown()
    (MACHINE / "boxes" / box_id).unlink(missing_ok=True)
    before_file = MACHINE / "before.json"
    if not before_file.exists() or any((MACHINE / "boxes").iterdir()):
        return done
    try:
        before = json.loads(before_file.read_text())
    except ValueError as err:
        done.left.append(Leftover(str(before_file), f"unreadable ({err}): the sysctls and mount points it "
                                                    "recorded are not known; it is removed"))
        before = {"sysctls": {}, "made": []}
    restored = _restore_sysctls(before.get("sysctls", {}), done)
    removed = [path for path in reversed(before.get("made", [])) if _remove_made(Path(path), private_roots, done)]
    # The record goes whatever is left: a directory left to another program is its own now, and the next box on
    # the machine records afresh what it finds.
    before_file.unlink()
    for record_dir in (MACHINE / "boxes", MACHINE):
        try:
            record_dir.rmdir()
        except OSError as err:  # a box registered meanwhile
            done.left.append(Leftover(str(record_dir), f"cannot be removed: {err.strerror}"))
    done.lines.append(f"machine: restored {', '.join(restored) or 'nothing (the sysctls were as before)'}; removed "
                      f"{', '.join(removed) or 'no directories'}")
    return done


def _restore_sysctls(before: dict[str, str], done: Teardown) -> list[str]:
    now = {name: (SYSCTLS / name).read_text().strip() for name in before}
    restored = []
    for name, value in sysctls_to_restore(before, now).items():
        shown = name.replace("/", ".")
        try:
            (SYSCTLS / name).write_text(value)
        except OSError as err:
            done.left.append(Leftover(f"sysctl {shown}", f"{now[name]}, was {value} before the kubelets: "
                                                         f"{err.strerror}; set it back with `sysctl {shown}={value}`"))
            continue
        restored.append(f"{shown}={value}")
    return restored


def _remove_made(path: Path, private_roots: list[Path], done: Teardown) -> bool:
    """Whether the made mount point `path` was removed; a reason in `done.left` when it stays."""
    if not path.exists():
        return False
    nodes_write = {name for root in private_roots for name in files(root / path.relative_to("/"))}
    verdict = made_dir_verdict(str(path), contents(path), files(path), nodes_write)
    if verdict is not None:
        done.left.append(verdict)
        return False
    try:
        path.rmdir()
    except FileNotFoundError:
        return False
    except OSError as err:  # held on the host (a mount over it), or filled meanwhile
        done.left.append(Leftover(str(path), f"made for the kubelets, cannot be removed: {err.strerror}"))
        return False
    return True
