"""The dashboard's usage panel (portal.service.gpu_usage): GPUs held against each quota from the shared snapshot,
this week's GPU-hours from accounting, read at most once per interval and never waited for by the jobs page."""

from __future__ import annotations

import time

from portal import jobs as jobs_api
from portal.config import PortalConfig
from portal.gpus import readings_dir
from portal.gpus.agent import write
from portal.gpus.ledger import Ledger
from portal.gpus.readings import GpuReading, NodeReading
from portal.scheduler.snapshot import ClusterCache, ClusterSnapshot
from portal.service.board import USAGE_RETRY_S, JobBoard, Refresher
from portal.service.hub_user import HubUser
from tests.unit.helpers import API_LIMITS, CountingAPI, slurm_cache, squeue_free


class UsageAPI(CountingAPI):
    def __init__(self, tmp, down: bool = False):
        super().__init__(tmp)
        self.down, self.usage_asked = down, []

    def usage(self, user, groups, cfg, everyone):
        from datetime import datetime

        from portal.scheduler.slurm.errors import SlurmError
        from portal.scheduler.slurm.json_answers import read_sacct
        from portal.scheduler.slurm.usage import usage_report
        from tests.slurm_answers import sacct_json, sacct_run
        self.usage_asked.append((user, everyone))
        if self.down:
            raise SlurmError("sacct: error: Problem talking to the database: Connection refused")
        answer = sacct_json(sacct_run(7, "alice", "RUNNING", datetime(2026, 11, 22, 19), None, gpus=2))
        return usage_report(read_sacct(answer), datetime(2026, 11, 22, 20, 0))


def test_usage_shows_what_holds_the_quota_and_this_weeks_gpu_hours_once_per_interval(tmp_path):
    now = [0.0]
    api = UsageAPI(tmp_path)
    board = JobBoard(PortalConfig(), slurm_cache(PortalConfig(), squeue_free, clock=lambda: now[0]),
                     api=api, clock=lambda: now[0])
    alice = HubUser("alice", ("gpu-users",))
    usage = board.usage(alice)
    assert usage["quotas"] == [{"user": "alice", "gpu_quota": 4, "gpus_in_use": 2, "holders": [
        {"job_id": "7", "name": "chexnet", "state": "RUNNING", "gpus": 2, "reason": ""}]}]
    assert (usage["history_unavailable"], usage["gpu_hours"]) == ("", 2.0)
    board.usage(alice)
    now[0] = 31
    board.usage(alice)
    assert api.usage_asked == [("alice", False), ("alice", False)]  # sacct at most once per 30 s
    admin = HubUser("admin", ("portal-admins",), admin=True)
    everyone = board.usage(admin, [admin, alice, HubUser("bob", ("datascientists",))])
    assert [q["user"] for q in everyone["quotas"]] == ["admin", "alice", "bob"] and api.usage_asked[-1][1]


def test_usage_says_history_is_unavailable_when_accounting_is_down(tmp_path):
    api = UsageAPI(tmp_path, down=True)
    board = JobBoard(PortalConfig(), slurm_cache(PortalConfig(), squeue_free), api=api)
    usage = board.usage(HubUser("alice", ("gpu-users",)))
    assert usage["quotas"][0]["gpus_in_use"] == 2  # from squeue: slurmctld still answers
    assert usage["history_unavailable"].startswith("GPU-hours are unavailable: they come from Slurm's accounting")
    assert "Connection refused" in usage["history_unavailable"] and "jobs" not in usage


def test_the_jobs_page_never_waits_for_accounting_and_shows_what_it_read_last(tmp_path):
    now = [0.0]
    api = UsageAPI(tmp_path)
    held: list = []
    board = JobBoard(PortalConfig(), slurm_cache(PortalConfig(), squeue_free, clock=lambda: now[0]),
                     api=api, clock=lambda: now[0], refresher=Refresher(execute=held.append))
    alice = HubUser("alice", ("gpu-users",))
    first = board.known_usage(alice)
    assert (first["gpu_hours"], first["history_unavailable"], api.usage_asked) == (None, "", [])
    assert first["quotas"][0]["gpus_in_use"] == 2 and len(held) == 1  # the quota at once, from squeue
    board.known_usage(alice)
    assert len(held) == 1  # one read in flight
    held.pop()()
    assert board.known_usage(alice)["gpu_hours"] == 2.0 and not held
    now[0] = 31  # stale: shown while it is read again
    assert board.known_usage(alice)["gpu_hours"] == 2.0 and len(held) == 1
    assert board.usage(alice)["gpu_hours"] == 2.0  # the usage page reads it now...
    assert api.usage_asked == [("alice", False), ("alice", False)]


