"""The toy program: `python -m tests.toyprogram --data-dir D --logdir L --checkpoint-dir C ...` (__main__.py).

Each image (a ChestX-ray14 layout of PNGs: programkit.data.sources) is read grey at --image-size, and its
--grid x --grid cells' mean brightnesses, standardised within the image, are the features of one logistic read-out
per pathology, trained with Adam. Everything the portal reads of a program is the kit's: the per-epoch record and
TensorBoard's tags (programkit.tblog, through tests.toyprogram.board), the resume lines (programkit.runlines), a
sweep's trial (programkit.trials, programkit.sweep), MLflow (programkit.tracking) and the end of the run
(programkit.wrapup). Exact resume: each epoch's checkpoint, `ckpt-<epoch>.npz` (written whole, then renamed), holds
the weights, Adam's moments and the global step; the order of an epoch's images is a function of (seed, epoch).

Under a launcher of several processes, rank 0 trains and the others end at once: it is a toy.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from PIL import Image

from programkit import runlines, sweep, tblog, tracking
from programkit.cli import EXIT_USAGE, OneLineParser, TrainFlags, UsageError, require_choice
from programkit.data.chestxray14 import DataError, labels_matrix
from programkit.data.sources import IMAGES, DataSource, source_of
from programkit.labels import CLASSES, NUM_CLASSES
from programkit.metrics import auroc_per_class, mean_auroc
from programkit.model_card import installed
from programkit.tags import (
    AUROC_TAG_PREFIX,
    TAG_AUROC_MEAN,
    TAG_LOSS_TRAIN,
    TAG_LOSS_VAL,
    TAG_LR,
    THROUGHPUT_EVERY_STEPS,
)
from programkit.trials import trial_params
from programkit.wrapup import wrap_up

from .board import Board
from .program import FIELDS, NAME

PROG = __package__ or "toyprogram"  # tests.toyprogram, or toyprogram where a site put it (tests/conftest.py)
MODELS = ("tinycnn",)
BETAS, EPSILON = (0.9, 0.999), 1e-8


@dataclass(frozen=True, kw_only=True)
class ToyConfig(TrainFlags):
    """The kit's training flags (programkit.cli.TrainFlags: --warmup-epochs is taken and has nothing to ramp on one
    process) and the toy's --grid."""

    grid: int = 4

    def validate(self) -> None:
        self.check_training()
        require_choice("--model", self.model, MODELS)
        if not 2 <= self.grid <= min(8, self.image_size):
            raise UsageError(f"--grid must be 2 to 8 (and at most --image-size); got {self.grid}")


def parse_args(argv: list[str] | None) -> ToyConfig:
    p = OneLineParser(prog=f"python -m {PROG}", description=__doc__.splitlines()[0])
    ToyConfig.add_train_arguments(p, worker="process")
    p.add_argument("--grid", type=int, default=ToyConfig.grid, help="cells per side whose brightness is weighed")
    a = p.parse_args(argv)
    cfg = ToyConfig(**TrainFlags.train_values(a), grid=a.grid)
    return cfg if cfg.trial is None else replace(cfg, **trial_params(cfg.trial, FIELDS))


def say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_args(argv)
        cfg.validate()
        if int(os.environ.get("RANK", "0")):
            return 0  # a toy: rank 0 trains alone
        return run(cfg)
    except (UsageError, DataError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr, flush=True)
        return EXIT_USAGE


class Images:
    """One split's images (their files and labels) and the features of a batch of them, read when asked."""

    def __init__(self, source: DataSource, split: str, size: int, grid: int) -> None:
        records = source.index.split(split) if source.index is not None else []
        self.paths, self.labels = [r.path for r in records], labels_matrix(records)
        self.size, self.grid = size, grid

    def __len__(self) -> int:
        return len(self.paths)

    def features(self, indices: np.ndarray) -> np.ndarray:
        rows = []
        for index in indices:
            with Image.open(self.paths[index]) as image:
                pixels = np.asarray(image.convert("L").resize((self.size, self.size)), dtype=np.float32) / 255
            cell = self.size // self.grid
            cells = pixels[:cell * self.grid, :cell * self.grid].reshape(self.grid, cell, self.grid, cell)
            means = cells.mean(axis=(1, 3)).ravel()
            rows.append((means - means.mean()) / (means.std() + 1e-6))
        return np.stack(rows)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-np.clip(logits, -30, 30)))


