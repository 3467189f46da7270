"""The weekly GPU-hours budget at submit (portal.jobs.budget): what is left, from the scheduler's accounting as the
user, and a submit that could cost more refused with the arithmetic before anything is submitted."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from portal import jobs
from portal.config import PortalConfig
from portal.jobs.budget import budgeted, week_words
from portal.records.budget import GpuBudget
from portal.scheduler.errors import NoAccounting
from portal.scheduler.usage import UsageReport
from tests.unit.helpers import SPEC_LIMITS

NOW = datetime(2026, 12, 2, 15, 30)  # a Wednesday
CFG = PortalConfig(gpu_hours_budget={"students": 40})


class Person:
    name, groups = "alice", ("students",)


class Accounting:
    """A scheduler's accounting as `budgeted` asks it (Scheduler.usage): a report, or why there is none."""

    def __init__(self, used: dict[str, float] | None, why: str = ""):
        self.used, self.why, self.asked = used, why, []

    def usage(self, user, everyone, now):
        self.asked.append((user.name, everyone, now))
        if self.used is None:
            raise NoAccounting(self.why)
        return UsageReport(datetime(2026, 11, 29), per_user=self.used)


def test_the_budget_left_is_read_from_the_schedulers_accounting_as_the_user_only_where_a_group_has_one():
    accounting = Accounting({"alice": 34.5, "bob": 3.0})
    limits = budgeted(CFG, accounting, Person(), SPEC_LIMITS, NOW)
    assert limits.budget == GpuBudget(40, 34.5, "Sunday 29 November 00:00")
    assert accounting.asked == [("alice", False, NOW)]  # her own report, not everyone's
    assert budgeted(PortalConfig(), accounting, Person(), SPEC_LIMITS, NOW) is SPEC_LIMITS  # no budget: not asked
    given = replace(SPEC_LIMITS, budget=GpuBudget(40, 1.0))
    assert budgeted(CFG, accounting, Person(), given, NOW) is given  # the dashboard brought its own
    assert len(accounting.asked) == 1
    unknown = budgeted(CFG, Accounting(None, "no accounting on kubernetes"), Person(), SPEC_LIMITS, NOW).budget
    assert unknown == GpuBudget(40, None, "Sunday 29 November 00:00", "no accounting on kubernetes")
    queued = budgeted(CFG, accounting, Person(), replace(SPEC_LIMITS, gpu_minutes_ahead=90), NOW).budget
    assert queued is not None and queued.ahead_minutes == 90  # what the scheduler's limits found queued, ahead
    assert week_words(datetime(2026, 11, 29, 0, 0)) == "Sunday 29 November 00:00"  # its own week


def test_a_submit_that_could_cost_more_than_is_left_is_refused_naming_time_limit_before_anything_runs(tmp_path):
    limits = replace(SPEC_LIMITS, default_data_dir=str(tmp_path), budget=GpuBudget(40, 34.5, "Sunday"))
    spec = {"template": "chexnet", "nodes": 2, "gpus_per_node": 2, "time_limit": "04:00:00", "data_dir": str(tmp_path)}
    with pytest.raises(jobs.JobSpecError, match=r"^time_limit: this job can cost up to 16 GPU-hours \(2 nodes x 2 "
                                                r"GPUs x 4 h\), more than 5.5 of your weekly 40 GPU-hours left") as err:
        jobs.submit(spec, scheduler="local", cfg=PortalConfig(state_dir=tmp_path), limits=limits)
    assert err.value.field == "time_limit" and not (tmp_path / "jobs").exists()
    sweep = {**spec, "nodes": 1, "gpus_per_node": 1, "time_limit": "01:00:00",
             "sweep": {"trials": 8, "space": {"lr": {"low": 0.0001, "high": 0.01, "log": True}}}}
    with pytest.raises(jobs.JobSpecError, match=r"this sweep can cost up to 8 GPU-hours \(1 node x 1 GPU x 1 h x 8 "
                                                r"trials\)"):
        jobs.submit(sweep, scheduler="slurm", cfg=PortalConfig(state_dir=tmp_path), limits=limits)
