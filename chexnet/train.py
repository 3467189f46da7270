"""Train CheXNet with Horovod: `python -m chexnet.train --data-dir D --logdir L --checkpoint-dir C ...`.

The same command runs alone, under `horovodrun -np N`, `mpirun` and `srun`: `hvd.init()` finds its peers from
whichever launched it. Exit codes: 0 done, 2 bad arguments or data (one line on stderr, no traceback),
3 the loss became NaN (training stops on every rank; the last good checkpoint is kept).

Killed and re-run with `--resume` (Slurm's `--requeue` after a node died), it continues from the latest checkpoint
and TensorBoard still holds every epoch once (`chexnet.resume`). Where the job has an MLflow run, rank 0 logs it
there too, continuing the same run after a requeue (`programkit.tracking`). The command line is in
`chexnet.train_args`. A caller of `main` may give hooks (`TrainHooks`) that wrap the training stream and look at the
final weights; the command line runs with none (the tests' own: tests/chexnet_hooks.py).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from chexnet.train_args import PROG, TrainConfig, parse_args, with_trial
from programkit.cli import EXIT_USAGE, UsageError
from programkit.cpus import usable_cores

# TensorFlow and Horovod are imported inside the functions that use them: a bad flag is then reported in a
# fraction of a second, before TensorFlow loads and prints its start-up chatter.
if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

    from chexnet import callbacks as cb
    from programkit.data.sources import DataSource

EXIT_NAN = 3
CHECKPOINTS_KEPT = 3
PLATEAU_FACTOR = 0.1  # the CheXNet paper: divide the rate by 10 when the validation loss plateaus
PLATEAU_PATIENCE = 1
MIN_LR = 1e-6


def _keras_verbosity(progress: str, chief: bool) -> int:
    """model.fit's verbose: only rank 0 reports; a bar rewrites itself with backspaces, which a log file keeps
    (and mpirun hands every rank a pseudo-terminal, so a batch job passes `--progress epoch`)."""
    if not chief:
        return 0
    if progress == "auto":
        progress = "bar" if sys.stdout.isatty() else "epoch"
    return 1 if progress == "bar" else 2


def _launcher_rank() -> int:
    """This process's rank before Horovod starts, from whichever launcher set it (0 when run alone)."""
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        value = os.environ.get(name, "")
        if value.isascii() and value.isdigit():
            return int(value)
    return 0


def usage_failure(message: str) -> int:
    if _launcher_rank() == 0:  # every rank fails the same way; one copy of the line is enough
        print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return EXIT_USAGE


class TrainHooks(Protocol):
    """What a caller of `main` may add to a rank's run: `feed` wraps the training stream, `finished` sees the final
    weights after a successful fit."""

    def feed(self, dataset: tf.data.Dataset) -> tf.data.Dataset: ...
    def finished(self, weights: list[np.ndarray]) -> None: ...