def bce(scores: np.ndarray, labels: np.ndarray) -> float:
    scores = np.clip(scores, 1e-7, 1 - 1e-7)
    return float(-np.mean(labels * np.log(scores) + (1 - labels) * np.log(1 - scores)))


class Model:
    """The read-out's weights and Adam's moments, and their checkpoints."""

    def __init__(self, features: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.params = {"w": rng.normal(0, 0.01, (features, NUM_CLASSES)), "b": np.zeros(NUM_CLASSES)}
        self.moments = {f"{kind}_{name}": np.zeros_like(value) for name, value in self.params.items()
                        for kind in ("m", "v")}
        self.step = 0

    def scores(self, x: np.ndarray) -> np.ndarray:
        return sigmoid(x @ self.params["w"] + self.params["b"])

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        scores = self.scores(x)
        error = (scores - y) / len(x)
        grads = {"w": x.T @ error, "b": error.sum(axis=0)}
        self.step += 1
        for name, grad in grads.items():
            m, v = self.moments[f"m_{name}"], self.moments[f"v_{name}"]
            m[:] = BETAS[0] * m + (1 - BETAS[0]) * grad
            v[:] = BETAS[1] * v + (1 - BETAS[1]) * grad ** 2
            m_hat, v_hat = m / (1 - BETAS[0] ** self.step), v / (1 - BETAS[1] ** self.step)
            self.params[name] -= lr * m_hat / (np.sqrt(v_hat) + EPSILON)
        return bce(scores, y)

    def save(self, directory: Path, epoch: int) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path, partial = directory / f"ckpt-{epoch}.npz", directory / f".ckpt-{epoch}.npz.partial"
        with partial.open("wb") as out:
            np.savez(out, step=self.step, **self.params, **self.moments)
            out.flush()
            os.fsync(out.fileno())
        partial.rename(path)
        return path

    def restore(self, path: Path) -> None:
        with np.load(path) as saved:
            self.step = int(saved["step"])
            for name in self.params:
                self.params[name] = saved[name].copy()
            for name in self.moments:
                self.moments[name] = saved[name].copy()


def latest(directory: Path) -> tuple[int, Path | None]:
    found = [(int(p.stem.split("-")[1]), p) for p in directory.glob("ckpt-*.npz") if p.stem.split("-")[1].isdigit()]
    return max(found, default=(0, None))


def run(cfg: ToyConfig) -> int:
    source = source_of(cfg.data_dir)
    if source.kind != IMAGES:
        raise DataError(f"{cfg.data_dir}: the toy reads a ChestX-ray14 layout of PNGs, not TFRecords")
    train_set, val_set = (Images(source, split, cfg.image_size, cfg.grid) for split in ("train", "val"))
    steps_per_epoch = len(train_set) // cfg.batch_size
    if not steps_per_epoch or not len(val_set):
        raise DataError(f"{len(train_set)} training and {len(val_set)} validation images make no epoch of "
                        f"--batch-size {cfg.batch_size}")
    model = Model(cfg.grid ** 2, cfg.seed)
    start_epoch, checkpoint = latest(cfg.checkpoint_dir) if cfg.resume else (0, None)
    if checkpoint is not None:
        model.restore(checkpoint)
    if cfg.resume:
        say(runlines.resuming(checkpoint, start_epoch, cfg.epochs) if checkpoint else
            runlines.starting_fresh(cfg.checkpoint_dir))
    params = {"program": NAME, "model": cfg.model, "image_size": cfg.image_size, "batch_size": cfg.batch_size,
              "workers": 1, "lr": cfg.lr, "grid": cfg.grid}
    board = Board(cfg.logdir, tblog.record_path(cfg.checkpoint_dir), resume=cfg.resume)
    reporter = sweep.TrialReporter.for_program(cfg.trial, cfg.checkpoint_dir, start_epoch, say)
    tracker = tracking.RunTracker.start({**params, "epochs": cfg.epochs, "seed": cfg.seed}, say,
                                        epochs_done=start_epoch, checkpoint_dir=cfg.checkpoint_dir, logdir=cfg.logdir)
    board.tracker = tracker
    board.start(params, trial_id=tblog.run_name(cfg.logdir))
    if start_epoch and (written := board.catch_up(start_epoch)):
        say(f"wrote {written} epoch(s) to TensorBoard from the checkpoint's record")
    last, pruned_at = None, None
    with tracking.failing(tracker):
        for epoch in range(start_epoch + 1, cfg.epochs + 1):
            started = time.perf_counter()
            train_loss, images_per_sec = train_epoch(model, train_set, cfg, epoch, board, steps_per_epoch)
            last = validate(model, val_set, cfg.batch_size)
            last[TAG_LOSS_TRAIN], last[TAG_LR] = train_loss, cfg.lr
            entry = tblog.EpochScalars(epoch, {tag: last.get(tag) for tag in epoch_tags()},
                                       tblog.logdir_key(cfg.logdir), images_per_sec=images_per_sec,
                                       checkpoint=f"ckpt-{epoch}", seconds=round(time.perf_counter() - started, 3),
                                       program=NAME)
            board.record(entry)  # before the checkpoint (programkit.tblog)
            model.save(cfg.checkpoint_dir, epoch)
            board.publish(entry)
            say(f"epoch {epoch}/{cfg.epochs}: loss/train={train_loss:.4f} auroc/mean={last.get(TAG_AUROC_MEAN)}")
            if reporter is not None and reporter.report(epoch, last.get(TAG_AUROC_MEAN)):  # never after the last
                say(f"sweep: pruned at epoch {epoch} by the {reporter.plan.pruner} pruner")
                pruned_at = epoch
                break
    board.close()
    done, saved = latest(cfg.checkpoint_dir)
    wrap_up(checkpoint_dir=cfg.checkpoint_dir, spec={**params, "epochs": cfg.epochs, "seed": cfg.seed}, source=source,
            last=last, checkpoint=str(saved.with_suffix("")) if saved else None, epochs_done=done,
            frameworks={"NumPy": np.__version__, "Pillow": installed("Pillow")}, tracker=tracker, reporter=reporter,
            pruned_at=pruned_at, say=say)
    return 0


def epoch_tags() -> tuple[str, ...]:
    return (TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_LR, TAG_AUROC_MEAN, *(f"{AUROC_TAG_PREFIX}{name}" for name in CLASSES))


def train_epoch(model: Model, images: Images, cfg: ToyConfig, epoch: int, board: Board,
                steps: int) -> tuple[float, float]:
    """One epoch in an order drawn from (seed, epoch): its mean loss and images/sec; throughput every few steps."""
    order = np.random.default_rng((cfg.seed, epoch)).permutation(len(images))
    losses, window, timed = [], (0, 0.0), (0, 0.0)
    for index in range(steps):
        started = time.perf_counter()
        batch = order[index * cfg.batch_size:(index + 1) * cfg.batch_size]
        losses.append(model.train_step(images.features(batch), images.labels[batch], cfg.lr))
        took = time.perf_counter() - started
        window, timed = (window[0] + 1, window[1] + took), (timed[0] + 1, timed[1] + took)
        if window[0] >= THROUGHPUT_EVERY_STEPS or index == steps - 1:
            board.throughput(window[0] * cfg.batch_size / window[1], model.step)
            window = (0, 0.0)
    return float(np.mean(losses)), timed[0] * cfg.batch_size / timed[1]


def validate(model: Model, images: Images, batch_size: int) -> dict[str, float | None]:
    """The loss and exact per-class AUROC on the whole validation split."""
    indices = np.arange(len(images))
    scores = np.concatenate([model.scores(images.features(indices[i:i + batch_size]))
                             for i in range(0, len(images), batch_size)])
    per_class = auroc_per_class(images.labels, scores)
    found: dict[str, float | None] = {TAG_LOSS_VAL: bce(scores, images.labels), TAG_AUROC_MEAN: mean_auroc(per_class)}
    found.update({f"{AUROC_TAG_PREFIX}{name}": value for name, value in per_class.items()})
    return found
