"""Exact per-class AUROC (scikit-learn's `roc_auc_score`), with undefined classes reported instead of crashing.

A class whose labels hold a single value (no positives, or no negatives) in the evaluated set has no ROC curve:
its AUROC is None ("undefined") and it is left out of the mean, which is what a small validation split needs.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.metrics import roc_auc_score

from programkit.labels import CLASSES, NUM_CLASSES


def _checked(y_true: np.ndarray, y_score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y_true = np.asarray(y_true)
    y_score = np.asarray(y_score, dtype=np.float64)
    expected = f"(n, {NUM_CLASSES})"
    if y_true.ndim != 2 or y_true.shape[1] != NUM_CLASSES:
        raise ValueError(f"y_true must have shape {expected}; got {y_true.shape}")
    if y_score.shape != y_true.shape:
        raise ValueError(f"y_score must have the shape of y_true {y_true.shape}; got {y_score.shape}")
    return y_true, y_score


def auroc_per_class(y_true: np.ndarray, y_score: np.ndarray) -> dict[str, float | None]:
    """{class name: exact AUROC, or None where that class's labels are all one value}."""
    y_true, y_score = _checked(y_true, y_score)
    result: dict[str, float | None] = {}
    for index, name in enumerate(CLASSES):
        labels = y_true[:, index] > 0.5
        if labels.all() or not labels.any():
            result[name] = None
        else:
            result[name] = float(roc_auc_score(labels, y_score[:, index]))
    return result


def mean_auroc(per_class: dict[str, float | None]) -> float | None:
    """The mean over the defined classes; None when no class is defined."""
    defined = [value for value in per_class.values() if value is not None and not math.isnan(value)]
    return float(np.mean(defined)) if defined else None