class NoHooks:
    """The command line's: the stream as it is, nothing done with the weights."""

    def feed(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        return dataset

    def finished(self, weights: list[np.ndarray]) -> None:
        return None


def main(argv: list[str] | None = None, hooks: Callable[[int], TrainHooks] | None = None) -> int:
    """Train with the command line's flags (`argv`); `hooks` gives each rank's hooks (by its rank; may raise
    UsageError, reported as a bad flag is)."""
    try:
        cfg = with_trial(parse_args(argv))
        cfg.validate()
    except UsageError as error:
        return usage_failure(str(error))
    try:
        return run(cfg, hooks or (lambda rank: NoHooks()))
    except UsageError as error:
        return usage_failure(str(error))


def run(cfg: TrainConfig, hooks_for: Callable[[int], TrainHooks]) -> int:
    """Train on every rank, each with its hooks (`hooks_for(rank)`); returns the exit code."""
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from chexnet import callbacks as cb
    from chexnet import resume
    from chexnet.data.datasets import skip_counters, train_labels
    from chexnet.data.integrity import unreadable_message
    from chexnet.horovod_graphs import trace_collectives_without_autograph
    from chexnet.model import build_model, class_weights, weighted_bce
    from programkit import sweep, tracking
    from programkit.data.chestxray14 import DataError

    hvd.init()
    trace_collectives_without_autograph()  # before the optimizer and the broadcast make theirs
    # Every rank, so that a multi-node job's log tells which host each rank ran on.
    cb.say(f"rank {hvd.rank()} of {hvd.size()} on {socket.gethostname()} "
           f"(local rank {hvd.local_rank()} of {hvd.local_size()})")
    _place_on_devices()
    if cfg.graph_optimizer == "off":  # before any tf.function is traced: Grappler's passes take ~25 s of DenseNet
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    tf.keras.utils.set_random_seed(cfg.seed)  # the same seed everywhere: all ranks start from the same weights
    if cfg.fp16:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    chief = hvd.rank() == 0
    source, train_ds, eval_ds, steps_per_epoch = _datasets(cfg, hvd.rank(), hvd.size())
    try:
        model = build_model(cfg.model, cfg.image_size, cfg.weights)
    except ValueError as error:
        raise UsageError(str(error)) from None
    try:
        loss = weighted_bce(*class_weights(train_labels(source)))
    except DataError as error:  # nothing in the training split could be read
        raise UsageError(str(error)) from None
    scaled_lr = cfg.lr * hvd.size()  # Horovod's rule: the global batch grew by size, so does the step
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=scaled_lr))
    if cfg.xla:
        # Not jit_compile on the whole train step: Horovod's allreduce has no XLA kernel, so that fails to
        # compile. Auto-clustering compiles what it can around the collectives (Horovod's own advice).
        tf.config.optimizer.set_jit("autoclustering")
    model.compile(optimizer=optimizer, loss=loss)

    epoch_done = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    saved_lr = tf.Variable(scaled_lr, dtype=tf.float32, trainable=False, name="lr")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=epoch_done, lr=saved_lr)
    manager = tf.train.CheckpointManager(checkpoint, str(cfg.checkpoint_dir), max_to_keep=CHECKPOINTS_KEPT)
    start_epoch = resume.restore_or_start(model, checkpoint, manager, epoch_done, saved_lr, resume=cfg.resume,
                                          epochs=cfg.epochs, chief=chief)
    # Before the early return below: a run killed after its last checkpoint but before logging that epoch is
    # re-run with nothing left to train, and must still write the epoch.
    epoch_log = resume.epoch_log(cfg.logdir, cfg.checkpoint_dir, start_epoch, resume=cfg.resume) if chief else None
    reporter = sweep.TrialReporter.for_program(cfg.trial, cfg.checkpoint_dir, start_epoch, cb.say) if chief else None
    tracker = _tracker(cfg, hvd.size(), start_epoch) if chief else None
    if start_epoch >= cfg.epochs:
        if epoch_log is not None:
            cb.say(f"the checkpoint has finished {start_epoch} epochs, --epochs is {cfg.epochs}: nothing to do")
            epoch_log.close()
        if chief:  # killed after its last checkpoint, before its card or its tell: both from the checkpoint's record
            _wrap_up(cfg, hvd.size(), source, None, manager.latest_checkpoint, start_epoch, tracker, reporter, None)
        return 0

    writer = epoch_log.writer if epoch_log is not None else None
    if epoch_log is not None:
        epoch_log.tracker = tracker  # each epoch to MLflow after its checkpoint, as to TensorBoard
    if writer is not None:
        cb.write_layout(writer)
        cb.write_hparams(writer, _hparams(cfg, hvd.size()), trial_id=_run_name(cfg.logdir))
        cb.say(f"{cfg.model} at {cfg.image_size}px: {source.count('train')} training images, {steps_per_epoch} "
               f"steps/epoch x batch {cfg.batch_size} x {hvd.size()} workers; {source.count('val')} validation "
               f"images; epochs {start_epoch + 1}..{cfg.epochs} at lr {cb.current_lr(model):.3g} "
               f"(--lr {cfg.lr:g} x {hvd.size()} workers, then plateau cuts)")
    guard = cb.NanGuard()
    skipped = cb.SkippedRecords(skip_counters("train", "val"), cfg.max_skipped_fraction, None, chief)
    callbacks = _callbacks(cfg, hvd, model, eval_ds, loss, epoch_log, guard, manager, epoch_done, saved_lr,
                           scaled_lr, steps_per_epoch, chief, skipped)
    pruning = cb.SweepPruning(reporter) if cfg.trial is not None else None
    if pruning is not None:
        callbacks.append(pruning)  # last: the epoch is checkpointed and logged before the trial may stop
    hooks = hooks_for(hvd.rank())
    with tracking.failing(tracker):  # an exception out of the training ends the MLflow run FAILED
        try:
            model.fit(hooks.feed(train_ds), epochs=cfg.epochs, initial_epoch=start_epoch,
                      steps_per_epoch=steps_per_epoch, callbacks=callbacks,
                      verbose=_keras_verbosity(cfg.progress, chief))
        except tf.errors.InvalidArgumentError as error:  # a stream with nothing readable (chexnet.data.integrity)
            skipped.failure = unreadable_message(error, skip_counters("train"))
            if skipped.failure is None:
                raise
    if epoch_log is not None:
        epoch_log.close()
    _report_skipped(chief)
    if tracker is not None and (skipped.failure is not None or guard.tripped):
        tracker.finish(tracking.FAILED)
    if skipped.failure is not None:  # every rank that met it says so: it may be a rank other than 0 alone
        print(f"{PROG}: error: rank {hvd.rank()}: {skipped.failure}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    if guard.tripped:
        if chief:
            print(f"{PROG}: error: the training loss became NaN at {guard.where}; stopped on all workers. "
                  f"Checkpoints in {cfg.checkpoint_dir} are from before it. Lower --lr, try without --fp16, "
                  "or check the data (--skip-bad skips corrupt records).", file=sys.stderr, flush=True)
        return EXIT_NAN
    hooks.finished(model.get_weights())
    if chief:
        validation = next(c for c in callbacks if isinstance(c, cb.WholeSetValidation))
        _wrap_up(cfg, hvd.size(), source, validation.history[-1] if validation.history else {},
                 manager.latest_checkpoint, int(epoch_done.numpy()), tracker, reporter,
                 pruning.pruned_at if pruning is not None else None)
    return 0


def _run_name(logdir: Path) -> str:
    from programkit import tblog

    return tblog.run_name(logdir)


def _tracker(cfg: TrainConfig, workers: int, start_epoch: int):
    """Rank 0's MLflow run (programkit.tracking.RunTracker), continued after a requeue; None without MLflow."""
    from chexnet.callbacks import say
    from programkit.tracking import RunTracker

    params = {"program": "chexnet", **_hparams(cfg, workers), "epochs": cfg.epochs, "seed": cfg.seed}
    return RunTracker.start(params, say, epochs_done=start_epoch, checkpoint_dir=cfg.checkpoint_dir,
                            logdir=cfg.logdir)


def _wrap_up(cfg: TrainConfig, workers: int, source: DataSource, last: dict | None, checkpoint: str | None,
             epochs_done: int, tracker, reporter, pruned_at: int | None) -> None:
    """Rank 0's end of the run (programkit.wrapup): the model card with this program's spec and frameworks, MLflow's
    FINISHED and the study's tell. `last` None: from the checkpoint's record."""
    from chexnet.callbacks import say
    from programkit.model_card import installed, sha256_file
    from programkit.wrapup import wrap_up

    spec = {**_hparams(cfg, workers), "epochs": cfg.epochs, "seed": cfg.seed, "warmup_epochs": cfg.warmup_epochs,
            "weights": str(cfg.weights) if cfg.weights else None,
            "weights_sha256": sha256_file(cfg.weights) if cfg.weights else None}
    frameworks = {"TensorFlow": installed("tensorflow", "tensorflow-cpu"), "Horovod": installed("horovod")}
    wrap_up(checkpoint_dir=cfg.checkpoint_dir, spec=spec, source=source, last=last, checkpoint=checkpoint,
            epochs_done=epochs_done, frameworks=frameworks, tracker=tracker, reporter=reporter, pruned_at=pruned_at,
            say=say)


def _report_skipped(chief: bool) -> None:
    """Corrupt records are dropped, not fatal (--skip-bad and the pipeline's own guard): say how many."""
    from chexnet.callbacks import say
    from chexnet.data.datasets import skipped_count

    skipped = skipped_count()
    if chief and skipped:
        say(f"rank 0 skipped {skipped} unreadable images or records (counted once per epoch that met them)")


def _place_on_devices() -> None:
    """One GPU per local rank; on CPU-only nodes, the cores shared out between the ranks on this node."""
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        # A launcher that already gives each task its own GPU (srun --gpus-per-task) leaves one visible.
        if len(gpus) > 1 and hvd.local_rank() >= len(gpus):
            raise UsageError(f"{hvd.local_size()} workers on this node but {len(gpus)} GPUs: start at most "
                             f"{len(gpus)} workers per node (horovodrun -H host:{len(gpus)})")
        gpu = gpus[hvd.local_rank()] if len(gpus) > 1 else gpus[0]
        tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpu, "GPU")
    else:  # the CPUs the worker may use (a Kubernetes pod's limit too: programkit.cpus), shared by the node's workers
        threads = max(1, usable_cores() // hvd.local_size())
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)


