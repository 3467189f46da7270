"""docs/benchmarks_chart.py draws every panel from result files written by bench.results.save (here by the
benchmarks' own builders where they are pure), computes its titles from them, and says which command makes a
missing or unreadable result instead of failing."""

import importlib.util
import sys

import pytest

from bench import liveness, nodes, scaling, spawn
from bench.results import Target, save
from bench.spawn import Run
from tests.conftest import REPO


@pytest.fixture(scope="module")
def chart():
    spec = importlib.util.spec_from_file_location("benchmarks_chart", REPO / "docs" / "benchmarks_chart.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while the module loads
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPORTAL_BENCH_RESULTS", str(tmp_path / "results"))
    return tmp_path / "results"


def spawn_runs() -> list[Run]:
    def run(spawner: str, total: float, server: float) -> Run:
        return Run(spawner, 0.0, total, submitted=0.05, allocated=0.6, step=0.65, listening=0.65 + server,
                   ready=total - 0.05)
    return [run("portal", 2.0, 1.1), run("stock", 4.4, 2.0), run("portal", 2.2, 1.2), run("stock", 4.0, 2.1)]


def write_every_result() -> None:
    """One result per panel: the pure builders of the benchmarks where they exist, the stated schema otherwise."""
    save("pipeline", command="python -m bench.pipeline", targets=[Target("ratio to limit", 0.87, ">= 0.85", True)],
         data={"cores": 2, "rows": [{"name": "new, JPEG records", "median": 5200.0, "min": 5100.0, "max": 5300.0,
                         "limit": "JPEG decode limit", "ratio": 0.87},
                        {"name": "JPEG decode limit", "median": 6000.0, "min": 5900.0, "max": 6100.0},
                        {"name": "old, original PNGs", "median": 117.0, "min": 115.0, "max": 118.0}]})
    targets, data = spawn.results(spawn_runs())
    save("spawn", command="python -m bench.spawn --runs 2", targets=targets, data=data)
    save("dashboard", command="python -m bench.dashboard --users 1000", targets=[Target("p99", 180.0, "<= 250", True)],
         data={"users": 1000, "submitters": 50, "seconds": 60.2, "errors": 0, "target_p99_ms": 250,
               "requests": [{"request": "api/jobs", "p50_ms": 10.0, "p99_ms": 80.0},
                            {"request": "submit", "p50_ms": 110.0, "p99_ms": 265.0}]})
    targets, data = liveness.results([24.0, 26.0, 20.0], [3.0, 5.0], server_start_s=0.0)
    save("liveness", command="python -m bench.liveness --runs 3", targets=targets, data=data)
    save("scaling", command="python -m bench.scaling", targets=[],
         data=scaling.results({1: [40.0, 42.0], 2: [50.0, 52.0]}, {"model": "densenet121", "image_size": 128}))
    runs = [nodes.Result(1, 1, 40.0, 5.0), nodes.Result(1, 2, 42.0, 5.1), nodes.Result(2, 1, 33.6, 6.4)]
    save("nodes", command="python -m bench.nodes", targets=[], data=nodes.results(runs))


def titles(figure) -> dict[str, str]:
    return {panel: ax.get_title() for panel, ax in zip(("pipeline", "spawn", "dashboard", "liveness", "scaling",
                                                        "nodes"), figure.axes, strict=True)}


def test_every_panel_is_drawn_from_its_result_and_titled_from_its_figures(chart, results):
    write_every_result()
    figure, outcomes = chart.draw(results)
    assert [(o.panel, o.drawn, o.source.name) for o in outcomes] == [
        (p, True, f"{p}.json") for p in ("pipeline", "spawn", "dashboard", "liveness", "scaling", "nodes")]
    found = titles(figure)
    assert found["pipeline"].startswith("Input pipeline, 2 cores: new, JPEG records 5,200 images/s, 0.87x its limit\n"
                                        "targets met: 1 of 1; 20")
    assert found["spawn"].startswith("Spawn through Slurm: ours 0.50x stock (target <= 0.50)\ntargets met: 1 of 1")
    assert found["dashboard"].startswith("Dashboard: 1,000 users, 50 submitting, 60 s, 0 errors")
    assert "at 80% of its target, the furthest" in found["liveness"]  # the median, 24 of 30 s
    assert "efficiency 62% at 2 workers" in found["scaling"] and "no target" in found["scaling"]
    assert found["nodes"].startswith("2 workers on 2 nodes: 0.80x the images/s of 1 node")
    spawn_ax = figure.axes[1]
    segments = {t.get_label(): [bar.get_width() for bar in t] for t in spawn_ax.containers}
    assert segments["queue"] == pytest.approx([0.55, 0.55])
    assert segments["server start"] == pytest.approx([1.15, 2.05])
    assert segments["other"] == pytest.approx([0.15, 0.15])  # submit 0.05 + job launch 0.05 + first page 0.05
    dashboard_ax = figure.axes[2]
    assert [bar.get_height() for bar in dashboard_ax.containers[1]] == [80.0, 265.0]  # the p99 bars


def test_the_dashboards_requests_may_be_saved_by_name_and_its_errors_are_then_summed(chart, results):
    save("dashboard", command="python -m bench.dashboard", targets=[],
         data={"users": 200, "requests": {"api/jobs": {"p50_ms": 9.0, "p99_ms": 70.0, "errors": 1},
                                          "cancel": {"p50_ms": 40.0, "p99_ms": 130.0, "errors": 2}}})
    figure, outcomes = chart.draw(results)
    assert outcomes[2].drawn and figure.axes[2].get_title().startswith("Dashboard: 200 users, 3 errors\n")
    assert [label.get_text() for label in figure.axes[2].get_xticklabels()] == ["api/jobs", "cancel"]
    assert [bar.get_height() for bar in figure.axes[2].containers[0]] == [9.0, 40.0]  # the p50 bars


def test_missing_and_unreadable_results_say_which_command_makes_them_and_the_rest_is_drawn(chart, results, tmp_path,
                                                                                           capsys):
    write_every_result()
    (results / "spawn.json").unlink()
    (results / "dashboard.json").write_text("{not json")
    save("nodes", command="python -m bench.nodes", targets=[], data={"layouts": []})  # not what the panel reads
    out = tmp_path / "chart.png"
    assert chart.main(["--results", str(results), "--out", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    printed = capsys.readouterr().out
    assert "spawn.json: no result: run python -m bench.spawn" in printed
    assert "dashboard.json: not JSON" in printed
    assert "nodes.json: not drawn: KeyError: 'rows'" in printed
    assert "liveness.json (finished 20" in printed and "): python -m bench.liveness --runs 3" in printed
    assert f"{out}: 3 of 6 panels drawn from results" in printed


def test_an_empty_results_dir_draws_a_note_in_every_panel(chart, results):
    figure, outcomes = chart.draw(results)
    assert not any(o.drawn for o in outcomes)
    notes = [text.get_text() for ax in figure.axes for text in ax.texts]
    assert notes == [f"no result: run python -m bench.{p}" for p in chart.PANELS]
