"""The pipeline benchmark's pure parts (options, the command that reproduces a run, the breakdown, cores per GPU,
targets), and every row it times built on a tiny record set."""

from __future__ import annotations

import math

import pytest

from bench import pipeline_report as report
from bench.common import Measurement
from bench.pipeline import command, core_counts, main_rows, parse_args, row_names

TWO_CORES = 2


def test_cores_are_a_comma_list_bounded_by_the_cores_this_process_may_use():
    assert core_counts("1,2", TWO_CORES) == [1, 2]
    assert core_counts(" 2 , 1", TWO_CORES) == [2, 1]
    assert parse_args([], available=TWO_CORES).cores == [2]
    assert parse_args([], available=16).cores == [16]


@pytest.mark.parametrize(("given", "says"), [("0", "0 is not between 1 and 2"), ("x", "'x' is not a count"),
                                             ("3", "3 is not between 1 and 2"), ("1,,2", "'' is not a count"),
                                             ("1,1", "1 is given twice"), ("-1", "'-1' is not a count")])
def test_a_bad_core_count_is_refused_naming_cores_and_what_is_allowed(given, says):
    with pytest.raises(ValueError, match="--cores") as refused:
        core_counts(given, TWO_CORES)
    assert says in str(refused.value) and "from 1 to 2" in str(refused.value)


def test_the_command_line_refuses_three_cores_on_two(capsys):
    with pytest.raises(SystemExit) as stopped:
        parse_args(["--cores", "1,3"], available=TWO_CORES)
    assert stopped.value.code == 2
    assert "--cores: 3 is not between 1 and 2" in capsys.readouterr().err


def test_a_long_refused_value_is_echoed_only_in_part():
    with pytest.raises(ValueError) as refused:
        core_counts("y" * 500, TWO_CORES)
    assert "y" * 13 not in str(refused.value)


@pytest.mark.parametrize("option", ["--repeats", "--seconds", "--images"])
def test_counts_and_durations_must_be_positive(option, capsys):
    with pytest.raises(SystemExit):
        parse_args([option, "0"], available=TWO_CORES)
    assert option in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["--cores", "1,2", "--images", "128", "--repeats", "2", "--seconds", "2.5"],
                                  ["--threads", "4", "--ablation", "--threads-ablation", "--cores", "2,1"]])
def test_the_printed_command_reproduces_the_run(argv):
    args = parse_args(argv, available=TWO_CORES)
    line = command(args)
    assert line.startswith("python -m bench.pipeline --cores ")
    assert parse_args(line.split()[3:], available=TWO_CORES) == args


def test_ablation_rows_are_timed_only_when_asked():
    plain = row_names(parse_args([], available=TWO_CORES))
    both = row_names(parse_args(["--ablation", "--threads-ablation"], available=TWO_CORES))
    assert len(set(plain)) == len(plain) and set(plain) < set(both) and len(set(both)) == len(both)


def test_breakdown_gives_cpu_per_image_and_what_each_stage_adds():
    stages = [Measurement("read", (4000.0, 4100.0, 3900.0)), Measurement("decode", (2000.0,)),
              Measurement("crop", (2500.0,)), Measurement("batch", (1000.0, 1000.0))]
    costs = report.breakdown(stages, [200.0, 600.0, 550.0, 900.0], cores=2)
    assert [round(c.cpu_us, 6) for c in costs] == [500.0, 1000.0, 800.0, 2000.0]  # 2 cores x 1e6 / rate
    assert [round(c.added_us, 6) for c in costs] == [500.0, 500.0, -200.0, 1200.0]  # a cheaper stage: negative
    assert [c.used_added_us for c in costs] == [200.0, 400.0, -50.0, 350.0]
    assert math.isinf(report.cpu_us_per_image(0.0, 2))
    table = report.breakdown_table(costs, 2)
    assert "-200.0" in table and "+1,200.0" in table


def test_the_reference_csv_gives_the_best_rate_of_each_precision():
    rates = report.gpu_rates()
    assert rates == {"fp32": 798.0, "tf32": 1626.3, "bf16": 2439.8, "bf16+compile": 2934.3}


def test_the_reference_csv_skips_comments_and_other_models(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text("# a note\narch,batch,precision,torch_compile,images_per_sec\nresnet50,64,fp32,false,900\n"
                    "densenet121,64,fp32,false,700\ndensenet121,128,fp32,false,750\n")
    assert report.gpu_rates(path) == {"fp32": 750.0}
    with pytest.raises(ValueError, match="no row with arch vgg"):
        report.gpu_rates(path, model="vgg")


def test_cores_per_gpu_and_for_an_eight_gpu_node():
    needs = report.cores_needed(1000.0, {"fp32": 800.0, "bf16": 2500.0})
    assert [(n.precision, n.cores_per_gpu, n.node_images_per_sec, n.node_cores) for n in needs] == \
        [("fp32", 0.8, 6400.0, 7), ("bf16", 2.5, 20000.0, 20)]  # node cores rounded up: 6.4 -> 7
    assert report.cores_needed(1000.0, {"bf16": 2500.0}, gpus=1)[0].node_cores == 3
    with pytest.raises(ValueError, match="per_core"):
        report.cores_needed(0.0, {"fp32": 800.0})
    table = report.cores_needed_table(needs, 1000.0, "parallel, JPEG records", 2)
    assert "this machine's cores" in table and "20,000" in table


def samples(pipeline: float, limit: float, cores: int = 2) -> report.Samples:
    return {cores: {"parallel": [pipeline, pipeline + 10, pipeline - 10], "limit": [limit, limit]}}


def test_targets_are_judged_on_two_cores():
    met = report.targets(samples(2500.0, 2800.0), "parallel", "limit")
    assert [t.met for t in met] == [True, True] and met[1].measured == pytest.approx(2500 / 2800)
    short = report.targets(samples(1900.0, 4000.0), "parallel", "limit")
    assert [t.met for t in short] == [False, False]
    assert all(line.endswith("NOT met") for line in report.verdict(short))


def test_without_a_two_core_run_the_rate_target_is_not_met_and_says_where_it_was_measured():
    found = report.targets(samples(5000.0, 5100.0, cores=1), "parallel", "limit")
    assert "on 1 core" in found[0].name and not found[0].met and found[1].met
    assert report.target_cores([1, 4]) == 1 and report.target_cores([3, 16]) == 3 and report.target_cores([1, 2]) == 2


def test_main_rows_carry_their_limit_and_ratio_for_the_chart():
    from bench.pipeline_names import JPEG_LIMIT, MAIN, PARALLEL_JPEG

    found = main_rows({2: {name: [100.0 * (i + 1)] for i, name in enumerate(MAIN)}}, 2)
    by_name = {row["name"]: row for row in found}
    assert by_name[PARALLEL_JPEG]["limit"] == JPEG_LIMIT and by_name[PARALLEL_JPEG]["ratio"] == pytest.approx(400 / 500)
    assert by_name[JPEG_LIMIT]["ratio"] == 1.0 and {"median", "min", "max"} <= set(by_name[PARALLEL_JPEG])


def test_per_core_figures_divide_by_the_cores():
    table = report.per_core_table({1: {"parallel": [1000.0]}, 2: {"parallel": [1800.0]}}, ("parallel",))
    assert table.splitlines()[-1].split() == ["parallel", "1,000", "900"]
