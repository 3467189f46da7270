"""Keras callbacks for Horovod training: NaN guard, throughput, whole-set validation AUROC, TensorBoard, checkpoints.

TensorBoard tags (an interface: the portal's dashboard and the checks read them), all written by rank 0 only:
- `throughput/images_per_sec`: images/sec of all workers together (one rank's rate x the number of workers), every
  `THROUGHPUT_EVERY_STEPS` steps; step = global training step. The first step of every epoch (graph compile on the
  first epoch, validation in between later) is left out of the measurement.
- `loss/train` (averaged over ranks), `loss/val`, `lr` (the rate the epoch trained with), `auroc/mean` and
  `auroc/<Class>` for the 14 classes; step = the epoch number, counting from 1.
  AUROC is exact (scikit-learn) on the WHOLE validation split: every rank predicts its own shard, the predictions
  and labels are allgathered, every rank computes the same numbers and rank 0 writes them. A class whose
  validation labels are all one value has no AUROC: its `auroc/<Class>` is NOT written for that epoch, and it
  is left out of `auroc/mean`.
- `data/skipped_records`: the training and validation records that the input pipelines of all workers could not
  read, parse or decode in the epoch (0 when none); step = the epoch number. `SkippedRecords` also logs a line
  naming the files, and stops training when more than a set share of a split was unreadable.
- a custom-scalars layout (throughput on one chart, the AUROCs on another, the losses on a third) and an hparams
  summary (model, batch, workers, image size, fp16, xla, pipeline), both at the start of a run.

A job killed at any moment and re-run with `--resume` in the same logdir still holds every epoch of every
per-epoch tag exactly once, and no throughput step twice: `CheckpointSaver` records an epoch's scalars before the
checkpoint and writes them to TensorBoard after it (through `chexnet.resume.EpochLog`, which also writes what a kill
left out), and `ThroughputLogger` skips the steps the logdir already holds (`programkit.tblog` has the whole argument).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import summary as custom_scalar_summary
from tensorboard.plugins.hparams import api as hp

from chexnet.data import integrity
from programkit import tblog
from programkit.labels import CLASSES, NUM_CLASSES
from programkit.metrics import auroc_per_class, mean_auroc
from programkit.reference import MODELS, PIPELINES

if TYPE_CHECKING:
    from chexnet.resume import EpochLog

from chexnet.lines import LOG_PREFIX, say  # noqa: F401  (the program's lines, where its modules read them)
from programkit.tags import (  # noqa: F401  (every program's tags, defined once: programkit.tags)
    ALL_TAGS,
    AUROC_TAG_PREFIX,
    AUROC_TAGS,
    EPOCH_TAGS,
    TAG_AUROC_MEAN,
    TAG_LOSS_TRAIN,
    TAG_LOSS_VAL,
    TAG_LR,
    TAG_SKIPPED,
    TAG_THROUGHPUT,
    THROUGHPUT_EVERY_STEPS,
)


def current_lr(model: tf.keras.Model) -> float:
    return float(tf.keras.backend.get_value(model.optimizer.learning_rate))


class DeclaredCallback(tf.keras.callbacks.Callback):
    """A callback declared as a dataclass (with eq=False: equal only to itself and hashable, as Keras' callbacks
    are): what it is given is written once, as fields, and Keras' own set-up runs after them."""

    def __post_init__(self) -> None:
        super().__init__()


class NanGuard(tf.keras.callbacks.Callback):
    """Stops training on every rank as soon as any rank's loss is NaN or infinite, and remembers where.

    The decision is an allreduce, so all ranks stop after the same step: a rank that stopped alone would leave
    the others blocked in their next gradient allreduce. `train.py` turns `tripped` into a non-zero exit
    (Keras' TerminateOnNaN only stops, and the process then exits 0).
    """

    def __init__(self) -> None:
        super().__init__()
        self.tripped = False
        self.where = ""
        self._epoch = 0

    def on_epoch_begin(self, epoch: int, logs: Mapping | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: Mapping | None = None) -> None:
        loss = float((logs or {}).get("loss", math.nan))
        bad_here = 0.0 if math.isfinite(loss) else 1.0
        bad_anywhere = float(hvd.allreduce(tf.constant(bad_here), op=hvd.Sum, name="nan_guard"))
        if bad_anywhere > 0 and not self.tripped:
            self.tripped = True
            self.where = f"epoch {self._epoch + 1}, step {batch + 1}"
            self.model.stop_training = True


