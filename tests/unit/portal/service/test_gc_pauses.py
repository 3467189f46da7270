"""The dashboard's garbage collector (issue 43): slow collections are logged, the imports' objects are out of every
collection, young collections are rarer."""

from __future__ import annotations

import gc

import pytest

from portal.service.gc_pauses import YOUNG_THRESHOLD, PauseWatch, settle, watch


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_slow_collection_is_said_with_its_generation_and_a_fast_one_is_not():
    clock, said = Clock(), []
    watcher = PauseWatch(slow_s=0.1, clock=clock, say=lambda message, *args: said.append(message % args))
    watcher("start", {"generation": 0})
    clock.now += 0.002
    watcher("stop", {"generation": 0, "collected": 0})
    assert said == [] and watcher.slow == 0
    watcher("start", {"generation": 2})
    clock.now += 0.25
    watcher("stop", {"generation": 2, "collected": 10})
    assert watcher.slow == 1 and watcher.longest_s == pytest.approx(0.25)
    assert len(said) == 1 and "paused the dashboard for 250 ms (generation 2, " in said[0], said


def test_a_stop_without_its_start_is_ignored():
    watcher = PauseWatch(say=lambda *_: pytest.fail("nothing to say"))
    watcher("stop", {"generation": 2})
    assert watcher.slow == 0


@pytest.fixture
def restored_gc():
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_settle_freezes_what_exists_and_makes_young_collections_rarer(restored_gc):
    middle, old = gc.get_threshold()[1:]
    settle()
    assert gc.get_freeze_count() > 1000  # the imports' objects: out of every later collection
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)
    assert YOUNG_THRESHOLD > 700  # Python's default


def test_watch_times_real_collections(restored_gc):
    watcher = watch(slow_s=0.0)  # every collection is "slow": each one is counted
    try:
        gc.collect()
        assert watcher.slow >= 1 and watcher.longest_s > 0
    finally:
        gc.callbacks.remove(watcher)
