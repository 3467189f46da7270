"""`chexnet.train` with the tests' hooks (chexnet.train.TrainHooks), given at its edge:
`python -m tests.chexnet_hooks [--weights-digest-dir D] <chexnet.train's flags>`, run as root from the checkout
(tests/integration/helpers.py: the users' processes never run it).

- `--weights-digest-dir D`: every rank writes `D/rank<r>.sha256`, the SHA-256 of its final weights, so that a
  check can prove the replicas ended identical.
- environment `CHEXNET_INJECT_NAN_AT_STEP=K`: from the K-th batch (counting from 1) on, the labels are NaN,
  the way a corrupt record would poison training; it exercises the NaN guard end to end. With
  `CHEXNET_INJECT_NAN_RANK=R` only rank R is poisoned (the others must still stop, not hang).

With neither given the hooks change nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from programkit.cli import UsageError

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

INJECT_NAN_ENV = "CHEXNET_INJECT_NAN_AT_STEP"
INJECT_NAN_RANK_ENV = "CHEXNET_INJECT_NAN_RANK"


@dataclass(frozen=True)
class Hooks:
    """This rank's test switches: `feed` wraps the training stream, `finished` runs after a successful fit."""

    rank: int
    digest_dir: Path | None = None
    nan_from_step: int | None = None  # this rank's labels turn NaN from this batch on

    def feed(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """The training stream, poisoned from `nan_from_step` on; otherwise the dataset as it is."""
        if self.nan_from_step is None:
            return dataset
        return poisoned(dataset, self.nan_from_step)

    def finished(self, weights: list[np.ndarray]) -> None:
        if self.digest_dir is not None:
            write_digest(self.digest_dir, self.rank, weights)


def hooks_for(rank: int, digest_dir: Path | None) -> Hooks:
    """Reads the environment; raises UsageError naming the variable when its value is not a step number."""
    value, only_rank = os.environ.get(INJECT_NAN_ENV, ""), os.environ.get(INJECT_NAN_RANK_ENV, "")
    if not value or (only_rank and only_rank != str(rank)):
        return Hooks(rank, digest_dir)
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise UsageError(f"{INJECT_NAN_ENV} must be a step number >= 1; got {value!r}")
    return Hooks(rank, digest_dir, int(value))


def poisoned(dataset: tf.data.Dataset, first_bad: int) -> tf.data.Dataset:
    import tensorflow as tf

    def poison(step: tf.Tensor, batch: tuple[tf.Tensor, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        # The labels, not the pixels: a NaN pixel can vanish in a ReLU (max(NaN, 0) is 0 on CPU), a NaN label
        # reaches the loss for sure, and its gradient then turns the weights NaN on every rank.
        images, labels = batch
        return images, tf.where(step >= first_bad, labels * float("nan"), labels)

    return dataset.enumerate(start=1).map(poison)


def weights_digest(weights: list[np.ndarray]) -> str:
    """SHA-256 over the weights' bytes in model order: equal digests, identical replicas."""
    digest = hashlib.sha256()
    for array in weights:
        digest.update(array.tobytes())
    return digest.hexdigest()


def write_digest(directory: Path, rank: int, weights: list[np.ndarray]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"rank{rank}.sha256").write_text(weights_digest(weights) + "\n")


def main(argv: list[str] | None = None) -> int:
    """chexnet.train's main, its flags without ours, with each rank's hooks."""
    ours = argparse.ArgumentParser(add_help=False)
    ours.add_argument("--weights-digest-dir", type=Path)
    given, rest = ours.parse_known_args(argv)
    from chexnet import train

    return train.main(rest, hooks=lambda rank: hooks_for(rank, given.weights_digest_dir))


if __name__ == "__main__":
    sys.exit(main())
