"""A worker's CPUs: its affinity, capped by its cgroup's CPU quota (a Kubernetes pod's limit), as the container sees
the cgroup file system (v1 and v2); no quota leaves the affinity (issue 43)."""

from __future__ import annotations

import os

import pytest

from programkit.cpus import cpu_quota, usable_cores

AFFINITY = len(os.sched_getaffinity(0))


def v1(root, quota: str, period: str = "100000"):
    (root / "cpu").mkdir(parents=True)
    (root / "cpu" / "cpu.cfs_quota_us").write_text(quota + "\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text(period + "\n")
    return root


@pytest.mark.parametrize(("line", "cpus"), [("100000 100000", 1.0), ("150000 100000", 1.5), ("max 100000", None),
                                           ("garbage", None), ("0 100000", None)])
def test_cgroup_v2_cpu_max(tmp_path, line, cpus):
    (tmp_path / "cpu.max").write_text(line + "\n")
    assert cpu_quota(tmp_path) == cpus


@pytest.mark.parametrize(("quota", "cpus"), [("100000", 1.0), ("50000", 0.5), ("-1", None)])
def test_cgroup_v1_cfs_quota(tmp_path, quota, cpus):
    assert cpu_quota(v1(tmp_path, quota)) == cpus


def test_no_cgroup_files_no_quota(tmp_path):
    assert cpu_quota(tmp_path) is None and usable_cores(tmp_path, {}) == AFFINITY


def test_a_quota_caps_the_affinity_rounded_up_and_never_below_one(tmp_path):
    assert usable_cores(v1(tmp_path / "one", "100000"), {}) == 1
    assert usable_cores(v1(tmp_path / "half", "50000"), {}) == 1
    assert usable_cores(v1(tmp_path / "many", str(100000 * (AFFINITY + 8))), {}) == AFFINITY  # the affinity caps
    if AFFINITY >= 2:
        assert usable_cores(v1(tmp_path / "oneandhalf", "150000"), {}) == 2


def test_slurms_cpus_per_task_caps_too_where_slurm_does_not_bind_tasks(tmp_path):
    assert usable_cores(tmp_path, {"SLURM_CPUS_PER_TASK": "1"}) == 1
    assert usable_cores(tmp_path, {"SLURM_CPUS_PER_TASK": str(AFFINITY + 4)}) == AFFINITY
    assert usable_cores(tmp_path, {"SLURM_CPUS_PER_TASK": "x"}) == AFFINITY == usable_cores(tmp_path, {})
    assert usable_cores(v1(tmp_path / "both", "200000"), {"SLURM_CPUS_PER_TASK": "1"}) == 1
