"""What a process listens on, read from /proc as `ss -lntp` does: the TCP sockets in LISTEN whose inode one of its
file descriptors holds (`tcp_listeners`), and the processes to ask (`pids_matching`, `process_tree`, `Sampler`).
For the tests that check that nothing of a user's work answers another user (docs/security.md). /proc/net/* is
the reader's network namespace's: read it from the process's own (a node's namespace: `ip netns exec`), or from
/proc/<pid>/net, which is the process's."""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

LISTEN = "0A"  # /proc/net/tcp's st for TCP_LISTEN


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets `pid` holds open; empty once it has gone."""
    found = set()
    try:
        for fd in os.scandir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(fd.path)
            except OSError:
                continue
            if target.startswith("socket:["):
                found.add(int(target[8:-1]))
    except OSError:
        pass
    return found


def _address(hex_address: str) -> str:
    """/proc/net/tcp's address (32-bit words in the host's order, little-endian here) as ipaddress writes it."""
    raw = bytes.fromhex(hex_address)
    ordered = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(ordered))


def tcp_listeners(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN that `pid` holds, in its own network namespace."""
    inodes = socket_inodes(pid)
    found = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == LISTEN and int(fields[9]) in inodes:
                address, port = fields[1].split(":")
                found.add((_address(address), int(port, 16)))
    return found


def process_tree(pid: int) -> set[int]:
    """`pid` and every process below it."""
    parents: dict[int, int] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat_file.parent.name)] = int(stat_file.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError):
            continue  # ended meanwhile
    tree, added = {pid}, True
    while added:
        below = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= below
        added = bool(below)
    return tree


def pids_matching(words: Iterable[str]) -> list[int]:
    """The processes whose command line holds every one of `words`."""
    wanted = [word.encode() for word in words]
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            line = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if all(word in line for word in wanted):
            found.append(int(entry.name))
    return found


class Sampler:
    """Samples, every `every` s until stopped, what the processes that `pids()` names listen on, by pid's command
    name: `seen` maps "name" to every (address, port) seen."""

    def __init__(self, pids: Callable[[], list[int]], every: float = 0.2) -> None:
        self.pids, self.every = pids, every
        self.seen: dict[str, set[tuple[str, int]]] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopped.wait(self.every):
            for pid in self.pids():
                try:
                    name = Path(f"/proc/{pid}/comm").read_text().strip()
                except OSError:
                    continue
                self.seen.setdefault(name, set()).update(tcp_listeners(pid))

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)
