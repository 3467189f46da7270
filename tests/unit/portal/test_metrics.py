"""What the dashboard reads of a run (portal.metrics): the per-epoch series and the pace from real event files
(written by the training's own writer, and TF1-style with chosen wall times), and the checks on what a user's
process answers."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from chexnet.callbacks import EPOCH_TAGS, TAG_THROUGHPUT
from chexnet.resume import EpochLog
from portal.metrics import (
    MAX_SERIES,
    TAG_AUROC_MEAN,
    MetricsError,
    RunMetrics,
    epoch_seconds,
    per_epoch,
    read_run_metrics,
)
from programkit import tblog
from tests.conftest import REPO
from tests.unit.helpers import write_tf1_events


def test_the_trainings_own_event_files_give_one_value_per_epoch(tmp_path):
    """Rank 0's writers as training uses them: images/sec every few global steps, then the epoch's scalars."""
    logdir = tmp_path / "tensorboard"
    log = EpochLog(logdir, tblog.record_path(tmp_path / "checkpoints"), tblog.LoggedSteps())
    rates = {1: [10.0, 12.0, 11.0], 2: [20.0, 40.0, 21.0], 3: [30.0, 31.0, 29.0]}
    aurocs = {1: 0.61, 2: math.nan, 3: 0.72}  # epoch 2: no class had both labels
    for epoch, samples in rates.items():
        with log.writer.as_default():
            for i, rate in enumerate(samples):
                tf.summary.scalar(TAG_THROUGHPUT, rate, step=(epoch - 1) * 30 + (i + 1) * 10)
        log.writer.flush()
        time.sleep(0.01)  # the epoch's end is written after its samples, as in training
        log.publish(log.record({**{tag: 0.5 for tag in EPOCH_TAGS}, "epoch": epoch, TAG_AUROC_MEAN: aurocs[epoch]}))
        time.sleep(0.01)
    log.close()
    metrics = read_run_metrics(logdir)
    assert metrics.images_per_sec_series == (11.0, 21.0, 30.0)  # each epoch's median sample
    assert metrics.mean_auroc_series == pytest.approx((0.61, 0.72))  # the undefined epoch is no point
    assert (metrics.images_per_sec, metrics.epochs_done, metrics.best_epoch) == (29.0, 3, 3)
    assert metrics.epoch_seconds is not None and 0.01 <= metrics.epoch_seconds < 5
    assert RunMetrics.from_json(json.dumps(metrics.to_dict())) == metrics  # what the dashboard reads back


def test_the_helper_run_as_the_user_reads_the_same_without_tensorflow_and_writes_nothing_in_the_home(tmp_path):
    """`python -m portal.metrics` (what the dashboard runs as the user) reads TensorBoard's files on TensorBoard's
    own stub of TensorFlow: the same figures as a read with TensorFlow, without its import (1.7 s here) or the
    ~/.keras/keras.json that the import writes into the user's home."""
    logdir = tmp_path / "tensorboard"
    log = EpochLog(logdir, tblog.record_path(tmp_path / "checkpoints"), tblog.LoggedSteps())
    for epoch in (1, 2):
        with log.writer.as_default():
            tf.summary.scalar(TAG_THROUGHPUT, 10.0 * epoch, step=epoch * 10)
        log.writer.flush()
        log.publish(log.record({**{tag: 0.5 for tag in EPOCH_TAGS}, "epoch": epoch, TAG_AUROC_MEAN: 0.6 + epoch / 10}))
    log.close()
    home = tmp_path / "home"
    home.mkdir()
    found = subprocess.run([sys.executable, "-m", "portal.metrics", str(logdir)], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "HOME": str(home)}, cwd=REPO)
    assert found.returncode == 0, found.stderr
    assert RunMetrics.from_json(found.stdout) == read_run_metrics(logdir)
    assert list(home.iterdir()) == []
    probe = subprocess.run([sys.executable, "-c", "import sys; from portal import metrics; "
                            "metrics.without_tensorflow(); metrics.read_run_metrics(sys.argv[1]); "
                            "print('tensorflow' in sys.modules)", str(logdir)],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(home)}, cwd=REPO)
    assert probe.stdout.strip() == "False", probe.stderr


