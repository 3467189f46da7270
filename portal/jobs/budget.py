"""The weekly GPU-hours budget at submit (portal.records.budget, docs/gpus.md): what is left of it, from the
scheduler's accounting, and the check that refuses a request that can cost more.

Every submit goes through `check`: the notebooks' and the command line's with the budget `budgeted` reads here (as
the user: Slurm's sacct), the dashboard's with its own (portal.service.gpu_usage, from its cached usage report).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from portal.config import PortalConfig
from portal.errors import SchedulerError
from portal.inputs import minutes_of
from portal.records.budget import BUDGET_FIELD, GpuBudget
from portal.records.limits import JobLimits
from portal.records.spec import JobSpec, JobSpecError
from portal.records.sweep import SweepPlan
from portal.scheduler.usage import week_start

log = logging.getLogger("portal.jobs")


def week_words(now: datetime) -> str:
    """When the budget's week began, as the form says it: "Sunday 29 November 00:00"."""
    start = week_start(now)
    return f"{start:%A} {start.day} {start:%B %H:%M}"


def budget_of(limit: int, per_user: Mapping[str, Any] | None, user: str, now: datetime,
              unknown_why: str = "", ahead_minutes: int = 0) -> GpuBudget:
    """A budget of `limit` GPU-hours with `user`'s use this week from GPU-hours per user this week (a usage
    report's `per_user`; None: unknown, `unknown_why` saying why), charged ahead with `ahead_minutes`
    (JobLimits.gpu_minutes_ahead: what their queued and running jobs and servers may still hold)."""
    if per_user is None:
        return GpuBudget(limit, None, week_words(now), unknown_why or "no accounting", ahead_minutes)
    used = per_user.get(user, 0.0)
    return GpuBudget(limit, float(used) if isinstance(used, (int, float)) else None, week_words(now),
                     "" if isinstance(used, (int, float)) else "the accounting's answer was not a number",
                     ahead_minutes)


def budgeted(cfg: PortalConfig, scheduler: Any, who: Any, limits: JobLimits, now: datetime | None = None) -> JobLimits:
    """`limits` with the user's weekly budget and their use of it this week from the scheduler's accounting, where
    their groups have a budget and `limits` has none yet (the dashboard brings its own)."""
    limit = cfg.gpu_hours_budget_for(who.groups)
    if not limit or limits.budget is not None:
        return limits
    now = now or datetime.now()
    try:
        per_user, why = scheduler.usage(who, False, now).per_user, ""
    except SchedulerError as err:  # NoAccounting too: weighed against the whole budget, and the words say so
        per_user, why = None, str(err)
        log.info("budget of %s: this week's use unknown (%s)", who.name, why)
    return replace(limits, budget=budget_of(limit, per_user, who.name, now, why, limits.gpu_minutes_ahead))


def check(limits: JobLimits, spec: JobSpec, plan: SweepPlan | None) -> None:
    """Refuse (JobSpecError naming time_limit, with the arithmetic) a job or sweep that can cost more GPU-hours than
    are left of the user's week."""
    if limits.budget is None:
        return
    refusal = limits.budget.refusal(spec.nodes, spec.gpus_per_node, minutes_of(spec.time_limit),
                                    plan.trials if plan is not None else None)
    if refusal:
        raise JobSpecError(BUDGET_FIELD, refusal)
