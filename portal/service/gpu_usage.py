"""The dashboard's usage panel: GPUs held now against each quota, from the shared cluster snapshot, and this
week's GPU-hours from the scheduler's accounting (Slurm's sacct, as the user), read at most every USAGE_REFRESH_S
per user and never waited for by the jobs page (`known_usage`); an admin's usage of everyone waits for accounting
at most a view's part deadline (portal.service.parts), then shows the last report, marked stale, or says it is
being read. The same report says what is left of a user's weekly GPU-hours budget at submit (`budgeted`). A part of
portal.service.board.JobBoard.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from portal import jobs as jobs_api
from portal.gpus import readings_dir
from portal.gpus.ledger import Ledger
from portal.jobs import SchedulerError
from portal.jobs.budget import budget_of
from portal.service.summary import quota_of

if TYPE_CHECKING:
    from portal.config import PortalConfig
    from portal.records.limits import JobLimits
    from portal.scheduler.protocol import Scheduler
    from portal.scheduler.snapshot import ClusterCache
    from portal.service.background import Refresher, TimedCache
    from portal.service.hub_user import HubUser
    from portal.service.parts import UserParts

USAGE_REFRESH_S = 30.0  # sacct (slurmdbd) is asked at most this often per user, and per admin view
USAGE_RETRY_S = 10.0  # ... and after it failed, asked again no sooner than this


class UsageViews:
    """JobBoard's usage methods, over its settings, snapshot cache, jobs API, scheduler and caches."""

    cfg: PortalConfig
    cluster: ClusterCache
    api: Any
    scheduler: Scheduler[Any]
    _refresher: Refresher
    _usage: TimedCache
    _usage_failed: TimedCache
    _parts: UserParts
    part_deadline_s: float

    def usage(self, user: HubUser, everyone: Sequence[HubUser] = ()) -> dict[str, Any]:
        """GPUs held now against each quota (from the shared squeue answer) and this week's GPU-hours per job
        (Slurm accounting): the user's own, or everyone's for an admin. When accounting does not answer, the
        quotas are still shown and `history_unavailable` says why."""
        key = self._usage_key(user)
        report = self._usage.get(key) or self._usage_failed.get(key)
        if report is None and user.admin:  # everyone's: a view of several users answers within its bound
            report = self._everyones_usage(user)
        return {**self._quotas(user, everyone), **(report or self._read_usage(user))}

    def _everyones_usage(self, user: HubUser) -> dict[str, Any]:
        """An admin's report, waited for at most `part_deadline_s` (read as a part of the admin's own): when late,
        the last one with `history_stale` saying how old, or none yet with `history_unavailable` saying so."""
        key = self._usage_key(user)
        part = self._parts.gather({user.name: (("usage", *key), lambda: self._read_usage(user))},
                                  self.part_deadline_s, keep=False)[user.name]
        if part.fresh:
            return part.value or {}
        last = self._usage.get_any(key)
        if last is not None:
            return {**last, "history_stale": f"as read earlier: Slurm's accounting did not answer now ({part.late})"}
        return {"gpu_hours": None, "history_unavailable": (
            f"GPU-hours are being read from Slurm's accounting, which did not answer in time ({part.late}); they "
            "are shown once it has: reload the page in a moment.")}

    def budgeted(self, user: HubUser, limits: JobLimits) -> JobLimits:
        """`limits` with the user's weekly GPU-hours budget (portal.jobs.budget) and their use of it this week from
        the report `usage` keeps (read now, as the user, where none is kept; an admin's report of everyone holds
        theirs too), else from the GPU watch's ledger (portal.gpus.ledger: Kubernetes). With neither, the whole
        budget, and the words say why."""
        limit = self.cfg.gpu_hours_budget_for(user.groups)
        if not limit:
            return limits
        key = self._usage_key(user)
        report = self._usage.get(key) or self._usage_failed.get(key) or self._read_usage(user)
        # no report from accounting (Kubernetes keeps none): the GPU watch's count of the week, where it keeps one
        per_user = report.get("per_user")
        if not isinstance(per_user, dict):
            per_user = Ledger.week_held_by(readings_dir(self.cfg), time.time())
        why = report.get("history_unavailable") or "accounting did not answer"
        return replace(limits, budget=budget_of(limit, per_user, user.name, datetime.now(), why,
                                                limits.gpu_minutes_ahead))

    def known_usage(self, user: HubUser, everyone: Sequence[HubUser] = ()) -> dict[str, Any]:
        """`usage` without waiting for accounting (the jobs page): the quotas at once, from the shared squeue
        answer; this week's GPU-hours as known, a missing or stale report read in the background. Until one
        has been read, `gpu_hours` is None and `history_unavailable` "" (the page says it is being read)."""
        key = self._usage_key(user)
        report = self._usage.get(key) or self._usage_failed.get(key)
        if report is None:
            self._refresher.start(("usage", *key), lambda: self._read_usage(user))
            report = self._usage.get_any(key) or {"history_unavailable": "", "gpu_hours": None}  # stale: shown
        return {**self._quotas(user, everyone), **report}

    @staticmethod
    def _usage_key(user: HubUser) -> tuple[str, ...]:
        return ("everyone",) if user.admin else ("user", user.name)

    def _quotas(self, user: HubUser, everyone: Sequence[HubUser]) -> dict[str, Any]:
        snapshot = self.cluster.snapshot()
        people = [user, *(u for u in everyone if u.name != user.name)] if user.admin else [user]
        return {"user": user.name, "quotas": [quota_of(u.name, self.cfg.gpu_quota_for(u.groups), snapshot)
                                              for u in people]}

    def _read_usage(self, user: HubUser) -> dict[str, Any]:
        """This week's report from accounting, kept USAGE_REFRESH_S; when there is none, why (kept
        USAGE_RETRY_S, so a slurmdbd that does not answer is not asked, and waited for, at every request)."""
        key = self._usage_key(user)
        try:
            found = self.api.usage(user=user.name, groups=user.groups, cfg=self.cfg, everyone=user.admin)
        except jobs_api.NoAccounting:  # there is no accounting to wait for, now or later
            return self._usage_failed.put(key, {"gpu_hours": None, "history_unavailable": (
                f"GPU-hours are not counted here: they come from Slurm's accounting, and this portal runs jobs "
                f"on {self.scheduler.name}.")}, final=True)
        except SchedulerError as err:
            return self._usage_failed.put(key, {"gpu_hours": None, "history_unavailable": (
                f"GPU-hours are unavailable: they come from Slurm's accounting (slurmdbd), which does not "
                f"answer now ({err}). Jobs and servers run as usual; nothing is lost.")})
        return self._usage.put(key, {"history_unavailable": "", **found.to_dict()})
