"""The load benchmark's pure parts: percentiles, tables, counter differences, the target check."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from bench import dashboard, dashboard_users
from bench.common import counts_delta
from bench.dashboard import (
    Run,
    Samples,
    cpu_of,
    each_period,
    percentile,
    squeue_allowed,
    start_offset,
    table,
    targets_of,
)
from bench.dashboard_users import bench_users, pages


def test_percentile_is_a_measured_value_by_nearest_rank():
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50.0, 99.0, 100.0)
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([7.0], 0) == 7.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="allowed: 0-100"):
        percentile([1.0], 101)


def test_one_slow_request_in_a_hundred_is_the_p99():
    values = [10.0] * 99 + [900.0]
    assert percentile(values, 99) == 10.0 and percentile(values, 100) == 900.0
    assert percentile([10.0] * 98 + [900.0] * 2, 99) == 900.0


def test_table_pads_columns():
    assert table(["a", "bb"], [[1, 22222]]).split("\n") == ["| a | bb    |", "|---|-------|", "| 1 | 22222 |"]


def test_counts_delta_keeps_what_changed():
    assert counts_delta({"sacct": 2, "scontrol": 5}, {"sacct": 2, "scontrol": 9, "scancel": 3}) == \
        {"scancel": 3, "scontrol": 4}


def test_targets_name_each_read_errors_and_squeue():
    fast = {"jobs page": Samples(latencies_ms=[5.0] * 100), "submit": Samples(latencies_ms=[900.0])}
    assert [t.met for t in targets_of(fast, 31, 60, 2)] == [True, True, True]
    slow = {"jobs page": Samples(latencies_ms=[300.0] * 100, errors=2), "submit": Samples()}
    targets = targets_of(slow, 120, 60, 2)
    assert [t.met for t in targets] == [False, False, False]
    assert (targets[0].name, targets[0].measured, targets[1].measured) == ("p99 of jobs page (ms)", 300.0, 2)
    assert squeue_allowed(60, 2) == 31
    named = targets_of(fast, 31, 60, 2, calls_name="Kubernetes LIST nodes")
    assert named[2].name == "Kubernetes LIST nodes calls in 60 s" and named[2].target == "<= 31 (once per 2 s)"


def test_readers_start_evenly_over_one_period():
    assert [start_offset(i, 4, 5.0) for i in range(4)] == [0.0, 1.25, 2.5, 3.75]
    with pytest.raises(ValueError, match="allowed: 0-3"):
        start_offset(4, 4, 5.0)


def test_cpu_of_reads_own_and_childrens_ticks_after_the_command():
    line = "77 (python3 -m a) b) S 1 77 77 0 -1 4194560 10 0 0 0 120 30 7 3 20 0 1 0 5 0 0"
    assert cpu_of(line) == (150.0, 10.0)


def test_pages_split_names_for_the_hubs_batches():
    assert pages(["a", "b", "c"], 2) == [["a", "b"], ["c"]] and pages([], 2) == []


def test_bench_users_are_numbered():
    assert bench_users(3) == ["bench001", "bench002", "bench003"]
    assert bench_users(1000)[-1] == "bench1000"  # a smaller run's users are the first of a larger one


def test_a_slot_passed_whole_during_a_slow_action_is_skipped_not_queued():
    run = Run()
    run.started = time.monotonic()
    run.stop_at = run.started + 0.45
    starts = []

    async def slow() -> None:
        starts.append(time.monotonic() - run.started)
        await asyncio.sleep(0.25 if len(starts) == 1 else 0)  # the first takes 2.5 periods

    asyncio.run(each_period(run, 0.0, 0.1, slow))
    # Slots 0.1 and 0.2 passed while the first ran: 0.1 is skipped, 0.2 runs late (at 0.25), then 0.3 and 0.4.
    assert (len(starts), run.missed, run.late) == (4, 1, 1)
    assert 0.25 <= starts[1] < 0.29 and [round(t, 1) for t in starts[2:]] == [0.3, 0.4]


def test_the_submitters_associations_may_run_no_job(monkeypatch):
    sent = []

    def fake_slurm(cfg, command, *args):
        sent.append((command, *args))
        return "bench001\n" if args[:2] == ("-nP", "show") else ""

    monkeypatch.setattr(dashboard_users, "slurm", fake_slurm)
    assert dashboard_users.ensure_slurm_associations(None, ["bench001", "bench002"]) == 1
    adds = [c for c in sent if "add" in c]
    modifies = [c for c in sent if "modify" in c]
    assert adds == [("sacctmgr", "-i", "add", "user", "name=bench002", "account=datascientists", "maxjobs=0")]
    # the existing one too: an association made without the limit would let its jobs start
    assert modifies == [("sacctmgr", "-i", "modify", "user", "where", "name=bench001,bench002", "set", "maxjobs=0")]


def test_clear_job_dirs_removes_only_the_bench_users_jobs(monkeypatch, tmp_path):
    homes = {name: tmp_path / name for name in ("bench001", "bench002")}
    for home in homes.values():
        (home / "jobs" / "7").mkdir(parents=True)
        (home / "notes").mkdir()
    monkeypatch.setattr(dashboard_users.pwd, "getpwnam", lambda name: type("P", (), {"pw_dir": str(homes[name])}))
    assert dashboard_users.clear_job_dirs(["bench001"]) == 1
    assert not (homes["bench001"] / "jobs").exists() and (homes["bench001"] / "notes").is_dir()
    assert (homes["bench002"] / "jobs" / "7").is_dir()
    with pytest.raises(ValueError, match="not a bench user"):
        dashboard_users.clear_job_dirs(["alice"])


@pytest.mark.parametrize("argv, named", [(["--submit-every", "0"], "--submit-every"),
                                         (["--interval", "-1"], "--interval"),
                                         (["--box", "local"], "--box"),
                                         (["--users", "10", "--submitters", "11"], "--submitters")])
def test_a_bad_option_is_refused_by_name_before_anything_runs(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_:
        dashboard.main(argv)
    assert exit_.value.code == 2 and named in capsys.readouterr().err


def test_a_page_follows_the_period_its_answer_gives_and_a_p99_not_met_names_the_busiest_processes():
    run = dashboard.Run()
    run.started = time.monotonic()
    run.stop_at = run.started + 0.35
    calls: list[float] = []

    async def action() -> float:
        calls.append(time.monotonic() - run.started)
        return 0.2  # the answer's X-Poll-S: slower than the 0.05 s the page started with

    asyncio.run(dashboard.each_period(run, 0.0, 0.05, action))
    assert len(calls) == 2 and calls[1] - calls[0] == pytest.approx(0.2, abs=0.04)
    where = dashboard.busiest({"load generator": 0.1, "dashboard": 0.56, "proxy": 0.13, "dashboard's commands": 0.43,
                               "hub": 0.02}, count=3)
    assert where.endswith(": dashboard 0.56, dashboard's commands 0.43, proxy 0.13")


def test_removing_hub_users_lists_the_hubs_users_once_not_once_per_name(monkeypatch):
    listed, deleted = [], []

    async def names(session, hub_url, auth):
        listed.append(hub_url)
        return {"bench0001", "bench0003"}

    class Answer:
        status, content_type = 204, "text/plain"

        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            return False

    class Session:
        def delete(self, url, headers):
            deleted.append(url.rsplit("/", 1)[1])
            return Answer()

    monkeypatch.setattr(dashboard_users, "hub_user_names", names)
    count = asyncio.run(dashboard_users.remove_hub_users(Session(), "http://hub", "t", ["bench0001", "bench0002",
                                                                                      "bench0003"]))
    assert count == 2 and sorted(deleted) == ["bench0001", "bench0003"] and len(listed) == 1


def test_the_slurm_associations_are_listed_once_whatever_the_number_of_names(monkeypatch):
    listed, ran = [], []

    def users(cfg):
        listed.append(cfg)
        return {"bench001"}

    monkeypatch.setattr(dashboard_users, "slurm_users", users)
    monkeypatch.setattr(dashboard_users, "sacctmgr", lambda cfg, *args: ran.append(args) or "")
    names = bench_users(300)
    assert dashboard_users.ensure_slurm_associations("cfg", names) == 299 and len(listed) == 1
    assert dashboard_users.remove_slurm_associations("cfg", names) == 1 and len(listed) == 2
    assert ran[-1] == ("-i", "delete", "user", "name=bench001")


def test_slow_reads_say_whose_pages_they_were_and_when_the_dashboard_stalled_for_everyone():
    samples = Samples()
    for second in range(60):  # a fast read every second, by the readers
        samples.add(3.0, at=second + 0.5, who="reader")
    for at in (14.1, 14.2, 14.3, 14.9, 44.0, 44.5, 44.6):  # two stalls: several slow reads each, everyone's
        samples.add(300.0, at=at, who="reader")
    samples.add(400.0, at=30.0, who="submitter")  # one submitter's slow page alone: no stall
    said = dashboard.slow_reads(samples)
    assert said.startswith("of 68 reads, 8 took over 250 ms: 7 of the readers' pages, 1 of the submitters' pages")
    assert said.endswith("busiest seconds into the run: 14, 44")
    assert dashboard.slow_reads(Samples(latencies_ms=[1.0], asked=[(0.0, "reader")])) == \
        "of 1 reads none took over 250 ms"
