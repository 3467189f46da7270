"""bench.kube's pure parts: the training figures from a run's TensorBoard points, and its table."""

from __future__ import annotations

import pytest

from bench.kube import ratio, table, training_figures


def test_training_figures_come_from_the_points_wall_times():
    submitted = 1000.0
    loss = [(1, 1040.0, 0.5), (2, 1052.0, 0.4), (3, 1066.0, 0.3)]  # epoch 1 holds TensorFlow's start
    rates = [(1, 1040.0, 30.0), (2, 1052.0, 34.0), (3, 1066.0, 32.0)]
    figures = training_figures(submitted, rates, loss)
    assert figures["first_point_s"] == 40.0
    assert figures["epoch_s_all"] == [12.0, 14.0] and figures["epoch_s"] == 13.0
    assert figures["images_per_sec"] == 32.0
    assert training_figures(submitted, [], [])["first_point_s"] is None


def test_the_table_gives_kubernetes_over_slurm_and_says_what_is_missing():
    spawn = {"portal": [10.0, 12.0, 11.0], "stock": [20.0, 22.0, 21.0]}
    training = {"slurm": {"first_point_s": 50.0, "epoch_s": 10.0, "images_per_sec": 30.0},
                "kubernetes": {"first_point_s": 60.0, "epoch_s": 12.0, "images_per_sec": None}}
    lines = table(spawn, training).splitlines()
    assert "median" in lines[2] and lines[2].split()[-3:] == ["11.00", "21.00", "0.52"]
    assert lines[-3].split()[-3:] == ["50.00", "60.00", "1.20"]
    assert lines[-1].endswith("n/a")
    assert ratio(None, 1.0) is None and ratio(2.0, 0) is None and ratio(3.0, 2.0) == pytest.approx(1.5)