def _datasets(cfg: TrainConfig, rank: int, size: int) -> tuple[DataSource, tf.data.Dataset, tf.data.Dataset, int]:
    from chexnet.data.datasets import PipelineConfig, eval_dataset, train_dataset
    from programkit.data.chestxray14 import DataError
    from programkit.data.sources import source_of

    try:
        source = source_of(cfg.data_dir, skip_bad=cfg.skip_bad)
        pipeline_cfg = PipelineConfig(pipeline=cfg.pipeline, batch_size=cfg.batch_size, image_size=cfg.image_size,
                                      threads=cfg.threads, seed=cfg.seed)
    except (DataError, ValueError) as error:
        raise UsageError(str(error)) from None
    train_images = source.count("train")
    # Every rank computes the same number from the same count, so all ranks run the same number of
    # allreduces and none is left waiting at the end of an epoch.
    steps_per_epoch = train_images // (cfg.batch_size * size)
    if steps_per_epoch < 1:
        raise UsageError(f"--batch-size {cfg.batch_size} x {size} workers is more than the {train_images} "
                         f"training images in {cfg.data_dir}: lower --batch-size or use fewer workers")
    if source.count("val") < 1:
        raise UsageError(f"--data-dir {cfg.data_dir} has no validation images: AUROC cannot be measured")
    try:
        train = train_dataset(source, pipeline_cfg, rank, size)
        evaluation = eval_dataset(source, "val", pipeline_cfg, rank, size)
    except DataError as error:  # e.g. --image-size larger than the records' short side
        raise UsageError(str(error)) from None
    return source, train, evaluation, steps_per_epoch