@dataclass(eq=False)
class ThroughputLogger(DeclaredCallback):
    """Writes `throughput/images_per_sec` (all workers) every `every_steps` steps; keeps the epoch's mean rate.

    Measured end-of-step to end-of-step, so data waits and callback overheads count; the first step of each
    epoch is skipped because it carries the graph compile (first epoch) or follows validation (later ones).
    Points at or below `logged_through` are not written: a resumed run re-trains the epoch that a kill cut short,
    and the logdir may already hold that epoch's first points.
    """

    writer: tf.summary.SummaryWriter | None
    images_per_step: int
    steps_per_epoch: int
    every_steps: int = THROUGHPUT_EVERY_STEPS
    logged_through: int = 0
    epoch_images_per_sec: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.on_epoch_begin(0)

    def on_epoch_begin(self, epoch: int, logs: Mapping | None = None) -> None:
        self._epoch = epoch
        self._last_end = None
        self._window = (0, 0.0)
        self._epoch_total = (0, 0.0)

    def on_train_batch_end(self, batch: int, logs: Mapping | None = None) -> None:
        now = time.perf_counter()
        if self._last_end is not None:
            elapsed = now - self._last_end
            self._window = (self._window[0] + 1, self._window[1] + elapsed)
            self._epoch_total = (self._epoch_total[0] + 1, self._epoch_total[1] + elapsed)
            if self._window[0] >= self.every_steps:
                self._write(self._rate(self._window), self._epoch * self.steps_per_epoch + batch + 1)
                self._window = (0, 0.0)
        self._last_end = now

    def on_epoch_end(self, epoch: int, logs: Mapping | None = None) -> None:
        steps = self._epoch_total[0]
        self.epoch_images_per_sec = self._rate(self._epoch_total) if steps else None
        if 0 < self._window[0] and steps < self.every_steps:
            # A short epoch never filled a window: write what it measured rather than nothing.
            self._write(self._rate(self._window), (epoch + 1) * self.steps_per_epoch)

    def _rate(self, window: tuple[int, float]) -> float:
        steps, seconds = window
        return steps * self.images_per_step / seconds if seconds > 0 else math.nan

    def _write(self, images_per_sec: float, step: int) -> None:
        if self.writer is not None and step > self.logged_through:
            with self.writer.as_default():
                tf.summary.scalar(TAG_THROUGHPUT, images_per_sec, step=step)


def average_across_ranks(variables: list[tf.Variable]) -> None:
    """Batch-norm moving statistics are updated from each rank's own batches and drift apart: averaging them
    makes every rank evaluate, checkpoint and finish with the same model."""
    if hvd.size() == 1 or not variables:
        return
    averaged = hvd.grouped_allreduce([v.read_value() for v in variables], op=hvd.Average)
    for variable, value in zip(variables, averaged, strict=True):
        variable.assign(value)


