"""bench.programs' pure parts: one job's figures from its TensorBoard points, the rounds' order, the medians of the
rounds' ratios, the targets and the table."""

import pytest

from bench import programs_report as report


def test_a_jobs_figures_leave_out_its_first_epoch():
    submitted = 1000.0
    rates = [(1040.0, 10, 5.0), (1050.0, 20, 30.0), (1056.0, 30, 34.0), (1062.0, 40, 32.0)]
    epochs = [(1045.0, 1, 0.7), (1052.0, 2, 0.6), (1060.0, 3, 0.5)]
    found = report.job_figures(submitted, rates, epochs)
    assert found["images_per_sec"] == 32.0  # 30, 34, 32: the point of epoch 1 (5.0) is not counted
    assert found["first_point_s"] == 40.0
    assert found["epoch_s"] == 7.5  # the median of 7 and 8
    assert found["images_per_sec_all"] == [5.0, 30.0, 34.0, 32.0]


def test_a_job_with_one_epoch_has_no_rate_and_no_epoch_time():
    found = report.job_figures(0.0, [(10.0, 5, 20.0)], [(12.0, 1, 0.7)])
    assert found["images_per_sec"] is None and found["epoch_s"] is None and found["first_point_s"] == 10.0


def test_each_pair_runs_one_after_the_other_and_its_first_side_alternates():
    first, second = report.order(0), report.order(1)
    assert sorted(first) == sorted(report.RUNS) and second == first[::-1] and report.order(2) == first
    for _, top, bottom in report.RATIOS:
        for order in (first, second):
            assert abs(order.index(top) - order.index(bottom)) == 1
        assert (first.index(top) < first.index(bottom)) != (second.index(top) < second.index(bottom))


def job(rate, first, epoch=6.0):
    return {"images_per_sec": rate, "first_point_s": first, "epoch_s": epoch}


ROUNDS = [{"order": list(report.order(0)), "tf x2": job(30.0, 60.0), "torch x2": job(27.0, 45.0),
           "torch x1": job(30.0, 40.0)},
          {"order": list(report.order(1)), "tf x2": job(32.0, 62.0), "torch x2": job(32.0, 50.0),
           "torch x1": job(32.0, 42.0)},
          {"order": list(report.order(2)), "tf x2": job(20.0, 50.0), "torch x2": job(19.0, 60.0),
           "torch x1": job(38.0, 41.0)}]


def test_ratios_are_medians_of_the_rounds_ratios():
    data = report.figures(ROUNDS)
    assert [r["torch / tf, 2 hosts"]["images_per_sec"] for r in data["round_ratios"]] == [0.9, 1.0, 0.95]
    assert data["ratios"]["torch / tf, 2 hosts"]["images_per_sec"] == 0.95
    assert data["ratios"]["torch / tf, 2 hosts"]["first_point_s"] == pytest.approx(50 / 62)
    assert data["ratios"]["torch, 2 hosts / 1 host"]["images_per_sec"] == 0.9  # 0.9, 1.0, 0.5
    assert data["runs"]["torch x2"] == {"images_per_sec": 27.0, "first_point_s": 50.0, "epoch_s": 6.0,
                                        "template": "chexnet-torch", "nodes": 2, "min": 19.0, "max": 32.0}


def test_targets_met_and_not_met_say_where_the_seconds_go():
    found = {t.name: t for t in report.targets(report.figures(ROUNDS))}
    assert found["images/s, PyTorch / TensorFlow, 2 hosts"].met
    assert found["first point, PyTorch / TensorFlow, 2 hosts"].met
    assert found["images/s, PyTorch 2 hosts / 1 host"].met
    slow = [{**r, "torch x2": job(r["tf x2"]["images_per_sec"] * 0.5, 90.0)} for r in ROUNDS]
    found = {t.name: t for t in report.targets(report.figures(slow))}
    rate = found["images/s, PyTorch / TensorFlow, 2 hosts"]
    assert not rate.met and rate.measured == 0.5 and rate.target == ">= 0.8"
    assert rate.where.startswith("torch x2: 15.0 images/s, epoch 6.0 s, first point 90.0 s; tf x2: 30.0")
    assert not found["first point, PyTorch / TensorFlow, 2 hosts"].met
    assert report.verdicts([rate])[0].startswith("images/s, PyTorch / TensorFlow, 2 hosts: 0.50 >= 0.8: NOT met; ")


def test_a_target_with_nothing_measured_is_not_met():
    empty = [{**r, "torch x2": job(None, None, None)} for r in ROUNDS]
    data = report.figures(empty)
    assert all(not t.met and t.measured is None for t in report.targets(data))
    assert "n/a" in report.table(data)


def test_the_table_has_every_run_and_every_rounds_ratios():
    text = report.table(report.figures(ROUNDS))
    assert "torch x2  chexnet-torch       2      27.0     19.0-32.0           50.0      6.0" in text
    assert "round 2 (torch x1, torch x2, tf x2): torch / tf, 2 hosts images/s 1.00x" in text
    assert "median of the rounds: torch / tf, 2 hosts images/s 0.95x" in text
