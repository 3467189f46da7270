"""The 1-node vs 2-node benchmark's table: medians over repeats, efficiency against the 1-worker rate."""

from bench.nodes import Result, summary


def test_medians_efficiency_and_the_two_node_ratio():
    results = [Result(1, 1, 40.0, 5.0), Result(1, 1, 44.0, 5.2), Result(1, 1, 42.0, 5.1),
               Result(1, 2, 42.0, 5.1), Result(1, 2, 43.0, 5.0), Result(1, 2, 41.0, 5.3),
               Result(2, 1, 33.0, 6.4), Result(2, 1, 31.0, 6.6), Result(2, 1, 32.0, 6.5)]
    text = summary(results)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| 1 node") or line.startswith("| 2 nodes")}
    assert rows["1 node x 1 worker"] == ["1", "5.1", "42.0", "40.0-44.0", "1.00", "3"]
    assert rows["1 node x 2 workers"] == ["2", "5.1", "42.0", "41.0-43.0", "0.50", "3"]
    assert rows["2 nodes x 1 worker"] == ["2", "6.5", "32.0", "31.0-33.0", "0.38", "3"]
    assert "2 workers on 2 nodes / on 1 node: 0.76x the images/s" in text
    assert "CPU figures" in text
