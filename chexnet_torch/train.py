"""CheXNet in PyTorch: `python -m chexnet_torch.train --data-dir D --logdir L --checkpoint-dir C ...`, alone or
under `torchrun` (one process per GPU, or one per node on CPUs), DistributedDataParallel over gloo on CPUs and
NCCL on GPUs. What it writes is chexnet.train's: TensorBoard's tags, the per-epoch record (programkit.tblog), the
model card (programkit.model_card), the job's MLflow run when it has one (programkit.tracking); a sweep's trial reports
to its study (programkit.sweep) and may be pruned.

Exact resume: each epoch's checkpoint (`ckpt-<epoch>.pt`, written whole then renamed) holds the model, the
optimizer, the learning-rate schedule, the global step and every random state (torch, CUDA, numpy, Python); the
sampler's order is a function of (seed, epoch). A run with --resume continues at the epoch after the last
checkpoint, so a killed job never loses or repeats an epoch.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from chexnet_torch import rendezvous
from chexnet_torch.args import PROG, TorchConfig, parse_args, with_trial
from chexnet_torch.board import Board
from chexnet_torch.data import ChestXrays
from chexnet_torch.loop import Checkpoints, Precision, class_weights, weighted_bce
from chexnet_torch.vision import build_model
from programkit import runlines, sweep, tblog, tracking
from programkit.cli import EXIT_USAGE, UsageError
from programkit.cpus import usable_cores
from programkit.data.chestxray14 import DataError
from programkit.data.sources import source_of
from programkit.labels import CLASSES
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
from programkit.wrapup import wrap_up

NAME = "chexnet-torch"
EXIT_NAN = 3
PLATEAU_FACTOR, PLATEAU_PATIENCE, MIN_LR = 0.1, 1, 1e-7  # chexnet.train's


def say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def tell(message: str) -> None:
    """What the run as a whole did, said once (rank 0): the other ranks' lines would repeat it."""
    if rank_and_size()[0] == 0:
        say(message)


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = with_trial(parse_args(argv))
        cfg.validate()
    except UsageError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if distributed:
        try:
            meet = rendezvous.init_method()
        except rendezvous.RendezvousError as err:
            print(f"{PROG}: error: {err}", file=sys.stderr)
            return EXIT_USAGE
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=meet,
                                rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    try:
        code = run(cfg, device)
        if distributed:  # rank 0's wrap-up (card, tracking) done before any rank tears its group down: a worker
            dist.barrier()  # that did so first was killed by gloo ("terminate called without an active exception")
        return code
    except (DataError, UsageError) as err:  # UsageError: a sweep's study that cannot be opened
        print(f"{PROG}: error: {err}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    finally:
        if distributed:
            dist.destroy_process_group()


def rank_and_size() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def loader_workers(cfg: TorchConfig) -> int:
    """The DataLoader's processes: this process's share of the CPUs the scheduler gave, less the one it trains on."""
    if cfg.loader_workers is not None:
        return cfg.loader_workers
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(0, usable_cores() // local - 1)


def run(cfg: TorchConfig, device: torch.device) -> int:
    rank, size = rank_and_size()
    chief = rank == 0
    torch.manual_seed(cfg.seed)
    precision = Precision.choose(cfg.amp, cfg.channels_last, device)
    source = source_of(cfg.data_dir)
    train_set = ChestXrays(source, "train", cfg.image_size, train=True)
    val_set = ChestXrays(source, "val", cfg.image_size, train=False)
    if not len(train_set) or not len(val_set):
        raise DataError(f"{cfg.data_dir} has {len(train_set)} training and {len(val_set)} validation images; "
                        "both splits must have some")
    say(f"rank {rank} of {size} on {socket.gethostname()} ({device}, {precision.words()}), torch {torch.__version__}")
    workers = loader_workers(cfg)
    sampler = DistributedSampler(train_set, size, rank, shuffle=True, seed=cfg.seed, drop_last=True)
    train_loader = DataLoader(train_set, cfg.batch_size, sampler=sampler, num_workers=workers, drop_last=True,
                              pin_memory=device.type == "cuda")  # workers made anew each epoch: exact resume
    val_indices = list(range(rank, len(val_set), size))  # every image once across ranks (no padding)
    val_loader = DataLoader(torch.utils.data.Subset(val_set, val_indices), cfg.batch_size, num_workers=workers)
    steps_per_epoch = len(train_loader)
    if steps_per_epoch == 0:
        raise DataError(f"{len(train_set)} training images make no step of {cfg.batch_size} x {size} processes: "
                        "lower --batch-size")
    model = precision.place(build_model(cfg.model), device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None) \
        if dist.is_initialized() else model
    w_pos, w_neg = class_weights(train_set.labels())
    loss_fn = weighted_bce(torch.from_numpy(w_pos).to(device), torch.from_numpy(w_neg).to(device))
    scaled_lr = cfg.lr * size  # Horovod's rule, as chexnet.train: the global batch grew by size, so does the step
    optimizer = torch.optim.Adam(model.parameters(), lr=scaled_lr)
    warmup_steps = cfg.warmup_epochs * steps_per_epoch
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: (
        1.0 / size + (1 - 1.0 / size) * min(1.0, step / warmup_steps)) if warmup_steps else 1.0)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=PLATEAU_FACTOR,
                                                         patience=PLATEAU_PATIENCE, min_lr=MIN_LR)
    checkpoints = Checkpoints(cfg.checkpoint_dir)
    state = {"model": model, "optimizer": optimizer, "warmup": warmup, "plateau": plateau}
    start_epoch, step = checkpoints.restore(state, device) if cfg.resume else (0, 0)
    if cfg.resume:
        tell(runlines.resuming(checkpoints.latest(), start_epoch, cfg.epochs) if start_epoch else
             runlines.starting_fresh(cfg.checkpoint_dir))
    board = Board(cfg.logdir, tblog.record_path(cfg.checkpoint_dir), resume=cfg.resume) if chief else None
    reporter = sweep.TrialReporter.for_program(cfg.trial, cfg.checkpoint_dir, start_epoch, say) if chief else None
    tracker = tracking.RunTracker.start({**hparams(cfg, size), "epochs": cfg.epochs, "seed": cfg.seed}, say,
                                        epochs_done=start_epoch, checkpoint_dir=cfg.checkpoint_dir,
                                        logdir=cfg.logdir) if chief else None
    if board is not None:
        board.tracker = tracker  # each epoch to MLflow after its checkpoint, as to TensorBoard
        board.start(hparams(cfg, size), trial_id=tblog.run_name(cfg.logdir))
        if start_epoch and (written := board.catch_up(start_epoch)):
            tell(f"wrote {written} epoch(s) to TensorBoard from the checkpoint's record")
    if start_epoch >= cfg.epochs:
        tell(f"the checkpoint has finished {start_epoch} epochs, --epochs is {cfg.epochs}: nothing to do")
    else:
        tell(f"{cfg.model} at {cfg.image_size}px: {len(train_set)} training images, {steps_per_epoch} steps/epoch "
            f"on {size} process(es), {workers} loader worker(s) each; epochs {start_epoch + 1}..{cfg.epochs} at lr "
            f"{optimizer.param_groups[0]['lr']:.3g} (--lr {cfg.lr:g} x {size} processes, then plateau cuts)")
    last: dict[str, float | None] | None = None  # None: no epoch trained here (wrap_up reads the record)
    pruned_at = None
    with tracking.failing(tracker):  # an exception out of the training ends the MLflow run FAILED
        for epoch in range(start_epoch + 1, cfg.epochs + 1):
            started = time.perf_counter()
            sampler.set_epoch(epoch)
            train_loss, images_per_sec, step = train_epoch(ddp, train_loader, optimizer, warmup, loss_fn, precision,
                                                           device, board, step, cfg.batch_size * size)
            if not np.isfinite(train_loss):
                if chief:
                    print(f"{PROG}: error: the training loss became NaN in epoch {epoch}; stopped on all workers. "
                          f"Checkpoints in {cfg.checkpoint_dir} are from before it. Lower --lr or check the data.",
                          file=sys.stderr, flush=True)
                if tracker is not None:
                    tracker.finish(tracking.FAILED)
                return EXIT_NAN
            lr = optimizer.param_groups[0]["lr"]
            last = validate(ddp, val_loader, loss_fn, precision, device, len(val_set))
            last[TAG_LOSS_TRAIN], last[TAG_LR] = train_loss, lr
            plateau.step(last[TAG_LOSS_VAL])
            if board is not None:
                entry = tblog.EpochScalars(epoch, {tag: last.get(tag) for tag in epoch_tags()},
                                           tblog.logdir_key(cfg.logdir), images_per_sec=images_per_sec,
                                           checkpoint=checkpoints.name(epoch),
                                           seconds=round(time.perf_counter() - started, 3), program=NAME)
                board.record(entry)  # before the checkpoint (programkit.tblog)
                checkpoints.save(state, epoch, step)
                board.publish(entry)
            tell(f"epoch {epoch}/{cfg.epochs}: loss/train={train_loss:.4f} loss/val={last[TAG_LOSS_VAL]:.4f} "
                f"auroc/mean={fmt(last.get(TAG_AUROC_MEAN))} images/sec={images_per_sec:.1f} lr={lr:.3g}")
            if pruned(reporter, epoch, last.get(TAG_AUROC_MEAN)):
                pruned_at = epoch
                break
    if board is not None:
        board.close()
        latest = checkpoints.latest()
        spec = {**hparams(cfg, size), "epochs": cfg.epochs, "seed": cfg.seed, "warmup_epochs": cfg.warmup_epochs}
        wrap_up(checkpoint_dir=cfg.checkpoint_dir, spec=spec, source=source, last=last,
                checkpoint=str(latest.with_suffix("")) if latest else None, epochs_done=checkpoints.latest_epoch(),
                frameworks=frameworks(), tracker=tracker, reporter=reporter, pruned_at=pruned_at, say=say)
    return 0


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def epoch_tags() -> tuple[str, ...]:
    return (TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_LR, TAG_AUROC_MEAN, *(f"{AUROC_TAG_PREFIX}{name}" for name in CLASSES))


