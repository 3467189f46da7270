"""How many CPUs a training process may use: its affinity, and no more than its scheduler gave it.

A worker sized by its affinity alone (TensorFlow's thread pools) runs as many threads as the node has CPUs, which
is what it was given only where the scheduler binds tasks to their CPUs. A Kubernetes pod's CPU limit is a CFS
quota, and its affinity is every CPU of the node: on the 2-core box each 1-CPU worker ran twice the threads its
limit lets run and the kernel throttled them for the rest of every 100 ms period (issue 43: 0.93 of Slurm's
images/s for the same job). A Slurm without task binding (the box's) leaves the affinity whole too, and two 1-CPU
workers on a node each ran threads for all of its CPUs. So the count is capped by the cgroup's quota, read as the
container sees it (cgroup v2's `cpu.max`, or v1's `cpu/cpu.cfs_quota_us` and `cpu.cfs_period_us`), and by Slurm's
`SLURM_CPUS_PER_TASK` (srun's --cpus-per-task); neither (unlimited, unset, not readable) leaves the affinity.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def usable_cores(root: Path = CGROUP, environ: Mapping[str, str] = os.environ) -> int:
    """The CPUs this process may keep busy: its affinity, capped by its cgroup's quota rounded up and by Slurm's
    CPUs per task; at least 1."""
    cores = len(os.sched_getaffinity(0))
    quota = cpu_quota(root)
    if quota:
        cores = min(cores, math.ceil(quota))
    per_task = environ.get("SLURM_CPUS_PER_TASK", "")
    if per_task.isdigit() and int(per_task) > 0:
        cores = min(cores, int(per_task))
    return max(1, cores)


def cpu_quota(root: Path = CGROUP) -> float | None:
    """The cgroup's CPU limit in CPUs (quota / period), or None where there is none."""
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return _ratio(quota, period)
    quota, period = _read(root / "cpu" / "cpu.cfs_quota_us"), _read(root / "cpu" / "cpu.cfs_period_us")
    return _ratio(quota, period) if quota is not None and period is not None else None


def _ratio(quota: str, period: str) -> float | None:
    try:
        value, every = int(quota), int(period)
    except ValueError:  # "max": no limit (cgroup v2)
        return None
    return value / every if value > 0 and every > 0 else None  # -1: no limit (cgroup v1)


def _read(path: Path) -> str | None:
    try:
        with open(path, encoding="ascii") as kernel_file:  # a kernel's file, a line long
            return kernel_file.read(64).strip()
    except (OSError, UnicodeDecodeError):
        return None
