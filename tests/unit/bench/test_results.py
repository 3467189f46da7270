"""Benchmark results as JSON (bench.results), and what each benchmark saves: the pure builders of bench.spawn,
bench.liveness, bench.scaling and bench.nodes put the medians, spreads and met flags that their tables print."""

import json
import math

import numpy as np
import pytest

from bench import liveness, nodes, scaling, spawn
from bench.results import SCHEMA, Target, load, save
from bench.spawn import Run


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPORTAL_BENCH_RESULTS", str(tmp_path))
    return tmp_path


def test_a_saved_result_reads_back_with_its_command_targets_and_data(results_dir):
    targets = [Target("p99 (ms)", 61.0, "<= 250", True), Target("errors", 2, "== 0", False)]
    path = save("dashboard", command="python -m bench.dashboard --users 200", targets=targets,
                data={"requests": [{"request": "api/jobs", "p50_ms": 10.3, "p99_ms": 78.7}]})
    assert path == results_dir / "dashboard.json"
    assert not list(results_dir.glob("*.partial"))
    record = load("dashboard")
    assert record["schema"] == SCHEMA and record["benchmark"] == "dashboard"
    assert record["command"] == "python -m bench.dashboard --users 200"
    assert record["met"] is False  # one target of two not met
    assert record["targets"][1] == {"name": "errors", "measured": 2, "target": "== 0", "met": False, "where": ""}
    assert record["data"]["requests"][0]["p99_ms"] == 78.7
    assert record["finished"].endswith("Z") and record["machine"]["cores"] >= 1
    assert "commit" in record


def test_nothing_measured_is_null_numpy_values_are_plain_and_no_target_is_met(results_dir):
    save("scaling", command="python -m bench.scaling", targets=[],
         data={"median": math.nan, "max": math.inf, "rate": np.float32(2.5), "n": np.int64(3), "ok": np.bool_(True)})
    record = json.loads((results_dir / "scaling.json").read_text())  # strict JSON: no NaN, no Infinity
    assert record["data"] == {"median": None, "max": None, "rate": 2.5, "n": 3, "ok": True}
    assert record["met"] is True and record["targets"] == []


def test_what_json_cannot_hold_is_refused_naming_where_it_is_and_nothing_is_written(results_dir):
    with pytest.raises(TypeError, match=r"result\.data\.runs\[1\]: a PosixPath is not JSON; allowed: numbers"):
        save("nodes", command="x", targets=[], data={"runs": [1, results_dir]})
    assert not list(results_dir.iterdir())


@pytest.mark.parametrize("name", ["../spawn", "Spawn", "spawn.json", "", "a" * 41])
def test_a_benchmark_name_is_a_module_name(results_dir, name):
    with pytest.raises(ValueError, match="benchmark name .*allowed: a lower-case module name"):
        save(name, command="x", targets=[], data={})
    with pytest.raises(ValueError, match="allowed: a lower-case module name"):
        load(name)


def test_a_missing_broken_or_old_result_names_the_command_that_makes_it(results_dir):
    with pytest.raises(FileNotFoundError, match=r"spawn.json: no result yet; run python -m bench.spawn"):
        load("spawn")
    (results_dir / "spawn.json").write_text('{"schema": 1, "da')
    with pytest.raises(ValueError, match=r"spawn.json: not JSON .*run python -m bench.spawn again"):
        load("spawn")
    (results_dir / "spawn.json").write_text('{"schema": 0}')
    with pytest.raises(ValueError, match="schema 0, this code reads 1"):
        load("spawn")
    (results_dir / "spawn.json").write_text("[]")
    with pytest.raises(ValueError, match="a list, not a result"):
        load("spawn")


def spawn_runs(ours: list[float], stock: list[float], queue: float = 0.5) -> list[Run]:
    """Alternating runs; every run's queue wait is `queue`, its other milestones 0.1 s apart."""
    def run(spawner: str, total: float) -> Run:
        return Run(spawner, started=0.0, lab=total, submitted=0.1, allocated=0.1 + queue, step=0.2 + queue,
                   listening=total - 0.2, ready=total - 0.1)
    return [r for pair in zip(ours, stock, strict=True) for r in (run("portal", pair[0]), run("stock", pair[1]))]


def test_spawn_saves_the_ratio_the_met_flag_the_totals_and_the_breakdown_medians():
    targets, data = spawn.results(spawn_runs([2.0, 1.8, 2.2], [4.0, 4.6, 3.9]))
    assert data["ratio"] == pytest.approx(2.0 / 4.0)
    assert [(t.measured, t.target, t.met) for t in targets] == [(pytest.approx(0.5), "<= 0.50", True)]
    assert data["runs_per_spawner"] == {"portal": 3, "stock": 3}
    assert data["totals"]["stock"] == {"median": 4.0, "p90": pytest.approx(4.48), "min": 3.9, "max": 4.6,
                                       "spread": pytest.approx(0.7), "median_without_queue": 3.5}
    assert data["ratio_without_queue"] == pytest.approx(1.5 / 3.5)
    assert data["segments"]["portal"]["queue"] == pytest.approx(0.5)
    assert data["segments"]["stock"]["server_start"] == pytest.approx(4.0 - 0.2 - 0.7)
    assert set(data["segments"]["portal"]) == {name for name, _ in spawn.SEGMENTS}
    assert len(data["runs"]) == 6 and data["runs"][1]["spawner"] == "stock" and data["runs"][1]["total"] == 4.0


