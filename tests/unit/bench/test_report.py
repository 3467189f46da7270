"""bench.report: the summary table of every benchmark's targets, read from the results they saved."""

from bench.report import BENCHMARKS, main, measured_text, rows
from bench.results import Target, save


def test_each_target_is_a_row_with_its_verdict_and_a_missing_result_names_its_command(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPORTAL_BENCH_RESULTS", str(tmp_path))
    save("spawn", command="python -m bench.spawn", data={},
         targets=[Target("median ours / stock", 0.56, "<= 0.50", False, "ours: server_start 1.2 s")])
    save("pipeline", command="python -m bench.pipeline", data={},
         targets=[Target("images/s", 2976.4, ">= 2,000", True), Target("ratio to limit", 0.912, ">= 0.85", True)])
    save("scaling", command="python -m bench.scaling", data={}, targets=[])
    table = {(row[0], row[1]): row for row in rows(tmp_path)}
    assert table[("spawn", "median ours / stock <= 0.50")][2:4] == ["0.56", "**not met**"]
    assert table[("spawn", "median ours / stock <= 0.50")][5] == "ours: server_start 1.2 s"  # the run's own words
    assert table[("pipeline", "images/s >= 2,000")][5] == ""
    assert table[("pipeline", "images/s >= 2,000")][2:4] == ["2,976", "met"]
    assert table[("pipeline", "ratio to limit >= 0.85")][2] == "0.912"
    assert table[("scaling", "no target (figures only)")][3] == "measured"
    assert "python -m bench.liveness" in table[("liveness", "no result")][4]


def test_figures_read_as_people_write_them():
    assert [measured_text(v) for v in (None, float("nan"), 11059, 61328.2, 45.12, 0.5)] == \
        ["none", "none", "11,059", "61,328", "45.1", "0.5"]


def test_main_prints_a_markdown_table(tmp_path, capsys):
    assert main(["--results", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("|")[1:3] == [" benchmark            ", " target    "] and lines[1].startswith("|---")
    assert lines[0].rstrip().endswith("| not met: where the seconds go |")
    assert len(lines) == 2 + len(BENCHMARKS)  # one row per benchmark, none saved
