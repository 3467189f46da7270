import pytest

from portal.config import PortalConfig, load
from portal.config_gpus import most_lenient
from portal.config_values import ConfigError


@pytest.mark.parametrize(("groups", "expected"), [
    ([], 30),  # in none of the groups: the default
    (["students"], 20),
    (["students", "gpu-users"], 45),  # the longest of a member's groups
    (["students", "unwatched"], 0),  # 0 (never) is the most lenient of all
])
def test_a_member_of_several_groups_gets_the_most_lenient_value(groups, expected):
    values = {"students": 20, "gpu-users": 45, "unwatched": 0}
    assert most_lenient(values, 30, groups) == expected


def test_idle_seconds_are_read_per_group_with_their_default():
    cfg = load(env={"DSPORTAL_GPU_IDLE_S": "students=10"})
    assert cfg.gpu_idle_s_for(["students"]) == 10 and cfg.gpu_idle_s_for(["staff"]) == 1800
    defaults = PortalConfig()
    assert (defaults.gpu_idle_grace_s, defaults.gpu_idle_stop_jobs) == (3600, False)


def test_the_weekly_gpu_hours_budget_is_read_per_group_none_by_default_and_never_below_zero():
    cfg = load(env={"DSPORTAL_GPU_HOURS_BUDGET": "students=40,unlimited=0", "DSPORTAL_DEFAULT_GPU_HOURS_BUDGET": "10"})
    assert cfg.gpu_hours_budget_for(["students"]) == 40 and cfg.gpu_hours_budget_for(["staff"]) == 10
    assert cfg.gpu_hours_budget_for(["students", "unlimited"]) == 0  # 0: no budget, the most lenient
    assert PortalConfig().gpu_hours_budget_for(["students"]) == 0  # no budget unless the site sets one
    with pytest.raises(ConfigError, match=r"gpu_hours_budget\[students\] is -1; allowed: 0 or more"):
        load(env={"DSPORTAL_GPU_HOURS_BUDGET": "students=-1"})
