"""Killed and re-run: how `chexnet.train` starts from the latest checkpoint and keeps TensorBoard whole.

Slurm's `--requeue` SIGKILLs a job whose node died and re-runs the same command with `--resume` in the same logdir
and checkpoint directory. TensorBoard then still holds every epoch of every per-epoch tag exactly once and no
throughput step twice: rank 0 keeps `<checkpoint-dir>/epochs.jsonl`, a record of each finished epoch's scalars
written before its checkpoint, writes an epoch to TensorBoard only after its checkpoint, and on `--resume` writes
from the record what a kill left out and skips what the logdir already holds (`programkit.tblog`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import tensorflow as tf

from chexnet.lines import say
from programkit import runlines, tblog
from programkit.tags import EPOCH_TAGS

if TYPE_CHECKING:
    from programkit.tracking import RunTracker


def restore_or_start(model: tf.keras.Model, checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager,
                     epoch_done: tf.Variable, saved_lr: tf.Variable, *, resume: bool, epochs: int,
                     chief: bool) -> int:
    """Rank 0 restores (only it needs to see the checkpoint directory); the state then goes to every rank.
    Returns the number of epochs already done."""
    import horovod.tensorflow as hvd_tf

    state = (0, None)
    # Every rank builds the optimizer's slots now, eagerly: then the checkpoint restores them at once, and their
    # names (which Horovod's broadcast matches across ranks) are the same everywhere. Slots made lazily inside
    # the first train step get other names, and the broadcast of a restored rank 0 would wait forever.
    optimizer = model.optimizer
    getattr(optimizer, "inner_optimizer", optimizer).build(model.trainable_variables)
    if chief:
        latest = manager.latest_checkpoint
        if resume and latest:
            checkpoint.restore(latest).assert_existing_objects_matched()
            state = (int(epoch_done.numpy()), float(saved_lr.numpy()))
            say(runlines.resuming(latest, state[0], epochs, f" at lr {state[1]:.3g}"))
        elif resume:
            say(runlines.starting_fresh(manager.directory))
        elif latest:
            say(f"{manager.directory} already holds checkpoints ({latest}); starting fresh because --resume was "
                "not given, and they will be replaced")
    start_epoch, lr = hvd_tf.broadcast_object(state, root_rank=0, name="resume_state")
    if lr is not None:
        model.optimizer.learning_rate.assign(lr)
    # Same weights everywhere before the first step, so the first gradients are averaged over one model.
    hvd_tf.broadcast_variables(model.variables, root_rank=0)
    return start_epoch


def epoch_log(logdir: Path, checkpoint_dir: Path, start_epoch: int, *, resume: bool) -> EpochLog:
    """Rank 0's TensorBoard scalars: on --resume it learns what the logdir holds and writes from the record the
    epochs that a kill left out (see programkit.tblog)."""
    logged = tblog.read_logdir(logdir) if resume else tblog.LoggedSteps()
    record = tblog.record_path(checkpoint_dir)
    if start_epoch == 0:
        tblog.reset_record(record)  # a fresh start: the record describes checkpoints that will be replaced
    log = EpochLog(logdir, record, logged)
    log.catch_up(start_epoch)
    return log


class EpochLog:
    """Rank 0's per-epoch TensorBoard scalars, each (tag, epoch) written once across kills and resumes.

    `record` appends an epoch to `<checkpoint-dir>/epochs.jsonl` (before its checkpoint is saved), `publish`
    writes it to TensorBoard and, with a `tracker`, to MLflow (after), `catch_up` writes to TensorBoard what a kill
    between the two left out (the tracker catches MLflow up itself: programkit.tracking). Every write skips what
    `logged` (the logdir's event files, read when resuming) already holds. The writer is made on first use, so a
    resumed run with nothing to train and nothing to catch up adds no event file.
    """

    def __init__(self, logdir: Path, record_path: Path, logged: tblog.LoggedSteps) -> None:
        self.logdir = logdir
        self.record_path = record_path
        self.logged = logged
        self._writer: tf.summary.SummaryWriter | None = None
        self._since = time.monotonic()  # an epoch's wall time: from the last record (or the start) to this one
        self.tracker: RunTracker | None = None  # rank 0's MLflow run, when the job has one

    @property
    def writer(self) -> tf.summary.SummaryWriter:
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(str(self.logdir))
        return self._writer

    def record(self, values: Mapping[str, object], images_per_sec: float | None = None,
               checkpoint: str | None = None) -> tblog.EpochScalars:
        """Appends one `WholeSetValidation.history` entry to the durable record (with the epoch's images/sec, the
        checkpoint about to be saved and the time since the last one), prints its line; returns it as recorded."""
        # Plain floats: they go to JSON, and the live and the re-written values must be the same numbers.
        # .get: a history entry without a tag (no SkippedRecords in the run) has nothing to write for it.
        scalars = {tag: None if values.get(tag) is None else float(values[tag]) for tag in EPOCH_TAGS}
        now = time.monotonic()
        rate = float(images_per_sec) if images_per_sec is not None and math.isfinite(images_per_sec) else None
        entry = tblog.EpochScalars(epoch=int(values["epoch"]), scalars=scalars, logdir=tblog.logdir_key(self.logdir),
                                   images_per_sec=rate, checkpoint=checkpoint,
                                   seconds=round(now - self._since, 3), program="chexnet")
        self._since = now
        tblog.append_record(self.record_path, entry)
        entry.print_line()
        return entry

    def publish(self, entry: tblog.EpochScalars) -> int:
        """After the epoch's checkpoint: its scalars to MLflow, and those the logdir lacks to TensorBoard (flushed);
        returns how many it wrote to TensorBoard."""
        if self.tracker is not None:
            self.tracker.epoch(entry)
        return self._write(entry)

    def _write(self, entry: tblog.EpochScalars) -> int:
        tags = tblog.missing_tags(entry, self.logged)
        with self.writer.as_default():
            for tag in tags:
                tf.summary.scalar(tag, entry.scalars[tag], step=entry.epoch)
                self.logged.add(tag, entry.epoch)
        self.writer.flush()
        return len(tags)

    def catch_up(self, checkpoint_epoch: int) -> list[int]:
        """Writes, from the record, the epochs up to the checkpoint's that the logdir lacks; returns them."""
        entries = tblog.epochs_to_rewrite(tblog.read_record(self.record_path), self.logged, checkpoint_epoch,
                                          tblog.logdir_key(self.logdir))
        for entry in entries:
            self._write(entry)
            say(f"wrote epoch {entry.epoch} to TensorBoard from the checkpoint's record (the run before was "
                "stopped between saving and logging it)")
        return [entry.epoch for entry in entries]

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
