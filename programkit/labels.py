"""The 14 ChestX-ray14 pathologies, in the dataset's order, and how a "Finding Labels" cell becomes a vector."""

from __future__ import annotations

import numpy as np

CLASSES: tuple[str, ...] = (
    "Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia", "Pneumothorax",
    "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia",
)
NUM_CLASSES = len(CLASSES)
NO_FINDING = "No Finding"
_INDEX = {name: i for i, name in enumerate(CLASSES)}


class UnknownLabel(ValueError):
    """A "Finding Labels" cell names something that is not one of the 14 classes."""


def encode(finding_labels: str) -> np.ndarray:
    """`"Effusion|Mass"` -> a float32 vector of 14 zeros and ones; `"No Finding"` -> all zeros."""
    vector = np.zeros(NUM_CLASSES, dtype=np.float32)
    text = finding_labels.strip()
    if text == NO_FINDING:
        return vector
    for name in text.split("|"):
        name = name.strip()
        if name not in _INDEX:
            raise UnknownLabel(f"unknown label {name!r}; allowed: {', '.join(CLASSES)} or {NO_FINDING!r}")
        vector[_INDEX[name]] = 1.0
    return vector


def decode(vector: np.ndarray) -> str:
    """The inverse of `encode`: a 14-vector -> `"Effusion|Mass"` or `"No Finding"`."""
    names = [CLASSES[i] for i in np.flatnonzero(np.asarray(vector) > 0.5)]
    return "|".join(names) if names else NO_FINDING
