"""The GPU quota's rule, arithmetic and wording (portal.quota), as the spawn form and the jobs use them."""

from dataclasses import replace

from portal.config import PortalConfig
from portal.quota import GpuHolder, GpuQuota, quota_for, quota_group

QUOTAS = {"gpu-users": 4, "gpu-power": 8, "gpu-b": 8}


def test_the_largest_quota_among_the_users_groups_applies_else_the_default():
    assert quota_for(QUOTAS, 0, ["datascientists", "gpu-users", "gpu-power"]) == 8
    assert quota_for(QUOTAS, 0, ["datascientists"]) == 0
    assert quota_for(QUOTAS, 2, []) == 2
    assert PortalConfig(gpu_quota=QUOTAS, default_gpu_quota=1).gpu_quota_for(["gpu-users"]) == 4


def test_the_group_that_gives_the_quota_is_the_largest_then_alphabetical():
    assert quota_group(QUOTAS, ["gpu-users", "gpu-power", "gpu-b"]) == "gpu-b"
    assert quota_group(QUOTAS, ["gpu-users"]) == "gpu-users"
    assert quota_group(QUOTAS, ["datascientists"]) is None


def test_server_and_jobs_count_together_and_what_is_left_is_never_negative():
    quota = GpuQuota(4, ("gpu-users",), (GpuHolder("3", 1, server=True), GpuHolder("12", 2)))
    assert (quota.in_use, quota.left, quota.described()) == (3, 1, ("your server", "job 12"))
    assert GpuQuota(4, holders=(GpuHolder("7", 6),)).left == 0


def test_jobs_submitted_since_the_snapshot_are_added_and_those_without_gpus_are_not():
    quota = GpuQuota(4, holders=(GpuHolder("7", 2),)).with_submitted([("8", 2), ("9", 0)])
    assert (quota.in_use, quota.left, quota.holders_text()) == (4, 0, "job 7, job 8")


def test_the_words_name_the_quota_the_groups_and_what_is_held():
    assert GpuQuota(4, ("a", "b")).note(" for all nodes together") == \
        " (your GPU quota is 4 for all nodes together; your groups: a, b)"
    assert GpuQuota(0).note() == " (your GPU quota is 0; your groups: none)"
    assert GpuQuota(4, holders=(GpuHolder("7", 3),)).held() == "you use 3 of your 4 GPUs"
    assert GpuQuota(4, holders=(GpuHolder("7", 5),)).held() == \
        "your jobs and server hold or wait for 5 GPUs, more than your quota of 4"


def test_the_notebooks_still_read_the_quota_off_the_jobs_limits():
    """notebooks/02 and 04 (and a user's older copy of them) read gpu_quota and gpus_in_use from jobs.limits()."""
    from tests.unit.helpers import SPEC_LIMITS as LIMITS

    busy = replace(LIMITS, quota=replace(LIMITS.quota, holders=(GpuHolder("7", 3),)))
    assert (busy.gpu_quota, busy.gpus_in_use, busy.gpus_left, busy.max_gpus_per_node) == (4, 3, 1, 1)
