"""bench.timeline: a job's first seconds cut into stages from its log marks and its first images/sec point."""

from __future__ import annotations

import time

import pytest

from bench import timeline

SLURM_LOG = """chexnet: Slurm job 102 on node1, 1 worker(s), launched by mpirun
chexnet.train: rank 0 of 1 on node1 (local rank 0 of 1)
chexnet.train: densenet121 at 64px: 179 training images, 22 steps/epoch x batch 8 x 1 workers; 17 validation images
"""
KUBE_LOG = """chexnet: job k8s-1, 2 worker(s) on 2 pod(s), launched by mpirun over ssh
chexnet: 2 worker pod(s) ready after 3 s: a b
chexnet.train: rank 0 of 2 on w-0 (local rank 0 of 1)
chexnet.train: densenet121 at 64px: 179 training images, 11 steps/epoch x batch 8 x 2 workers; 17 validation images
"""


def test_each_stage_runs_from_the_mark_before_it_and_the_point_splits_the_first_step_from_the_timed_ones():
    seen = {"queue": 101.0, "framework": 104.0, "model": 108.0}
    # the first point at step 11 timed steps 2..11: 10 steps x 8 images at 40 images/s = 2 s
    found = timeline.stages(100.0, seen, (128.0, 11, 40.0), images_per_step=8, shown=129.5)
    assert found == {"queue": 1.0, "framework": 3.0, "model": 4.0, "first step": 18.0, "timed steps": 2.0,
                     "shown": 1.5}
    assert sum(found.values()) == pytest.approx(29.5)  # the stages add up to submit -> shown


def test_the_workers_stage_is_there_only_when_the_log_has_it_and_a_missing_mark_leaves_gaps_not_lies():
    with_workers = timeline.stages(0.0, {"queue": 5.0, "workers": 9.0, "framework": 12.0}, None, 8)
    assert with_workers["workers"] == 4.0 and with_workers["framework"] == 3.0
    assert with_workers["model"] is None and with_workers["first step"] is None
    without = timeline.stages(0.0, {"queue": 5.0, "model": 9.0}, None, 8)
    assert "workers" not in without and without["framework"] is None and without["model"] is None


def test_a_mark_polled_late_gives_its_stage_zero_not_a_negative_one():
    found = timeline.stages(0.0, {"queue": 1.0, "framework": 30.0, "model": 9.0}, None, 8)
    assert found["model"] == 0.0


def test_the_watcher_stamps_each_mark_once_when_it_first_appears():
    text = [""]
    watcher = timeline.LogWatcher(lambda: text[0], every_s=0.01)
    text[0] = SLURM_LOG.splitlines(keepends=True)[0]
    deadline = time.monotonic() + 10
    while "queue" not in watcher.seen and time.monotonic() < deadline:
        time.sleep(0.01)
    first = watcher.seen["queue"]
    text[0] = SLURM_LOG
    while len(watcher.seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    seen = watcher.stop()
    assert set(seen) == {"queue", "framework", "model"} and seen["queue"] == first <= seen["model"]


def test_both_schedulers_logs_give_their_marks():
    for log, expected in ((SLURM_LOG, {"queue", "framework", "model"}),
                          (KUBE_LOG, {"queue", "workers", "framework", "model"})):
        assert {key for key, pattern in timeline.LOG_MARKS if pattern.search(log)} == expected


def test_medians_tables_and_the_biggest_stages():
    runs = [{"queue": 1.0, "first step": 10.0}, {"queue": 3.0, "first step": 14.0, "shown": None}]
    medians = timeline.median_stages(runs)
    assert medians == {"queue": 2.0, "first step": 12.0, "shown": None}
    assert timeline.biggest(medians, 1) == "first step 12.0 s"
    lines = timeline.table({"Slurm": medians, "Kube": {"queue": 4.0}})
    assert lines[1].endswith("2.0        4.0") and lines[-1].rstrip().endswith("-          -")
