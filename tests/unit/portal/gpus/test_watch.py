"""The watch: the idle rule applied to every running holder, pass by pass, remembered across restarts, with a
history per user; a stop is asked for once, and again only if the holder still runs a while after."""

from __future__ import annotations

import json

import pytest

from portal.gpus import watch as watch_module
from portal.gpus.idle import Rule
from portal.gpus.readings import GpuReading, NodeReading
from portal.gpus.watch import (
    EVENTS,
    FORGET_AFTER_S,
    KEPT,
    MAX_EVENTS_BYTES,
    RETRY_STOP_S,
    STATE,
    Event,
    Holder,
    Watch,
    words,
)

RULE = Rule(idle_after_s=60, grace_s=120)
SERVER = Holder("7", "alice", server=True)
JOB = Holder("8", "bob", server=False)


def readings(at: float, busy: dict[str, float | None], error: str = "") -> dict[str, NodeReading]:
    gpus = tuple(GpuReading(i, busy=b, holder=h, user="x") for i, (h, b) in enumerate(busy.items()))
    return {"node1": NodeReading("node1", at, 10.0, "standin", gpus, error)}


def passes(watch: Watch, holders, times, busy, rule=RULE) -> list[tuple[float, str, str]]:
    found = []
    for at in times:
        for event in watch.once(holders, readings(at, {h.id: busy for h in holders}), lambda h: rule):
            found.append((event.at, event.holder, event.act))
    return found


def test_an_idle_server_is_warned_with_its_deadline_then_stopped_once(tmp_path):
    watch = Watch(tmp_path)
    events = passes(watch, [SERVER], range(0, 200, 10), 0.5)
    assert events == [(60, "7", "warn"), (180, "7", "stop")]  # no stop again while the hub stops it
    warned = watch.history("alice")[-1]
    assert warned.deadline == 180 and "for 60 s" in warned.reason and "stops in 2 minutes" in warned.reason
    # Still running RETRY_STOP_S after the stop was asked for (the hub failed): asked for again.
    later = 180 + RETRY_STOP_S
    assert passes(watch, [SERVER], [later], 0.5) == [(later, "7", "stop")]


def test_the_watch_carries_on_after_a_restart_and_forgets_what_ended(tmp_path):
    passes(Watch(tmp_path), [SERVER], range(0, 70, 10), 0.5)  # warned at 60
    assert Watch(tmp_path, clock=lambda: 60 + FORGET_AFTER_S).state == {}  # down too long: forgotten
    again = Watch(tmp_path, clock=lambda: 61.0)  # the dashboard restarted: same state
    assert [w.holder for w in again.warnings("alice")] == ["7"]
    assert passes(again, [SERVER], [180], 0.5) == [(180, "7", "stop")]
    again.once([], {}, lambda h: RULE)  # it ended
    assert Watch(tmp_path, clock=lambda: 181.0).state == {}
    (tmp_path / STATE).write_text('{"holders": {"7": {"user": 3')  # cut by a crash: the clocks start again
    assert Watch(tmp_path).state == {}


def test_a_reused_id_of_another_user_or_kind_starts_afresh(tmp_path):
    watch = Watch(tmp_path)
    passes(watch, [SERVER], range(0, 70, 10), 0.5)  # warned at 60
    assert passes(watch, [Holder("7", "bob", server=True)], range(70, 120, 10), 0.5) == []


def test_training_unknown_and_unwatched_holders_are_never_warned(tmp_path):
    watch = Watch(tmp_path)
    assert passes(watch, [SERVER], range(0, 300, 10), 90.0) == []  # training
    assert passes(watch, [SERVER], range(300, 600, 10), None) == []  # unknown: never idle
    failed = [watch.once([SERVER], readings(at, {"7": 0.5}, error="NVML failed"), lambda h: RULE)
              for at in range(600, 900, 10)]
    assert failed == [[]] * 30  # a reader that failed: unknown
    assert passes(watch, [SERVER], range(900, 1200, 10), 0.5, rule=None) == []  # gpu_idle_s 0: never


def test_a_hub_that_does_not_answer_keeps_the_clock_as_it_was(tmp_path):
    watch = Watch(tmp_path)
    passes(watch, [SERVER], range(0, 50, 10), 0.5)
    since = watch.state["7"].idle_since
    watch.once([], {}, lambda h: RULE, unsure=["7"])
    assert watch.state["7"].idle_since == since
    assert passes(watch, [SERVER], [60], 0.5) == [(60, "7", "warn")]


def test_a_stalled_job_is_flagged_and_cancelled_only_where_the_site_says(tmp_path):
    assert passes(Watch(tmp_path / "a"), [JOB], range(0, 400, 10), 0.0) == [(60, "8", "flag")]
    stopping = Rule(60, 120, stop_jobs=True)
    assert passes(Watch(tmp_path / "b"), [JOB], range(0, 200, 10), 0.0, stopping) == [(60, "8", "flag"),
                                                                                     (180, "8", "stop")]


def test_only_the_owner_keeps_a_warned_server_and_its_clock_starts_again(tmp_path):
    clock = iter([65.0, 66.0])
    watch = Watch(tmp_path, clock=lambda: next(clock))
    passes(watch, [SERVER], range(0, 70, 10), 0.5)
    assert watch.keep("bob", "7") is None and watch.keep("alice", "8") is None
    kept = watch.keep("alice", "7")
    assert kept is not None and kept.act == KEPT and watch.warnings("alice") == []
    assert watch.keep("alice", "7") is None  # kept already
    assert passes(watch, [SERVER], range(70, 130, 10), 0.5) == []  # idle again from 65
    assert passes(watch, [SERVER], [130], 0.5) == [(130, "7", "warn")]
    assert [e.act for e in watch.history("alice")] == ["warn", "keep", "warn"]  # newest first


def test_a_history_is_its_users_own_newest_first_and_skips_what_is_not_an_event(tmp_path):
    watch = Watch(tmp_path)
    passes(watch, [SERVER, JOB], range(0, 70, 10), 0.5)
    with (tmp_path / EVENTS).open("a") as lines:
        lines.write('{"at": "soon"}\nnot json\n')
    assert [(e.holder, e.act) for e in watch.history("alice")] == [("7", "warn")]
    assert [(e.holder, e.act) for e in watch.history(None)] == [("8", "flag"), ("7", "warn")]
    assert Event.from_dict({**vars(watch.history("bob")[0]), "act": "explode"}) is None


def test_the_events_file_keeps_its_newer_half(tmp_path, monkeypatch):
    monkeypatch.setattr(watch_module, "MAX_EVENTS_BYTES", 2000)
    watch = Watch(tmp_path)
    for n in range(40):
        holder = Holder(f"1{n}", "alice", server=True)
        passes(watch, [holder], [100 * n + t for t in range(0, 70, 10)], 0.5)
    size = (tmp_path / EVENTS).stat().st_size
    assert size <= 2000 and MAX_EVENTS_BYTES > 2000
    lines = (tmp_path / EVENTS).read_text().splitlines()
    assert all(json.loads(line)["act"] == "warn" for line in lines)  # whole lines only
    assert watch.history("alice")[0].holder == "139"


@pytest.mark.parametrize(("seconds", "said"), [(45, "45 s"), (1800, "30 minutes"), (3600, "1 h"),
                                                (7500, "2 h 5 min")])
def test_durations_read_as_people_say_them(seconds, said):
    assert words(seconds) == said
