"""bench.gpu_torch's pure parts (no torch here): the pairs' order, the medians of the blocks and of the pairs'
ratios, the targets and the table. Its smoke run on the CPU, with torch, is tests/programs/test_gpu_bench.py."""

import pytest

from bench import gpu_torch
from bench import gpu_torch_report as report

SAMPLES = {"program step": [1000.0, 1100.0, 1050.0], "plain torchvision": [1000.0, 1000.0, 1100.0],
           "program, fed": [900.0, 950.0, 1000.0], "input pipeline": [1200.0, 1000.0, 3000.0]}


def test_the_step_and_the_plain_loop_alternate_which_goes_first():
    assert report.pair_order(0) == ("program step", "plain torchvision", "program, fed", "input pipeline")
    assert report.pair_order(1) == ("plain torchvision", "program step", "program, fed", "input pipeline")
    assert report.pair_order(2) == report.pair_order(0)


def test_rows_are_medians_and_ratios_medians_of_the_pairs():
    data = report.figures(SAMPLES)
    rows = {row["name"]: row for row in data["rows"]}
    assert rows["program step"]["median"] == 1050.0 and rows["input pipeline"]["max"] == 3000.0
    assert [p["program_over_plain"] for p in data["pair_ratios"]] == [1.0, 1.1, pytest.approx(1050 / 1100)]
    assert data["ratios"]["program_over_plain"] == 1.0
    # fed over the slower of step and pipeline: 900/1000, 950/1000, 1000/1050
    assert data["ratios"]["fed_over_limit"] == 0.95


def test_targets_say_which_half_limits_a_fed_program():
    found = report.targets(report.figures(SAMPLES))
    assert [t.met for t in found] == [True, True]
    slow = {**SAMPLES, "program, fed": [500.0, 520.0, 510.0], "input pipeline": [600.0, 610.0, 620.0]}
    step, fed = report.targets(report.figures(slow))
    assert step.met and not fed.met and fed.target == ">= 0.9"
    assert "its limit is the input pipeline (step 1,050, pipeline 610)" in fed.where
    assert report.verdicts([fed])[0].startswith("GPU, program fed by its DataLoader / its limit: 0.83 >= 0.9: NOT met")


def test_the_table_names_the_gpu_or_says_it_is_a_smoke_run():
    data = {**report.figures(SAMPLES), "settings": {"model": "densenet121", "image_size": 224, "batch_size": 256,
                                                   "amp": "bf16", "channels_last": "on"},
            "versions": {"gpu": "NVIDIA H200", "torch": "2.14.1"}}
    text = report.table(data)
    assert text.startswith("densenet121 at 224 px, batch 256, amp bf16, channels_last on on NVIDIA H200")
    assert "program step                   1,050.0         1,000.0-1,100.0" in text
    assert "smoke run" in report.table({**data, "versions": {"cpu": "x86_64"}})


def test_its_arguments_are_checked_before_anything_runs(capsys):
    with pytest.raises(SystemExit):
        gpu_torch.parse(["--batch-size", "0"])
    assert "--batch-size" in capsys.readouterr().err
    assert gpu_torch.parse([]).image_size == 224 and gpu_torch.parse([]).amp == "bf16"
