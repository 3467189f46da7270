"""What a job's or a server's processes on a node have used, from the node's cgroups: the stand-in's source
(portal/gpus/standin.py).

Slurm (proctrack/cgroup, cgroup v1) puts each job's processes under
`<freezer>/slurm_<node>/uid_<uid>/job_<id>/` (its steps, and what a job makes below them); the kubelet puts a pod's
under a `pod<uid>` directory of its QoS class, below its cgroup root (`<pids>/<node>/kubepods/besteffort/pod<uid>`
in the Kubernetes box; the systemd driver's `kubepods-besteffort-pod<uid with _>.slice`), in the hierarchies it
manages (pids among them; not freezer, which only runc's containers below it join). Root makes those directories;
a job can move its processes only within its own. Each process's CPU time (user + system, and its waited-for
children's) and resident memory come from /proc: a process in the cgroup that ends takes its time with it, which the
stand-in reads as its holder's processes replaced (unknown for one reading), never as work.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from portal.gpus.standin import Use

FREEZER = Path("/sys/fs/cgroup/freezer")
PIDS = Path("/sys/fs/cgroup/pids")
PROC = Path("/proc")
MAX_PIDS = 65536  # what one holder's cgroups may list before the rest is left out
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def slurm_job_dirs(node: str, job_id: str, freezer: Path = FREEZER) -> list[Path]:
    """The job's cgroup on this node (one per uid it could be under: one in practice); none when it has none."""
    if not job_id.isdigit() or not node.replace("-", "").replace(".", "").isalnum():
        return []
    return sorted((freezer / f"slurm_{node}").glob(f"uid_*/job_{job_id}"))


def pod_dirs(pod_uid: str, root: Path = PIDS) -> list[Path]:
    """The pod's cgroup, whichever driver the kubelet has (cgroupfs: pod<uid>; systemd: pod<uid with _>.slice)."""
    if not pod_uid.replace("-", "").isalnum():
        return []
    names = (f"pod{pod_uid}", f"*pod{pod_uid.replace('-', '_')}.slice")
    return sorted({path for name in names for depth in ("*/", "*/*/", "*/*/*/") for path in root.glob(depth + name)})


def holder_dirs(node: str, holder: str, pods: Iterable[str], freezer: Path = FREEZER,
                pids: Path = PIDS) -> list[Path]:
    """A holder's cgroups on this node: its pods' where the scheduler named them (Kubernetes), else its Slurm job's."""
    pods = tuple(pods)
    return [path for uid in pods for path in pod_dirs(uid, pids)] if pods else slurm_job_dirs(node, holder, freezer)


def use_of(dirs: Iterable[Path], proc: Path = PROC) -> Use | None:
    """The CPU seconds and resident memory of every process in `dirs` and below; None when there is no such
    cgroup (the holder is gone, or is not on this node)."""
    dirs = list(dirs)
    if not dirs:
        return None
    cpu_ticks = resident_pages = 0
    for pid in _pids(dirs):
        ticks, pages = _process(proc / str(pid))
        cpu_ticks += ticks
        resident_pages += pages
    return Use(cpu_s=cpu_ticks / TICKS, memory_bytes=resident_pages * PAGE)


def _pids(dirs: list[Path]) -> set[int]:
    pids: set[int] = set()
    for top in dirs:
        for folder, _, files in os.walk(top):  # no links to follow in cgroupfs
            if "cgroup.procs" in files and len(pids) < MAX_PIDS:
                pids.update(_numbers(Path(folder) / "cgroup.procs"))
    return set(sorted(pids)[:MAX_PIDS])


def _numbers(path: Path) -> list[int]:
    try:
        return [int(word) for word in path.read_text().split() if word.isdigit()]
    except OSError:  # the cgroup went while it was read
        return []


def _process(folder: Path) -> tuple[int, int]:
    """Its CPU ticks (utime, stime, cutime, cstime) and resident pages; (0, 0) once it has ended."""
    try:
        stat = (folder / "stat").read_text()
        statm = (folder / "statm").read_text().split()
    except OSError:
        return 0, 0
    fields = stat.rpartition(")")[2].split()  # after the command's name, which may hold spaces and parentheses
    try:
        return sum(int(fields[i]) for i in (11, 12, 13, 14)), int(statm[1])
    except (IndexError, ValueError):
        return 0, 0
