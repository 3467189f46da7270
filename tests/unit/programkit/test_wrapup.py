"""Rank 0's end of a run (programkit.wrapup), the one every program calls: the card from the last validation or,
for a run that trained nothing, from the checkpoint's record; the study told the trial's end once."""

from __future__ import annotations

import json

import pytest

from programkit import sweep, tblog
from programkit.data.sources import source_of
from programkit.data.synthetic import write_synthetic
from programkit.labels import CLASSES
from programkit.model_card import CARD_FILE
from programkit.tags import AUROC_TAG_PREFIX, TAG_AUROC_MEAN
from programkit.wrapup import wrap_up

PLAN = {"space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}, "trials": 2, "parallel": 1, "sampler": "random",
        "pruner": "median", "min_epochs": 1, "seed": 0, "epochs": 3}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return source_of(write_synthetic(tmp_path_factory.mktemp("data"), 40, 16, seed=1, patients=15))


def scalars(value: float) -> dict[str, float | None]:
    return {TAG_AUROC_MEAN: value, **{f"{AUROC_TAG_PREFIX}{name}": value for name in CLASSES}}


def ending(tmp_path, source, **given):
    said: list[str] = []
    args = {"checkpoint_dir": tmp_path / "checkpoints", "spec": {"model": "tinycnn"}, "source": source,
            "last": scalars(0.7), "checkpoint": None, "epochs_done": 2, "frameworks": {"Toy": "1.0"},
            "tracker": None, "reporter": None, "pruned_at": None, "say": said.append} | given
    args["checkpoint_dir"].mkdir(exist_ok=True)
    path = wrap_up(**args)
    return path, said


def test_the_card_holds_the_last_validation_and_the_programs_frameworks(tmp_path, source):
    path, said = ending(tmp_path, source)
    card = json.loads(path.read_text())
    assert path.name == CARD_FILE and said == [f"model card: {path}"]
    assert card["auroc"]["mean"] == pytest.approx(0.7) and card["environment"]["frameworks"] == {"Toy": "1.0"}


def test_a_run_that_trained_nothing_takes_the_last_epoch_from_the_checkpoints_record(tmp_path, source):
    record = tblog.record_path(tmp_path / "checkpoints")
    for epoch, value in ((1, 0.6), (2, 0.8)):
        tblog.append_record(record, tblog.EpochScalars(epoch, scalars(value), "run"))
    path, _ = ending(tmp_path, source, last=None)
    assert json.loads(path.read_text())["auroc"]["mean"] == pytest.approx(0.8)


def test_a_card_the_dashboard_would_not_read_is_said_not_written(tmp_path, source):
    path, said = ending(tmp_path, source, spec={"model": ["not", "a", "setting"]})
    assert path is None and said[0].startswith("model card not written: ") and not list(tmp_path.rglob(CARD_FILE))


@pytest.mark.parametrize(("pruned_at", "state"), [(None, "COMPLETE"), (2, "PRUNED")])
def test_the_trial_is_told_its_end_once(tmp_path, source, pruned_at, state):
    (tmp_path / sweep.PLAN_FILE).write_text(json.dumps(PLAN))
    number, _, _ = sweep.attach(tmp_path, 0)
    reporter = sweep.TrialReporter(tmp_path, 0, number)
    reporter.report(1, 0.6)
    ending(tmp_path, source, reporter=reporter, pruned_at=pruned_at)
    trials = json.loads(json.dumps(sweep.status(tmp_path)))["trials"]
    assert [t["state"] for t in trials] == [state]