def train_epoch(model, loader, optimizer, warmup, loss_fn, precision: Precision, device, board: Board | None,
                step: int, images_per_step: int) -> tuple[float, float, int]:
    """One epoch; its mean training loss over every process, images/sec (all processes), and the global step."""
    model.train()
    total, count, window, timed, last = 0.0, 0, (0, 0.0), (0, 0.0), None
    for images, labels in loader:
        images, labels = precision.inputs(images.to(device, non_blocking=True)), labels.to(device)
        with precision.autocast():
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        precision.backward(loss, optimizer)
        warmup.step()
        step += 1
        total, count = total + float(loss.detach()), count + 1
        now = time.perf_counter()
        if last is not None:  # end of step to end of step: the first step of an epoch is left out
            window, timed = (window[0] + 1, window[1] + now - last), (timed[0] + 1, timed[1] + now - last)
            if window[0] >= THROUGHPUT_EVERY_STEPS and board is not None:
                board.throughput(window[0] * images_per_step / window[1], step)
                window = (0, 0.0)
        last = now
    if board is not None and window[0] and timed[0] < THROUGHPUT_EVERY_STEPS:
        board.throughput(window[0] * images_per_step / window[1], step)  # a short epoch: what it measured
    mean = torch.tensor([total, count], dtype=torch.float64)
    if dist.is_initialized():
        mean = mean.to(collective_device())
        dist.all_reduce(mean)
        mean = mean.cpu()
    rate = timed[0] * images_per_step / timed[1] if timed[1] > 0 else float("nan")
    return float(mean[0] / max(1.0, float(mean[1]))), rate, step


