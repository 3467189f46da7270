"""tests/chexnet_hooks.py: the hooks the integration tests give `chexnet.train`, read exactly as they set them."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from programkit.cli import UsageError
from tests.chexnet_hooks import INJECT_NAN_ENV, INJECT_NAN_RANK_ENV, hooks_for, weights_digest


def batches(count: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((tf.zeros([count, 2, 3]), tf.ones([count, 2, 4])))


def test_without_the_environment_the_stream_is_untouched(monkeypatch, tmp_path):
    monkeypatch.delenv(INJECT_NAN_ENV, raising=False)
    monkeypatch.delenv(INJECT_NAN_RANK_ENV, raising=False)
    hooks = hooks_for(0, None)
    dataset = batches(2)
    assert hooks.nan_from_step is None and hooks.feed(dataset) is dataset
    hooks.finished([np.zeros(3)])  # no digest directory: writes nothing
    assert not list(tmp_path.iterdir())


def test_labels_turn_nan_from_the_step_named_and_only_on_the_rank_named(monkeypatch):
    monkeypatch.setenv(INJECT_NAN_ENV, "2")
    monkeypatch.setenv(INJECT_NAN_RANK_ENV, "1")
    assert hooks_for(0, None).nan_from_step is None
    hooks = hooks_for(1, None)
    labels = [labels.numpy() for _, labels in hooks.feed(batches(3))]
    assert not np.isnan(labels[0]).any() and np.isnan(labels[1]).all() and np.isnan(labels[2]).all()
    monkeypatch.delenv(INJECT_NAN_RANK_ENV)
    assert hooks_for(0, None).nan_from_step == 2  # no rank named: every rank


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_step_names_the_variable(monkeypatch, value):
    monkeypatch.setenv(INJECT_NAN_ENV, value)
    monkeypatch.delenv(INJECT_NAN_RANK_ENV, raising=False)
    with pytest.raises(UsageError, match=f"{INJECT_NAN_ENV} must be a step number >= 1; got '{value}'"):
        hooks_for(0, None)


def test_each_rank_writes_the_digest_of_its_weights(monkeypatch, tmp_path):
    monkeypatch.delenv(INJECT_NAN_ENV, raising=False)
    weights = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(4, np.float32)]
    hooks_for(1, tmp_path / "digests").finished(weights)
    written = (tmp_path / "digests" / "rank1.sha256").read_text()
    assert written == weights_digest(weights) + "\n" and len(written.strip()) == 64
    assert weights_digest(weights) != weights_digest([weights[0], np.zeros(4, np.float32)])