@dataclass(eq=False)
class WholeSetValidation(DeclaredCallback):
    """At each epoch's end: sync batch-norm statistics, predict this rank's validation shard, allgather, and
    compute loss/val and exact per-class AUROC on the whole split; rank 0 (`announce`) prints the epoch's line.

    Puts `val_loss` and `val_auroc` into the epoch logs, so callbacks after it (ReduceLROnPlateau) see them, and
    the epoch's scalars into `history`; `CheckpointSaver` writes them to TensorBoard once the checkpoint is saved.
    """

    eval_dataset: tf.data.Dataset
    loss: Callable
    guard: NanGuard
    throughput: ThroughputLogger
    epochs: int
    announce: bool
    jit_compile: bool = False
    history: list[dict[str, float | None]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._predict = None

    def on_train_begin(self, logs: Mapping | None = None) -> None:
        model = self.model
        self._predict = tf.function(lambda images: model(images, training=False), jit_compile=self.jit_compile,
                                    reduce_retracing=True)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs if logs is not None else {}
        if self.guard.tripped:
            logs["val_loss"] = math.nan  # callbacks after this one expect the key; the run is about to fail
            return  # the weights are NaN: nothing worth measuring
        average_across_ranks(self.model.non_trainable_variables)
        labels, scores = self._gather_predictions()
        val_loss = float(tf.reduce_mean(self.loss(tf.constant(labels), tf.constant(scores))))
        per_class = auroc_per_class(labels, scores)
        mean = mean_auroc(per_class)
        logs["val_loss"] = val_loss
        logs["val_auroc"] = mean if mean is not None else math.nan
        record = {"epoch": epoch + 1, TAG_LOSS_TRAIN: float(logs.get("loss", math.nan)), TAG_LOSS_VAL: val_loss,
                  TAG_LR: current_lr(self.model), TAG_AUROC_MEAN: mean,
                  **{f"{AUROC_TAG_PREFIX}{name}": value for name, value in per_class.items()}}
        self.history.append(record)
        if self.announce:
            self._announce(record, len(labels))

    def _gather_predictions(self) -> tuple[np.ndarray, np.ndarray]:
        labels, scores = [], []
        for images, batch_labels in self.eval_dataset:
            scores.append(self._predict(images))
            labels.append(tf.cast(batch_labels, tf.float32))
        empty = tf.zeros((0, NUM_CLASSES), tf.float32)
        local_labels = tf.concat(labels, axis=0) if labels else empty
        local_scores = tf.concat(scores, axis=0) if scores else empty
        # allgather takes shards of different lengths: the eval split is not padded or dropped to divide evenly.
        return hvd.allgather(local_labels).numpy(), hvd.allgather(local_scores).numpy()

    def _announce(self, record: dict, n_images: int) -> None:
        mean = record[TAG_AUROC_MEAN]
        undefined = [name for name in CLASSES if record[f"{AUROC_TAG_PREFIX}{name}"] is None]
        rate = self.throughput.epoch_images_per_sec
        say(f"epoch {record['epoch']}/{self.epochs}: loss/train={record[TAG_LOSS_TRAIN]:.4f} "
            f"loss/val={record[TAG_LOSS_VAL]:.4f} auroc/mean={'undefined' if mean is None else f'{mean:.4f}'} "
            f"on {n_images} validation images, lr={record[TAG_LR]:.3g}, "
            f"images/sec={'n/a' if rate is None else f'{rate:.1f}'} (all workers)"
            + (f"; AUROC undefined (one label value only) for {', '.join(undefined)}" if undefined else ""))


@dataclass(eq=False)
class SkippedRecords(DeclaredCallback):
    """At each epoch's end, after validation: what the pipelines of all workers skipped in the epoch, per split.

    Rank 0 (`announce`) logs a line naming the files when anything was skipped; the epoch's total goes into its
    scalars as `data/skipped_records` (through `validation.history`, so it is logged exactly once like the others).
    When more than `max_fraction` of a split's records were unreadable, every rank stops after this epoch (the
    decision is made from the same allreduced numbers everywhere) and `failure` holds the message.
    """

    counters: list[integrity.SkipCounter]
    max_fraction: float
    validation: WholeSetValidation | None
    announce: bool
    failure: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._last = [counter.snapshot() for counter in self.counters]

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        found = []
        for i, counter in enumerate(self.counters):
            now = counter.snapshot()
            found.append(all_workers(now - self._last[i], counter.shared_reads))
            self._last[i] = now
        total = sum(counts.skipped for counts in found)
        if logs is not None:
            logs[TAG_SKIPPED] = total
        history = self.validation.history if self.validation is not None else []
        if history and history[-1]["epoch"] == epoch + 1:
            history[-1][TAG_SKIPPED] = total
        if self.announce and total:
            say(f"epoch {epoch + 1}: skipped unreadable records (all workers): "
                + "; ".join(counts.describe() for counts in found if counts.skipped))
        too_many = [counts for counts in found if counts.exceeds(self.max_fraction)]
        if too_many:
            self.failure = integrity.too_many_message(too_many, self.max_fraction)
            self.model.stop_training = True


def all_workers(counts: integrity.Counts, shared_reads: bool) -> integrity.Counts:
    """The sum over workers; what every worker reads (element sharding) is counted once: the maximum."""
    if hvd.size() == 1:
        return counts
    summed = hvd.allreduce(tf.constant(np.stack(counts.arrays())), op=hvd.Sum, name=f"skipped_{counts.split}")
    good, bad, lost, damaged, read = summed.numpy()
    if shared_reads:
        shared = hvd.allreduce(tf.constant(np.stack([counts.lost, counts.damaged, counts.read])), op=hvd.Max,
                               name=f"skipped_{counts.split}_shared")
        lost, damaged, read = shared.numpy()
    return counts.replace(good, bad, lost, damaged, read)


@dataclass(eq=False)
class CheckpointSaver(DeclaredCallback):
    """Rank 0 saves weights, optimizer state, the finished epoch and the learning rate after every epoch.

    Runs after ReduceLROnPlateau, so the saved rate is the one the next epoch would use. With an `epoch_log`, the
    epoch's scalars (from `validation`, with the rate the epoch trained with) are recorded BEFORE the save and
    written to TensorBoard only AFTER it: a kill before the save re-trains an epoch that TensorBoard does not
    hold yet, a kill after it leaves the scalars in the record for the resumed run's `EpochLog.catch_up`.
    """

    manager: tf.train.CheckpointManager
    epoch: tf.Variable
    lr: tf.Variable
    guard: NanGuard
    validation: WholeSetValidation | None = None
    epoch_log: EpochLog | None = None
    throughput: ThroughputLogger | None = None  # the epoch's images/sec, for the record

    def on_epoch_end(self, epoch: int, logs: Mapping | None = None) -> None:
        if self.guard.tripped:
            return  # never replace a good checkpoint with NaN weights
        entry = self._record(epoch + 1)
        self.epoch.assign(epoch + 1)
        self.lr.assign(current_lr(self.model))
        path = self.manager.save(checkpoint_number=epoch + 1)
        say(f"saved checkpoint {path} (epoch {epoch + 1}, lr {current_lr(self.model):.3g})")
        if entry is not None:
            self.epoch_log.publish(entry)

    def _record(self, epoch: int) -> tblog.EpochScalars | None:
        if self.epoch_log is None or self.validation is None or not self.validation.history:
            return None
        values = self.validation.history[-1]
        rate = self.throughput.epoch_images_per_sec if self.throughput is not None else None
        return self.epoch_log.record(values, rate, f"ckpt-{epoch}") if values["epoch"] == epoch else None


@dataclass(eq=False)
class SweepPruning(DeclaredCallback):
    """A sweep's trial (programkit.sweep): after each epoch rank 0 reports the validation mean AUROC to the study and
    asks its pruner; the answer goes to every rank (a broadcast), so all stop after the same epoch. Last in the
    list: the epoch is checkpointed and logged before the trial may end. `reporter` is rank 0's, None elsewhere.
    A study that cannot be reached (its storage fails) prunes nothing: the trial trains on and says why."""

    reporter: object | None  # programkit.sweep.TrialReporter on rank 0
    pruned_at: int | None = None  # the epoch (from 1) after which the pruner stopped the trial

    def on_epoch_end(self, epoch: int, logs: Mapping | None = None) -> None:
        stop = False
        if self.reporter is not None:
            value = (logs or {}).get("val_auroc")
            try:
                stop = bool(self.reporter.report(epoch + 1, None if value is None else float(value)))
            except Exception as err:  # noqa: BLE001 - any storage failure: rank 0 alone must not raise here
                say(f"sweep: could not report epoch {epoch + 1} to the study ({type(err).__name__}: {err}); "
                    "training on without pruning this epoch")
        stop = bool(hvd.broadcast_object(stop, root_rank=0, name="sweep_prune"))
        if stop:
            self.pruned_at = epoch + 1
            self.model.stop_training = True
            if self.reporter is not None:
                value = (logs or {}).get("val_auroc")
                say(f"sweep: pruned at epoch {epoch + 1} by the {self.reporter.plan.pruner} pruner (mean AUROC "
                    f"{math.nan if value is None else float(value):.4f})")


def write_layout(writer: tf.summary.SummaryWriter) -> None:
    """TensorBoard's custom-scalars layout: throughput on one chart, the AUROCs on another, losses on a third."""
    def chart(title: str, *patterns: str) -> layout_pb2.Chart:
        return layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=list(patterns)))

    layout = layout_pb2.Layout(category=[layout_pb2.Category(title="CheXNet training", chart=[
        chart("images/sec, all workers", f"^{TAG_THROUGHPUT}$"),
        chart("validation AUROC (mean and per class)", f"^{AUROC_TAG_PREFIX}"),
        chart("loss", f"^{TAG_LOSS_TRAIN}$", f"^{TAG_LOSS_VAL}$"),
    ])])
    with writer.as_default():
        tf.summary.experimental.write_raw_pb(custom_scalar_summary.pb(layout).SerializeToString(), step=0)


def write_hparams(writer: tf.summary.SummaryWriter, hparams: Mapping[str, object], trial_id: str) -> None:
    """The hparams plugin's experiment config and this run's values, so runs compare in the HPARAMS tab. Every
    run writes the same config (the same hparams, whatever it sets), and `trial_id` must be the run's own: runs
    with one id are folded into one row."""
    domains = {"model": hp.Discrete(list(MODELS)), "pipeline": hp.Discrete(list(PIPELINES)),
               "fp16": hp.Discrete([False, True]), "xla": hp.Discrete([False, True])}
    params = {name: hp.HParam(name, domains.get(name)) for name in hparams}
    metrics = [hp.Metric(TAG_AUROC_MEAN, display_name="mean AUROC (validation)"),
               hp.Metric(TAG_LOSS_VAL, display_name="validation loss"),
               hp.Metric(TAG_THROUGHPUT, display_name="images/sec (all workers)")]
    with writer.as_default():
        hp.hparams_config(hparams=list(params.values()), metrics=metrics)
        hp.hparams({params[name]: value for name, value in hparams.items()}, trial_id=trial_id)
    writer.flush()