def collective_device() -> torch.device:
    """Where a collective's tensors must be: this rank's GPU under NCCL, the CPU under gloo."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def gather_rows(local: torch.Tensor) -> torch.Tensor:
    """Every rank's rows of a 2-D float tensor, in rank order, on the CPU. Tensors only, never a pickle: what a peer
    sends is numbers (torch's *_object collectives unpickle what arrives, docs/security.md). The ranks may hold
    different counts of rows (the sampler pads none in validation), so the counts go first and each part is padded
    to the largest."""
    if not dist.is_initialized():
        return local
    device, size = collective_device(), dist.get_world_size()
    counts = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(size)]
    dist.all_gather(counts, torch.tensor([local.shape[0]], dtype=torch.int64, device=device))
    most = int(max(count.item() for count in counts))
    padded = torch.zeros(most, local.shape[1], dtype=torch.float32, device=device)
    padded[:local.shape[0]] = local.float()
    parts = [torch.empty_like(padded) for _ in range(size)]
    dist.all_gather(parts, padded)
    return torch.cat([part[:int(count.item())].cpu() for part, count in zip(parts, counts, strict=True)])


@torch.no_grad()
def validate(model, loader, loss_fn, precision: Precision, device, expected: int) -> dict[str, float | None]:
    """The loss and exact per-class AUROC (scikit-learn) on the whole validation split, gathered from every rank."""
    model.eval()
    scores, truths = [], []
    for images, labels in loader:
        with precision.autocast():
            logits = model(precision.inputs(images.to(device)))
        scores.append(logits.float().cpu())
        truths.append(labels)
    logits = gather_rows(torch.cat(scores) if scores else torch.zeros(0, len(CLASSES)))
    labels = gather_rows(torch.cat(truths).float() if truths else torch.zeros(0, len(CLASSES)))
    if len(labels) != expected:
        raise RuntimeError(f"validation gathered {len(labels)} images of {expected}")
    loss = float(loss_fn(logits.to(device), labels.to(device)))
    per_class = auroc_per_class(labels.numpy(), torch.sigmoid(logits).numpy())
    found: dict[str, float | None] = {TAG_LOSS_VAL: loss, TAG_AUROC_MEAN: mean_auroc(per_class)}
    found.update({f"{AUROC_TAG_PREFIX}{name}": value for name, value in per_class.items()})
    return found


def hparams(cfg: TorchConfig, size: int) -> dict[str, object]:
    return {"program": NAME, "model": cfg.model, "image_size": cfg.image_size, "batch_size": cfg.batch_size,
            "workers": size, "lr": cfg.lr, "amp": cfg.amp, "channels_last": cfg.channels_last}


def pruned(reporter, epoch: int, value: float | None) -> bool:
    """Rank 0 reports the epoch to the study and asks its pruner; every rank gets the answer (all stop together)."""
    stop = False
    if reporter is not None:
        try:
            stop = bool(reporter.report(epoch, value))
        except Exception as err:  # noqa: BLE001 - a study that cannot be reached prunes nothing
            say(f"sweep: could not report epoch {epoch} to the study ({type(err).__name__}: {err})")
    if dist.is_initialized():
        answer = torch.tensor([int(stop)], device=collective_device())
        dist.broadcast(answer, src=0)
        stop = bool(answer.item())
    if stop and reporter is not None:
        say(f"sweep: pruned at epoch {epoch} by the {reporter.plan.pruner} pruner (mean AUROC {fmt(value)})")
    return stop


def frameworks() -> dict[str, str | None]:
    """The model card's frameworks (programkit.model_card): torch's, torchvision's, CUDA's and cuDNN's versions."""
    cudnn = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    return {"PyTorch": torch.__version__, "torchvision": installed("torchvision"), "CUDA": torch.version.cuda,
            "cuDNN": str(cudnn) if cudnn else None}


if __name__ == "__main__":
    sys.exit(main())