def test_accounting_down_is_said_and_not_asked_again_at_every_request(tmp_path):
    now = [0.0]
    api = UsageAPI(tmp_path, down=True)
    board = JobBoard(PortalConfig(), slurm_cache(PortalConfig(), squeue_free, clock=lambda: now[0]),
                     api=api, clock=lambda: now[0], refresher=Refresher(execute=lambda task: task()))
    alice = HubUser("alice", ("gpu-users",))
    board.known_usage(alice)  # read in the "background" (inline here)
    shown = board.known_usage(alice)
    assert "slurmdbd" in shown["history_unavailable"] and shown.get("gpu_hours") is None
    board.usage(alice)
    assert len(api.usage_asked) == 1
    now[0] = USAGE_RETRY_S
    board.usage(alice)
    assert len(api.usage_asked) == 2


def test_off_slurm_usage_says_there_is_no_accounting_without_blaming_slurmdbd(tmp_path):
    cfg = PortalConfig(scheduler="kubernetes")
    api = UsageAPI(tmp_path)
    api.usage = lambda user, groups, cfg, everyone: jobs_api.usage(user=user, groups=groups, cfg=cfg)
    board = JobBoard(cfg, ClusterCache(cfg, read=lambda: ClusterSnapshot(taken_at=0.0)), api=api)  # no pods held
    why = board.usage(HubUser("alice", ("gpu-users",)))["history_unavailable"]
    assert why == ("GPU-hours are not counted here: they come from Slurm's accounting, and this portal runs jobs "
                   "on kubernetes.")


def test_a_submit_and_its_form_weigh_the_weekly_budget_against_the_usage_report_the_board_keeps(tmp_path):
    cfg = PortalConfig(gpu_hours_budget={"gpu-users": 10})
    api = UsageAPI(tmp_path)
    board = JobBoard(cfg, slurm_cache(cfg, squeue_free), api=api)
    alice = HubUser("alice", ("gpu-users",))
    budget = board.limits(alice).budget
    assert budget is not None and (budget.limit, budget.used) == (10, 2.0)  # her running job's 2 GPU-hours
    running = board.cluster.snapshot().queue  # squeue_free's: her 2-GPU job of a week's time limit, running
    assert budget.ahead_minutes == sum(job.gpu_minutes_ahead for job in running.values() if job.user == "alice") > 0
    assert budget.words().startswith("0 of your weekly 10 GPU-hours left (2 used since Sunday ")  # held ahead
    board.submit(alice, {"template": "chexnet", "gpus_per_node": 1})
    assert api.limits_given[-1].budget == budget and len(api.usage_asked) == 1  # the report read once, kept
    assert board.limits(HubUser("bob", ("datascientists",))).budget is None  # no budget for bob's groups
    down = JobBoard(cfg, slurm_cache(cfg, squeue_free), api=UsageAPI(tmp_path, down=True))
    unknown = down.limits(alice).budget
    assert unknown is not None and unknown.used is None and "Connection refused" in unknown.unknown_why


def test_without_accounting_the_budget_is_weighed_against_the_gpu_watchs_count_of_the_week(tmp_path):
    cfg = PortalConfig(scheduler="kubernetes", state_dir=tmp_path, gpu_hours_budget={"gpu-users": 10})
    api = UsageAPI(tmp_path)
    api.usage = lambda user, groups, cfg, everyone: jobs_api.usage(user=user, groups=groups, cfg=cfg)
    board = JobBoard(cfg, ClusterCache(cfg, read=lambda: ClusterSnapshot(taken_at=0.0)), api=api)
    alice = HubUser("alice", ("gpu-users",))
    unknown = board.budgeted(alice, API_LIMITS).budget  # no ledger: no GPU watch counts here
    assert unknown is not None and unknown.used is None and "Slurm's accounting" in unknown.unknown_why
    now = time.time()
    readings_dir(cfg).mkdir(mode=0o700)
    write(readings_dir(cfg), NodeReading("node1", now, 1800.0, "standin",
                                         (GpuReading(0, busy=0.0, holder="k8s-1", user="alice"),)))
    Ledger(readings_dir(cfg)).count(now)  # the watch's pass: one GPU held for half an hour
    fresh = JobBoard(cfg, ClusterCache(cfg, read=lambda: ClusterSnapshot(taken_at=0.0)), api=api)
    assert fresh.budgeted(alice, API_LIMITS).budget.used == 0.5
