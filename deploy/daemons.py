"""Supervising daemons by their recorded PIDs: the part that deploy/local/box.py and deploy/kubernetes/kubebox.py share.

Stdlib only, and no messages of its own beyond SurvivedKill: each box words its own lines and errors. Both boxes
are modules of the `deploy` package (run with `python -m` from the repository root) and `from deploy import daemons`.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

CMDLINE_TRIES = 50  # x 10 ms: an exec in progress on a loaded machine

KILL_TIMEOUT = 5.0  # seconds a SIGKILLed process gets to disappear before it counts as unkillable


class SurvivedKill(RuntimeError):
    """A process was still there after SIGKILL (stuck in the kernel): the caller says which service it was."""

    def __init__(self, pid: int) -> None:
        super().__init__(f"pid {pid} survived SIGKILL")
        self.pid = pid


def _proc_state(pid: int) -> str:
    """The one-letter state of /proc/PID/stat (after the command name, which may hold spaces and parentheses)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def running_pid(pid_file: Path, program: str) -> int | None:
    """The PID in `pid_file` if it names a live (not zombie) process with `program` as the basename of an argument.

    Checking the program means a PID recycled by an unrelated process is not mistaken for the daemon."""
    try:
        pid = int(pid_file.read_text().strip())
        state = _proc_state(pid)
        argv = _cmdline(pid) if state != "Z" else []
    except (OSError, ValueError, IndexError):
        return None
    if state == "Z" or not any(os.path.basename(a.decode(errors="replace")) == program for a in argv):
        return None
    return pid


def _cmdline(pid: int) -> list[bytes]:
    """The process's arguments. Just after its parent saw the exec succeed, the kernel may not have set up the new
    program's arguments yet and the file reads empty (a process of ours always has some): read it again then."""
    for _ in range(CMDLINE_TRIES):
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        if raw:
            break
        time.sleep(0.01)
    return raw.split(b"\0")


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens there (SO_REUSEADDR so that TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def ephemeral_ports(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> range:
    """The ports the kernel hands to outgoing connections (32768-60999 unless changed): a daemon's port in there
    may be taken by any client's connection at any moment, and the daemon then fails to start."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return range(32768, 61000)
    return range(low, high + 1)


def ephemeral_note(port: int) -> str:
    """What to say of a port a daemon cannot have: why it may be taken, where it lies in the ephemeral range."""
    ports = ephemeral_ports()
    if port not in ports:
        return ""
    return (f" (it lies in the kernel's range for outgoing connections, {ports.start}-{ports.stop - 1}, so any "
            f"client may hold it for a while: choose a port below {ports.start})")


def tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log, or a line saying it cannot be read."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} cannot be read)"


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to `timeout` seconds for `pid` to end; True when it has (a zombie counts as ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # a child of this very process (a failed start): reap it
        except ChildProcessError:
            pass
        try:
            if _proc_state(pid) == "Z":
                return True  # exited; its parent has yet to reap it
        except OSError:
            return True
        time.sleep(0.1)
    return False


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # not a process, or one that just ended
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def terminate(pid: int, grace_s: float, *, with_descendants: bool = False) -> bool:
    """SIGTERM `pid`; after `grace_s` seconds SIGKILL it, and with `with_descendants` every process below it.

    Returns True when it had to be killed, False when SIGTERM was enough or it was already gone; raises
    SurvivedKill when it is still there KILL_TIMEOUT seconds after SIGKILL. The descendants are listed before
    anything is killed: a daemon's helpers in sessions of their own would otherwise outlive it, reparented."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    if wait_gone(pid, grace_s):
        return False
    for victim in [pid, *(descendants(pid) if with_descendants else [])]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if not wait_gone(pid, KILL_TIMEOUT):
        raise SurvivedKill(pid)
    return True
