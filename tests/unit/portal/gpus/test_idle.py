"""The idle rule: a server idle for the set time is warned, stopped after the grace unless kept; busy or unknown
ends an idle stretch; a job is flagged, and stopped only where the site says."""

from __future__ import annotations

from portal.gpus.idle import Act, Rule, Watched, holder_state, keep, step
from portal.gpus.readings import GpuReading, NodeReading

RULE = Rule(idle_after_s=30 * 60, grace_s=60 * 60)


def run(watched: Watched, readings: list[tuple[float, bool | None]], rule: Rule = RULE) -> list[tuple[float, Act]]:
    acts = []
    for at, idle in readings:
        watched, act = step(watched, at, idle, rule)
        if act:
            acts.append((at, act))
    return acts


def every_minute(minutes: range, idle: bool | None = True) -> list[tuple[float, bool | None]]:
    return [(60.0 * m, idle) for m in minutes]


def test_an_idle_server_is_warned_at_30_minutes_and_stopped_an_hour_later():
    acts = run(Watched("5", "alice", server=True), every_minute(range(0, 120)))
    assert acts == [(1800.0, Act.WARN), (5400.0, Act.STOP)] + [(60.0 * m, Act.STOP) for m in range(91, 120)]


def test_a_training_server_or_an_unknown_reading_is_never_warned():
    assert run(Watched("5", "alice", server=True), every_minute(range(300), False)) == []
    assert run(Watched("5", "alice", server=True), every_minute(range(300), None)) == []
    # Idle, but an unknown reading every 25 minutes: no idle stretch reaches 30 minutes.
    idle_with_gaps = [(at, None if int(at) % (25 * 60) == 0 else idle) for at, idle in every_minute(range(300))]
    assert run(Watched("5", "alice", server=True), idle_with_gaps) == []


def test_busy_after_the_warning_clears_it_and_keep_it_starts_the_clock_again():
    watched, acts = Watched("5", "alice", server=True), []
    for at, idle in every_minute(range(0, 31)):
        watched, act = step(watched, at, idle, RULE)
    assert watched.warned_at == 1800.0
    cleared, act = step(watched, 1900.0, False, RULE)
    assert act == Act.CLEAR and cleared.warned_at is None and cleared.idle_since is None
    kept = keep(watched, 1860.0)
    for at, idle in every_minute(range(32, 200)):
        kept, act = step(kept, at, idle, RULE)
        if act:
            acts.append((at, act))
    assert acts[:2] == [(1860.0 + 1800.0, Act.WARN), (1860.0 + 1800.0 + 3600.0, Act.STOP)]


def test_an_idle_job_is_flagged_and_stopped_only_where_the_site_says():
    job = Watched("7", "alice", server=False)
    assert run(job, every_minute(range(0, 200))) == [(1800.0, Act.FLAG)]
    assert run(job, every_minute(range(0, 91)), replace_rule(stop_jobs=True))[-1] == (5400.0, Act.STOP)


def test_a_reading_seen_before_counts_once():
    watched, act = step(Watched("5", "alice", server=True), 100.0, True, RULE)
    assert step(watched, 100.0, False, RULE) == (watched, None)


def test_a_holders_state_over_its_nodes():
    def node(name: str, at: float, busy: float | None, error: str = "") -> NodeReading:
        return NodeReading(name, at, 10.0, "standin", gpus=(GpuReading(0, busy=busy, holder="7"),
                                                            GpuReading(1, busy=90.0, holder="8")), error=error)

    assert holder_state([node("n1", 10.0, 0.0), node("n2", 12.0, 1.0)], "7") == (12.0, True)
    assert holder_state([node("n1", 10.0, 0.0), node("n2", 12.0, 50.0)], "7") == (12.0, False)
    assert holder_state([node("n1", 10.0, 0.0), node("n2", 12.0, None)], "7")[1] is None
    assert holder_state([node("n1", 10.0, 0.0, error="NVML did not start")], "7")[1] is None
    assert holder_state([node("n1", 10.0, 0.0)], "9") == (0.0, None)


def replace_rule(**changes) -> Rule:
    from dataclasses import replace

    return replace(RULE, **changes)