def test_a_long_run_keeps_its_last_epochs_and_its_pace_without_the_wait_of_a_requeue(tmp_path):
    epochs = {e: (1000.0 + 90 * e + (7200 if e > 120 else 0), 100.0 + e, min(0.99, 0.5 + e / 1000)) for e in
              range(1, 251)}  # 250 epochs of 90 s; two hours in the queue after epoch 120
    write_tf1_events(tmp_path, epochs)
    metrics = read_run_metrics(tmp_path)
    assert len(metrics.images_per_sec_series) == len(metrics.mean_auroc_series) == MAX_SERIES
    assert metrics.images_per_sec_series[0] == 151.0 and metrics.images_per_sec_series[-1] == 350.0
    assert metrics.mean_auroc_series[-1] == pytest.approx(0.75)
    assert (metrics.epoch_seconds, metrics.epochs_done) == (90.0, 250)
    assert RunMetrics.from_json(json.dumps(metrics.to_dict())) == metrics


def test_one_epoch_has_no_pace_and_an_empty_logdir_has_nothing(tmp_path):
    write_tf1_events(tmp_path, {1: (50.0, 12.5, 0.6)})
    metrics = read_run_metrics(tmp_path)
    assert (metrics.images_per_sec_series, metrics.epoch_seconds, metrics.epochs_done) == ((12.5,), None, 1)
    assert read_run_metrics(tmp_path / "none") == RunMetrics()


def test_the_pace_is_the_median_gap_between_epoch_ends():
    assert epoch_seconds([0.0, 60.0, 120.0, 3720.0, 3780.0]) == 60.0
    assert epoch_seconds([10.0, 10.0, 5.0]) is None  # a re-written end is no gap
    assert epoch_seconds([]) is None and epoch_seconds([3.0]) is None


def test_samples_belong_to_the_epoch_whose_end_follows_them():
    samples = [(1.0, 10.0), (2.0, 30.0), (3.0, 20.0), (4.5, 50.0), (7.0, 99.0)]
    assert per_epoch(samples, [3.0, 5.0]) == [20.0, 50.0]  # 7.0: the epoch under way is not done
    assert per_epoch(samples, [3.0, 2.0, 5.0]) == [20.0, 50.0]  # an end written late (a resume) has no samples
    assert per_epoch([], [1.0]) == []


OK = {"images_per_sec": 12.0, "epochs_done": 2, "images_per_sec_series": [11, 12.0],
      "mean_auroc_series": [0.5, 0.6], "epoch_seconds": 30.5}


def test_the_new_fields_read_back_and_an_older_answer_without_them_still_reads():
    metrics = RunMetrics.from_dict(OK)
    assert (metrics.images_per_sec_series, metrics.mean_auroc_series, metrics.epoch_seconds) == (
        (11.0, 12.0), (0.5, 0.6), 30.5)
    older = RunMetrics.from_dict({"images_per_sec": 12.0, "epochs_done": 2})
    assert (older.images_per_sec_series, older.mean_auroc_series, older.epoch_seconds) == ((), (), None)


@pytest.mark.parametrize("field, value, words", [
    ("images_per_sec_series", [1.0] * (MAX_SERIES + 1), "not a list of at most 200 numbers"),
    ("images_per_sec_series", {"1": 2}, "not a list of at most 200 numbers"),
    ("images_per_sec_series", [1.0, "fast"], "a str, not a number"),
    ("images_per_sec_series", [1.0, None], "null in the list"),
    ("images_per_sec_series", [-1.0], "is not a finite number in [0.0, inf]"),
    ("images_per_sec_series", [True], "a bool, not a number"),
    ("mean_auroc_series", [0.5, 1.5], "is not a finite number in [0.0, 1.0]"),
    ("epoch_seconds", -3, "epoch_seconds: -3 is not a finite number"),
    ("epoch_seconds", "60", "epoch_seconds: a str, not a number"),
    ("epoch_series", [], "unknown field 'epoch_series'"),
])
def test_each_malformed_new_field_is_refused_by_name(field, value, words):
    with pytest.raises(MetricsError) as refused:
        RunMetrics.from_dict({**OK, field: value})
    assert field in str(refused.value) and words in str(refused.value)


def test_a_non_finite_number_in_a_series_is_refused_as_json():
    with pytest.raises(MetricsError):
        RunMetrics.from_json('{"mean_auroc_series": [0.5, NaN]}')
