"""Train CheXNet with Horovod: `python -m chexnet.train --data-dir D --logdir L --checkpoint-dir C ...`.

The same command runs alone, under `horovodrun -np N`, `mpirun` and `srun`: `hvd.init()` finds its peers from
whichever launched it. Exit codes: 0 done, 2 bad arguments or data (one line on stderr, no traceback),
3 the loss became NaN (training stops on every rank; the last good checkpoint is kept).

Two switches for tests and operators, outside the documented command line:
- `--weights-digest-dir D`: every rank writes `D/rank<r>.sha256`, the SHA-256 of its final weights, so that a
  check can prove the replicas ended identical.
- environment `CHEXNET_INJECT_NAN_AT_STEP=K`: from the K-th batch (counting from 1) on, the labels are NaN,
  the way a corrupt record would poison training; it exercises the NaN guard end to end. With
  `CHEXNET_INJECT_NAN_RANK=R` only rank R is poisoned (the others must still stop, not hang).

Killed and re-run: Slurm's `--requeue` SIGKILLs a job whose node died and re-runs the same command with `--resume`
in the same logdir and checkpoint directory. TensorBoard then still holds every epoch of every per-epoch tag
exactly once and no throughput step twice: rank 0 keeps `<checkpoint-dir>/epochs.jsonl`, a record of each finished
epoch's scalars written before its checkpoint, writes an epoch to TensorBoard only after its checkpoint, and on
`--resume` writes from the record what a kill left out and skips what the logdir already holds (`chexnet.tblog`).
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chexnet.cli import (
    EXIT_USAGE,
    OneLineParser,
    UsageError,
    require_choice,
    require_data_dir,
    require_positive,
)

# TensorFlow and Horovod are imported inside the functions that use them: a bad flag is then reported in a
# fraction of a second, before TensorFlow loads and prints its start-up chatter.
if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

    from chexnet import callbacks as cb
    from chexnet.data.pipeline import DataSource

MODELS = ("densenet121", "resnet50")
PIPELINES = ("new", "old")
PROGRESS = ("auto", "bar", "epoch")
EXIT_NAN = 3
CHECKPOINTS_KEPT = 3
PLATEAU_FACTOR = 0.1  # the CheXNet paper: divide the rate by 10 when the validation loss plateaus
PLATEAU_PATIENCE = 1
MIN_LR = 1e-6
INJECT_NAN_ENV = "CHEXNET_INJECT_NAN_AT_STEP"
INJECT_NAN_RANK_ENV = "CHEXNET_INJECT_NAN_RANK"
PROG = "chexnet.train"


@dataclass(frozen=True)
class TrainConfig:
    data_dir: Path
    logdir: Path
    checkpoint_dir: Path
    epochs: int = 10
    batch_size: int = 32
    image_size: int = 224
    model: str = "densenet121"
    pipeline: str = "new"
    fp16: bool = False
    xla: bool = False
    resume: bool = False
    weights: Path | None = None
    lr: float = 1e-3
    warmup_epochs: int = 1
    skip_bad: bool = False
    threads: int | None = None
    seed: int = 0
    weights_digest_dir: Path | None = None
    progress: str = "auto"
    max_skipped_fraction: float = 0.1  # chexnet.data.integrity.DEFAULT_MAX_SKIPPED_FRACTION, without importing TF

    def validate(self) -> None:
        """Raise UsageError naming the flag and what it allows, for the first bad value."""
        require_positive({"--epochs": self.epochs, "--batch-size": self.batch_size, "--image-size": self.image_size})
        require_choice("--model", self.model, MODELS)
        require_choice("--pipeline", self.pipeline, PIPELINES)
        require_choice("--progress", self.progress, PROGRESS)
        if not self.lr > 0:
            raise UsageError(f"--lr must be a positive number; got {self.lr}")
        if self.warmup_epochs < 0:
            raise UsageError(f"--warmup-epochs must be >= 0; got {self.warmup_epochs}")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads must be a positive integer (>= 1); got {self.threads}")
        if not 0 <= self.max_skipped_fraction <= 1:
            raise UsageError(f"--max-skipped-fraction must be a number from 0 to 1; got {self.max_skipped_fraction}")
        require_data_dir(self.data_dir)
        if self.weights is not None and not self.weights.is_file():
            raise UsageError(f"--weights must name an existing weights file; {self.weights} is not")


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    p = OneLineParser(prog=f"python -m {PROG}", description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, required=True, help="ChestX-ray14 layout or TFRecords directory")
    p.add_argument("--logdir", type=Path, required=True, help="TensorBoard event files (rank 0 writes)")
    p.add_argument("--checkpoint-dir", type=Path, required=True, help="checkpoints (rank 0 writes, every epoch)")
    p.add_argument("--epochs", type=int, default=TrainConfig.epochs, help="total epochs, counting resumed ones")
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size, help="images per step per worker")
    p.add_argument("--image-size", type=int, default=TrainConfig.image_size, help="square input side, pixels")
    p.add_argument("--model", default=TrainConfig.model, help=f"one of {', '.join(MODELS)}")
    p.add_argument("--pipeline", default=TrainConfig.pipeline, help=f"input pipeline: {' or '.join(PIPELINES)}")
    p.add_argument("--fp16", action="store_true", help="mixed precision (mixed_float16 policy)")
    p.add_argument("--xla", action="store_true",
                   help="XLA: auto-clustering for the train step (on CPU it also needs "
                        "TF_XLA_FLAGS=--tf_xla_cpu_global_jit), a compiled predict step")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --checkpoint-dir")
    p.add_argument("--weights", type=Path, help="local initial weights (.h5: ImageNet notop or a whole model)")
    p.add_argument("--lr", type=float, default=TrainConfig.lr, help="learning rate of ONE worker (x workers)")
    p.add_argument("--warmup-epochs", type=int, default=TrainConfig.warmup_epochs,
                   help="epochs over which the rate ramps from --lr to --lr x workers")
    p.add_argument("--skip-bad", action="store_true", help="skip corrupt records instead of failing")
    p.add_argument("--threads", type=int, help="input pipeline threads (default: tf.data's choice)")
    p.add_argument("--seed", type=int, default=TrainConfig.seed, help="initial weights and shuffling")
    p.add_argument("--weights-digest-dir", type=Path, help="each rank writes the SHA-256 of its final weights here")
    p.add_argument("--progress", default=TrainConfig.progress,
                   help="bar: Keras' step-by-step bar; epoch: one line per epoch (for log files); "
                        "auto: bar on a terminal")
    p.add_argument("--max-skipped-fraction", type=float, default=TrainConfig.max_skipped_fraction,
                   help="stop when more than this share of a split's records is unreadable in an epoch (0..1)")
    a = p.parse_args(argv)
    return TrainConfig(
        data_dir=a.data_dir, logdir=a.logdir, checkpoint_dir=a.checkpoint_dir, epochs=a.epochs,
        batch_size=a.batch_size, image_size=a.image_size, model=a.model, pipeline=a.pipeline, fp16=a.fp16,
        xla=a.xla, resume=a.resume, weights=a.weights, lr=a.lr, warmup_epochs=a.warmup_epochs,
        skip_bad=a.skip_bad, threads=a.threads, seed=a.seed, weights_digest_dir=a.weights_digest_dir,
        progress=a.progress, max_skipped_fraction=a.max_skipped_fraction)


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
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def usage_failure(message: str) -> int:
    if _launcher_rank() == 0:  # every rank fails the same way; one copy of the line is enough
        print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_args(argv)
        cfg.validate()
    except UsageError as error:
        return usage_failure(str(error))
    try:
        return run(cfg)
    except UsageError as error:
        return usage_failure(str(error))


def run(cfg: TrainConfig) -> int:
    """Train on every rank; returns the exit code."""
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from chexnet import callbacks as cb
    from chexnet.data import pipeline
    from chexnet.data.integrity import unreadable_message
    from chexnet.model import build_model, class_weights, weighted_bce

    hvd.init()
    # Every rank, so that a multi-node job's log tells which host each rank ran on.
    cb.say(f"rank {hvd.rank()} of {hvd.size()} on {socket.gethostname()} "
           f"(local rank {hvd.local_rank()} of {hvd.local_size()})")
    _place_on_devices()
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
        loss = weighted_bce(*class_weights(pipeline.train_labels(source)))
    except pipeline.DataError as error:  # nothing in the training split could be read
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
    start_epoch = _restore_or_start(cfg, model, checkpoint, manager, epoch_done, saved_lr, chief)
    # Before the early return below: a run killed after its last checkpoint but before logging that epoch is
    # re-run with nothing left to train, and must still write the epoch.
    epoch_log = _epoch_log(cfg, start_epoch) if chief else None
    if start_epoch >= cfg.epochs:
        if epoch_log is not None:
            cb.say(f"the checkpoint has finished {start_epoch} epochs, --epochs is {cfg.epochs}: nothing to do")
            epoch_log.close()
        return 0

    writer = epoch_log.writer if epoch_log is not None else None
    if writer is not None:
        cb.write_layout(writer)
        cb.write_hparams(writer, _hparams(cfg, hvd.size()), trial_id=cfg.logdir.name)
        cb.say(f"{cfg.model} at {cfg.image_size}px: {source.count('train')} training images, {steps_per_epoch} "
               f"steps/epoch x batch {cfg.batch_size} x {hvd.size()} workers; {source.count('val')} validation "
               f"images; epochs {start_epoch + 1}..{cfg.epochs} at lr {cb.current_lr(model):.3g} "
               f"(--lr {cfg.lr:g} x {hvd.size()} workers, then plateau cuts)")
    guard = cb.NanGuard()
    skipped = cb.SkippedRecords(pipeline.skip_counters("train", "val"), cfg.max_skipped_fraction, None, chief)
    callbacks = _callbacks(cfg, hvd, model, eval_ds, loss, epoch_log, guard, manager, epoch_done, saved_lr,
                           scaled_lr, steps_per_epoch, chief, skipped)
    try:
        model.fit(_maybe_poisoned(train_ds, hvd.rank()), epochs=cfg.epochs, initial_epoch=start_epoch,
                  steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=_keras_verbosity(cfg.progress, chief))
    except tf.errors.InvalidArgumentError as error:  # a stream with nothing readable (chexnet.data.integrity)
        skipped.failure = unreadable_message(error, pipeline.skip_counters("train"))
        if skipped.failure is None:
            raise
    if epoch_log is not None:
        epoch_log.close()
    _report_skipped(chief)
    if skipped.failure is not None:  # every rank that met it says so: it may be a rank other than 0 alone
        print(f"{PROG}: error: rank {hvd.rank()}: {skipped.failure}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    if guard.tripped:
        if chief:
            print(f"{PROG}: error: the training loss became NaN at {guard.where}; stopped on all workers. "
                  f"Checkpoints in {cfg.checkpoint_dir} are from before it. Lower --lr, try without --fp16, "
                  "or check the data (--skip-bad skips corrupt records).", file=sys.stderr, flush=True)
        return EXIT_NAN
    if cfg.weights_digest_dir is not None:
        _write_digest(cfg.weights_digest_dir, hvd.rank(), model.get_weights())
    return 0


def _report_skipped(chief: bool) -> None:
    """Corrupt records are dropped, not fatal (--skip-bad and the pipeline's own guard): say how many."""
    from chexnet.callbacks import say
    from chexnet.data.pipeline import skipped_count

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
    else:
        cores = len(os.sched_getaffinity(0))
        tf.config.threading.set_intra_op_parallelism_threads(max(1, cores // hvd.local_size()))


def _datasets(cfg: TrainConfig, rank: int, size: int) -> tuple[DataSource, tf.data.Dataset, tf.data.Dataset, int]:
    from chexnet.data import pipeline
    from chexnet.data.chestxray14 import DataError

    try:
        source = pipeline.source_of(cfg.data_dir, skip_bad=cfg.skip_bad)
        pipeline_cfg = pipeline.PipelineConfig(pipeline=cfg.pipeline, batch_size=cfg.batch_size,
                                               image_size=cfg.image_size, threads=cfg.threads, seed=cfg.seed)
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
        train = pipeline.train_dataset(source, pipeline_cfg, rank, size)
        evaluation = pipeline.eval_dataset(source, "val", pipeline_cfg, rank, size)
    except DataError as error:  # e.g. --image-size larger than the records' short side
        raise UsageError(str(error)) from None
    return source, train, evaluation, steps_per_epoch


def _maybe_poisoned(dataset: tf.data.Dataset, rank: int) -> tf.data.Dataset:
    """Honours CHEXNET_INJECT_NAN_AT_STEP / _RANK (see the module docstring); otherwise the dataset as it is."""
    import tensorflow as tf

    value, only_rank = os.environ.get(INJECT_NAN_ENV, ""), os.environ.get(INJECT_NAN_RANK_ENV, "")
    if not value or (only_rank and only_rank != str(rank)):
        return dataset
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"{INJECT_NAN_ENV} must be a step number >= 1; got {value!r}")
    first_bad = int(value)

    def poison(step: tf.Tensor, batch: tuple[tf.Tensor, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        # The labels, not the pixels: a NaN pixel can vanish in a ReLU (max(NaN, 0) is 0 on CPU), a NaN label
        # reaches the loss for sure, and its gradient then turns the weights NaN on every rank.
        images, labels = batch
        return images, tf.where(step >= first_bad, labels * float("nan"), labels)

    return dataset.enumerate(start=1).map(poison)


def _restore_or_start(cfg: TrainConfig, model: tf.keras.Model, checkpoint: tf.train.Checkpoint,
                      manager: tf.train.CheckpointManager, epoch_done: tf.Variable, saved_lr: tf.Variable,
                      chief: bool) -> int:
    """Rank 0 restores (only it needs to see the checkpoint directory); the state then goes to every rank."""
    import horovod.tensorflow as hvd_tf

    from chexnet.callbacks import say

    state = (0, None)
    # Every rank builds the optimizer's slots now, eagerly: then the checkpoint restores them at once, and their
    # names (which Horovod's broadcast matches across ranks) are the same everywhere. Slots made lazily inside
    # the first train step get other names, and the broadcast of a restored rank 0 would wait forever.
    optimizer = model.optimizer
    getattr(optimizer, "inner_optimizer", optimizer).build(model.trainable_variables)
    if chief:
        latest = manager.latest_checkpoint
        if cfg.resume and latest:
            checkpoint.restore(latest).assert_existing_objects_matched()
            state = (int(epoch_done.numpy()), float(saved_lr.numpy()))
            say(f"resuming from {latest}: {state[0]} epochs done, continuing with epoch {state[0] + 1} of "
                f"{cfg.epochs} at lr {state[1]:.3g}")
        elif cfg.resume:
            say(f"--resume: no checkpoint in {cfg.checkpoint_dir}; starting fresh at epoch 1")
        elif latest:
            say(f"{cfg.checkpoint_dir} already holds checkpoints ({latest}); starting fresh because --resume was "
                "not given, and they will be replaced")
    start_epoch, lr = hvd_tf.broadcast_object(state, root_rank=0, name="resume_state")
    if lr is not None:
        model.optimizer.learning_rate.assign(lr)
    # Same weights everywhere before the first step, so the first gradients are averaged over one model.
    hvd_tf.broadcast_variables(model.variables, root_rank=0)
    return start_epoch


def _epoch_log(cfg: TrainConfig, start_epoch: int) -> cb.EpochLog:
    """Rank 0's TensorBoard scalars: on --resume it learns what the logdir holds and writes from the record the
    epochs that a kill left out (see chexnet.tblog)."""
    from chexnet import callbacks as cb
    from chexnet import tblog

    logged = tblog.read_logdir(cfg.logdir) if cfg.resume else tblog.LoggedSteps()
    record = tblog.record_path(cfg.checkpoint_dir)
    if start_epoch == 0:
        tblog.reset_record(record)  # a fresh start: the record describes checkpoints that will be replaced
    epoch_log = cb.EpochLog(cfg.logdir, record, logged)
    epoch_log.catch_up(start_epoch)
    return epoch_log


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
        callbacks.append(cb.CheckpointSaver(manager, epoch_done, saved_lr, guard, validation, epoch_log))
    return callbacks


def _hparams(cfg: TrainConfig, workers: int) -> dict[str, object]:
    return {"model": cfg.model, "batch_size": cfg.batch_size, "workers": workers, "image_size": cfg.image_size,
            "fp16": cfg.fp16, "xla": cfg.xla, "pipeline": cfg.pipeline, "lr": cfg.lr}


def weights_digest(weights: list[np.ndarray]) -> str:
    """SHA-256 over the weights' bytes in model order: equal digests, identical replicas."""
    digest = hashlib.sha256()
    for array in weights:
        digest.update(array.tobytes())
    return digest.hexdigest()


def _write_digest(directory: Path, rank: int, weights: list[np.ndarray]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"rank{rank}.sha256").write_text(weights_digest(weights) + "\n")


if __name__ == "__main__":
    sys.exit(main())