def test_spawn_is_not_met_above_half_of_stock_nor_without_both_spawners():
    targets, _ = spawn.results(spawn_runs([2.1, 2.1], [4.0, 4.0]))
    assert targets[0].met is False and targets[0].measured == pytest.approx(0.525)
    targets, data = spawn.results([r for r in spawn_runs([2.0], [4.0]) if r.spawner == "portal"])
    assert targets[0].met is False and math.isnan(targets[0].measured) and data["ratio"] is None
    assert "stock" not in data["totals"]


def test_the_spawn_table_prints_the_saved_figures_and_the_total_without_the_queue():
    runs = spawn_runs([2.0, 1.8, 2.2], [4.0, 4.6, 3.9])
    text = spawn.table(runs, "python -m bench.spawn --runs 3")
    assert "total without the queue wait, median" in text and "    1.50     3.50    0.43" in text
    assert "  queue: sbatch -> Slurm allocates" in text


def test_liveness_holds_the_first_point_to_its_median_and_each_event_to_its_bound():
    targets, data = liveness.results([45.1, 23.2, 29.9, 24.0, 61.5], [3.6, 1.0, 4.1], server_start_s=0.0)
    first, event = data["measures"]
    assert (first["median"], first["min"], first["max"], first["runs"]) == (29.9, 23.2, 61.5, 5)
    assert first["spread"] == pytest.approx(38.3) and first["target_s"] == 30.0
    assert (event["median"], event["target_s"]) == (3.6, 10.0)
    assert [(t.measured, t.target, t.met) for t in targets] == [(29.9, "<= 30", True), (4.1, "<= 10", True)]
    assert liveness.rows(data)[0][1:] == [5, "29.9", "23.2..61.5", "38.3", "median <= 30"]
    assert liveness.rows(data)[1][-1] == "every run <= 10"


def test_a_first_point_not_met_says_which_stages_took_the_seconds():
    stages = [{"queue": 1.0, "framework": 3.0, "model": 4.0, "first step": 20.0, "timed steps": 2.0, "shown": 4.0},
              {"queue": 1.4, "framework": 2.0, "model": 5.0, "first step": 24.0, "timed steps": 2.0, "shown": 2.0}]
    targets, data = liveness.results([34.0, 36.4], [1.0], server_start_s=0.0, stages=stages)
    assert not targets[0].met and data["stages_median"]["first step"] == 22.0
    line = liveness.verdicts(targets)[0]
    assert "NOT met; the seconds go to: first step 22.0 s, model 4.5 s" in line


def test_a_liveness_point_never_seen_is_not_met_and_saved_as_null(results_dir):
    targets, data = liveness.results([45.0, math.inf, math.inf], [3.0], server_start_s=12.5)
    assert targets[0].met is False  # the median of runs most of which never saw a point is no point at all
    save("liveness", command="python -m bench.liveness", targets=targets, data=data)
    saved = load("liveness")
    assert saved["targets"][0]["measured"] is None and saved["data"]["measures"][0]["samples"][1] is None
    assert saved["data"]["server_start_s"] == 12.5 and saved["met"] is False


def test_scaling_saves_rows_with_spreads_and_the_efficiency_against_the_first_count():
    data = scaling.results({1: [40.0, 44.0], 2: [60.0, 66.0]}, {"model": "densenet121", "image_size": 128,
                                                               "batch_size": 8, "repeats": 2})
    assert data["rows"][1] == {"name": "2 workers", "median": 63.0, "min": 60.0, "max": 66.0, "samples": [60.0, 66.0],
                               "workers": 2, "ratio": pytest.approx(1.5)}
    assert data["efficiency"] == {"2": pytest.approx(0.75)}
    text = scaling.report(data)
    assert "scaling efficiency at 2 workers: 75% (Dell, 2 V100 GPUs: 85%)" in text and "60-66" in text
    assert scaling.results({2: [60.0], 4: [90.0]}, {})["efficiency"] == {"4": pytest.approx(0.75)}


def test_nodes_saves_each_layout_with_its_range_efficiency_and_every_job():
    runs = [nodes.Result(1, 1, 40.0, 5.0), nodes.Result(1, 2, 42.0, 5.1), nodes.Result(2, 1, 33.0, 6.4),
            nodes.Result(1, 1, 44.0, 5.2), nodes.Result(1, 2, 43.0, 5.0), nodes.Result(2, 1, 31.0, 6.6)]
    data = nodes.results(runs)
    two_nodes = data["rows"][2]
    assert (two_nodes["name"], two_nodes["median"], two_nodes["min"], two_nodes["max"]) == ("2 nodes x 1 worker",
                                                                                           32.0, 31.0, 33.0)
    assert two_nodes["efficiency"] == pytest.approx(32.0 / (2 * 42.0)) and two_nodes["seconds_per_epoch"] == 6.5
    assert data["two_nodes_over_one"] == pytest.approx(32.0 / 42.5)
    assert len(data["jobs"]) == 6 and data["jobs"][2] == {"nodes": 2, "workers_per_node": 1, "images_per_sec": 33.0,
                                                          "seconds_per_epoch": 6.4, "workers": 2}