def _callbacks(cfg: TrainConfig, hvd, model, eval_ds, loss, epoch_log, guard, manager, epoch_done, saved_lr,
               scaled_lr: float, steps_per_epoch: int, chief: bool,
               skipped: cb.SkippedRecords) -> list[tf.keras.callbacks.Callback]:
    """Order matters: Keras calls them in this order with one shared logs dict."""
    import tensorflow as tf

    from chexnet import callbacks as cb

    writer = epoch_log.writer if epoch_log is not None else None
    logged_through = epoch_log.logged.last_step(cb.TAG_THROUGHPUT) if epoch_log is not None else 0
    throughput = cb.ThroughputLogger(writer, cfg.batch_size * hvd.size(), steps_per_epoch,
                                     logged_through=logged_through)
    validation = cb.WholeSetValidation(eval_ds, loss, guard, throughput, cfg.epochs, announce=chief,
                                       jit_compile=cfg.xla)
    skipped.validation = validation
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),  # optimizer slots too, once the first step made them
        hvd.callbacks.MetricAverageCallback(),  # loss/train = the mean over ranks, before anyone logs it
    ]
    if cfg.warmup_epochs > 0:
        callbacks.append(hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=scaled_lr, warmup_epochs=cfg.warmup_epochs, steps_per_epoch=steps_per_epoch, verbose=0))
    callbacks += [
        guard,
        throughput,
        validation,
        skipped,  # after validation: it counts this epoch's validation reads and adds its tag to the epoch's record
        tf.keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=PLATEAU_FACTOR, patience=PLATEAU_PATIENCE,
                                             min_lr=MIN_LR, verbose=1 if chief else 0),
    ]
    if chief:
        callbacks.append(cb.CheckpointSaver(manager, epoch_done, saved_lr, guard, validation, epoch_log, throughput))
    return callbacks


def _hparams(cfg: TrainConfig, workers: int) -> dict[str, object]:
    """The same names in every run, a sweep's trial or not (TensorBoard takes one run's list for all)."""
    return {"model": cfg.model, "batch_size": cfg.batch_size, "workers": workers, "image_size": cfg.image_size,
            "fp16": cfg.fp16, "xla": cfg.xla, "pipeline": cfg.pipeline, "lr": cfg.lr,
            "warmup_epochs": cfg.warmup_epochs}


if __name__ == "__main__":
    sys.exit(main())
