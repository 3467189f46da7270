"""Exact AUROC: equal to scikit-learn's, undefined classes are None and stay out of the mean."""

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from programkit.labels import CLASSES, NUM_CLASSES
from programkit.metrics import auroc_per_class, mean_auroc


def _random_set(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y_true = (rng.random((n, NUM_CLASSES)) < 0.3).astype(np.float32)
    y_score = np.clip(0.3 * y_true + rng.random((n, NUM_CLASSES)), 0, 1).astype(np.float32)
    return y_true, y_score


def test_equals_sklearn_per_class_and_in_the_mean():
    y_true, y_score = _random_set()
    per_class = auroc_per_class(y_true, y_score)
    assert list(per_class) == list(CLASSES)
    expected = [roc_auc_score(y_true[:, i], y_score[:, i]) for i in range(NUM_CLASSES)]
    assert [per_class[name] for name in CLASSES] == pytest.approx(expected, abs=1e-12)
    assert mean_auroc(per_class) == pytest.approx(np.mean(expected), abs=1e-12)
    assert 0.6 < mean_auroc(per_class) < 1.0  # the signal is there, so a broken score order would show


def test_single_valued_class_is_undefined_and_left_out_of_the_mean():
    y_true, y_score = _random_set(seed=1)
    y_true[:, CLASSES.index("Hernia")] = 0.0
    y_true[:, CLASSES.index("Edema")] = 1.0
    per_class = auroc_per_class(y_true, y_score)
    assert per_class["Hernia"] is None and per_class["Edema"] is None
    defined = [v for k, v in per_class.items() if k not in ("Hernia", "Edema")]
    assert all(v is not None for v in defined)
    assert mean_auroc(per_class) == pytest.approx(np.mean(defined), abs=1e-12)


def test_mean_of_nothing_defined_is_none():
    assert mean_auroc({name: None for name in CLASSES}) is None
    assert mean_auroc({"Mass": math.nan, "Edema": 0.5}) == 0.5


@pytest.mark.parametrize("shape", [(10,), (10, 13), (10, 15)])
def test_wrong_shape_names_the_argument(shape):
    with pytest.raises(ValueError, match=r"y_true must have shape \(n, 14\)"):
        auroc_per_class(np.zeros(shape), np.zeros(shape))


def test_score_shape_must_match():
    with pytest.raises(ValueError, match="y_score must have the shape of y_true"):
        auroc_per_class(np.zeros((4, NUM_CLASSES)), np.zeros((5, NUM_CLASSES)))
