"""The load benchmark's pure parts: percentiles, tables, counter differences, the target check."""

from __future__ import annotations

import math

import pytest

from bench.dashboard import Samples, bench_users, counts_delta, percentile, table, verdict


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


def test_verdict_names_each_target_and_its_figure():
    fast = Samples(latencies_ms=[5.0] * 100)
    lines = verdict(fast, 0, 31, 60, 2)
    assert [line.endswith(": met") for line in lines] == [True, True, True]
    slow = verdict(Samples(latencies_ms=[300.0] * 100), 2, 120, 60, 2)
    assert [line.endswith("NOT met") for line in slow] == [True, True, True]
    assert slow[0].startswith("p99 of reads 300.0 ms")


def test_bench_users_are_numbered():
    assert bench_users(3) == ["bench001", "bench002", "bench003"]
