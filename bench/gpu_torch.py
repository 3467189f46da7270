"""The PyTorch program on one GPU: DenseNet-121 at 224 px, bf16 autocast and channels_last, side by side with a plain
torchvision training loop and with the program's own input pipeline.

    python -m bench.gpu_torch [--device cuda] [--batch-size 256] [--steps 30] [--warmup 10] [--pairs 5]
    python -m bench.gpu_torch --device cpu --image-size 32 --batch-size 4 --steps 2 --warmup 1 --pairs 2 \\
        --images 24 --source-size 32 --results /tmp/x   # the smoke mode its test runs: tiny, no targets

Needs only PyTorch, torchvision, numpy and Pillow, and this repository's working tree (chexnet_torch's model,
loss, precision and data modules, chexnet's TensorFlow-free data reader and synthetic writer): the GPU machine
has no TensorFlow. Run it from the repository root with the program's environment's Python (on the boxes
/opt/dsportal/torch-venv/bin/python). Four rates, in images/s:

    program step      chexnet_torch's training step (program_step: its model, class-weighted loss, Adam,
                      autocast and memory layout, train_epoch's step line for line), on a batch already on the GPU
    plain torchvision torchvision's model, BCEWithLogitsLoss, Adam, the same autocast, layout and batch: what a
                      PyTorch user would write
    program, fed      the program's step fed by its own DataLoader (what a job trains at)
    input pipeline    the program's DataLoader alone (its dataset, sampler and workers), over synthetic PNGs of
                      ChestX-ray14's own 1024x1024 by default, no model

Both models are built and warmed up first (--warmup steps each; cuDNN picks its kernels), then --pairs pairs of
timed blocks of --steps steps, program step and plain torchvision one after the other, the first of the pair
alternating; the fed and the pipeline blocks follow in each pair. Each row is the median of its blocks, each
ratio the median of the pairs' ratios (bench.gpu_torch_report has the targets). The figures, with the GPU's
name and the torch, CUDA and cuDNN versions, are saved to docs/results/gpu_torch.json (or --results DIR);
exit 1 when a target is not met. On a CPU (--device cpu) it is a smoke run: the same code, no targets.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import gpu_torch_report as report

NUM_CLASSES = 14


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--model", choices=("densenet121", "resnet50"), default="densenet121")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=256, help="images per step (default 256)")
    parser.add_argument("--steps", type=int, default=30, help="steps per timed block (default 30)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps of each model first (default 10)")
    parser.add_argument("--pairs", type=int, default=5, help="pairs of timed blocks (default 5)")
    parser.add_argument("--amp", choices=("bf16", "fp16", "off"), default="bf16")
    parser.add_argument("--channels-last", choices=("on", "off"), default="on")
    parser.add_argument("--images", type=int, default=4096, help="synthetic PNGs the input pipeline reads "
                        "(about 70 %% of them in the training split; default 4096)")
    parser.add_argument("--source-size", type=int, default=1024, help="their size in pixels, the program resizes "
                        "(default 1024, ChestX-ray14's)")
    parser.add_argument("--loader-workers", type=int, default=0, help="the DataLoader's workers; 0: the "
                        "program's own choice for the CPUs this process may use")
    parser.add_argument("--results", type=Path, default=None, help="where gpu_torch.json goes (default: "
                        "$DSPORTAL_BENCH_RESULTS or docs/results)")
    args = parser.parse_args(argv)
    small = [name for name in ("image_size", "batch_size", "steps", "pairs", "images") if getattr(args, name) < 1]
    if small or args.warmup < 0 or args.image_size < 16 or args.source_size < 16 or args.loader_workers < 0:
        parser.error("--image-size and --source-size 16 or more; --batch-size, --steps, --pairs, --images 1 or "
                     "more; --warmup and --loader-workers 0 or more")
    return args


def synchronizer(device: Any) -> Callable[[], None]:
    import torch

    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def plain_trainer(args: argparse.Namespace, device: Any) -> Callable[[Any, Any], None]:
    """A plain torchvision training step, as a PyTorch user writes one: torchvision's model, BCEWithLogitsLoss, the
    program's optimizer (Adam), autocast and channels_last as asked; the reference for the program's step."""
    import torch

    torchvision_importable()
    import torchvision

    model = getattr(torchvision.models, args.model)(weights=None, num_classes=NUM_CLASSES).to(device)
    if args.channels_last == "on":
        model = model.to(memory_format=torch.channels_last)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp == "fp16")

    def step(images: Any, labels: Any) -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step


def torchvision_importable() -> None:
    """torchvision imports beside the boxes' CPU build of torch only once chexnet_torch.vision has defined the two
    ops its CUDA wheel cannot load (that module says why); with matching builds, as on a GPU machine, it does
    nothing."""
    from chexnet_torch.vision import _define_missing_ops

    _define_missing_ops()


def program_trainer(args: argparse.Namespace, device: Any, train_labels: Any) -> Callable[[Any, Any], None]:
    """chexnet_torch's training step, made of the program's own pieces as chexnet_torch.train builds them: its
    model (chexnet_torch.vision), CheXNet's class-weighted loss and its precision and layout (chexnet_torch.loop),
    Adam and the warm-up schedule, and the step's body as chexnet_torch.train.train_epoch runs it, the per-step read
    of the loss included (its epoch mean). Not train_epoch itself: that module also imports scikit-learn and
    TensorBoard, which a GPU machine with only PyTorch lacks; tests/programs/test_gpu_bench.py checks that this
    step and train_epoch's leave the same weights."""
    import torch

    from chexnet_torch.loop import Precision, class_weights, weighted_bce
    from chexnet_torch.vision import build_model

    precision = Precision.choose(args.amp, args.channels_last, device)
    model = precision.place(build_model(args.model), device)
    model.train()
    w_pos, w_neg = class_weights(train_labels)
    loss_fn = weighted_bce(torch.from_numpy(w_pos).to(device), torch.from_numpy(w_neg).to(device))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return program_step(model, optimizer, warmup, loss_fn, precision, device)


def program_step(model: Any, optimizer: Any, warmup: Any, loss_fn: Any, precision: Any,
                 device: Any) -> Callable[[Any, Any], None]:
    """One step of chexnet_torch.train.train_epoch's loop, line for line (the DDP wrapper aside: one GPU)."""
    def step(images: Any, labels: Any) -> None:
        images, labels = precision.inputs(images.to(device, non_blocking=True)), labels.to(device)
        with precision.autocast():
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        precision.backward(loss, optimizer)
        warmup.step()
        float(loss.detach())  # train_epoch sums each step's loss: a wait for the GPU every step

    return step


def program_loader(args: argparse.Namespace, data_dir: Path, device: Any) -> tuple[Any, Iterator[tuple[Any, Any]]]:
    """The program's training set and DataLoader over the synthetic PNGs, as chexnet_torch.train makes them (its
    dataset, sampler, workers and pinned memory), and its batches epoch after epoch."""
    from torch.utils.data import DataLoader, DistributedSampler

    from chexnet_torch.data import ChestXrays
    from programkit.cpus import usable_cores
    from programkit.data.sources import source_of

    train_set = ChestXrays(source_of(data_dir), "train", args.image_size, train=True)
    sampler = DistributedSampler(train_set, 1, 0, shuffle=True, seed=0, drop_last=True)
    workers = args.loader_workers or max(0, usable_cores() - 1)  # chexnet_torch.train.loader_workers, 1 process
    loader = DataLoader(train_set, args.batch_size, sampler=sampler, num_workers=workers, drop_last=True,
                        pin_memory=device.type == "cuda")
    if len(loader) == 0:
        raise SystemExit(f"bench.gpu_torch: {len(train_set)} training images make no batch of {args.batch_size}: "
                         "raise --images or lower --batch-size")

    def batches() -> Iterator[tuple[Any, Any]]:
        for epoch in itertools.count():
            sampler.set_epoch(epoch)
            yield from loader

    return train_set, batches()


def timed(steps: int, batch: int, run: Callable[[], None], sync: Callable[[], None]) -> float:
    """images/s of `steps` calls of `run`, each `batch` images, the device drained before and after."""
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        run()
    sync()
    return steps * batch / (time.perf_counter() - start)


def versions(device: Any) -> dict[str, Any]:
    import torch

    torchvision_importable()
    import torchvision

    found: dict[str, Any] = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                             "python": platform.python_version(), "device": device.type}
    if device.type == "cuda":
        found.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda,
                     cudnn=torch.backends.cudnn.version(), gpu_count=torch.cuda.device_count())
    else:
        found.update(gpu=None, cpu=platform.processor() or platform.machine(), threads=torch.get_num_threads())
    return found


def measure(args: argparse.Namespace, device: Any, data_dir: Path) -> dict[str, list[float]]:
    """Each row's images/s per block, over --pairs pairs (see the module's docstring)."""
    import torch

    sync = synchronizer(device)
    torch.manual_seed(0)
    layout = torch.channels_last if args.channels_last == "on" else torch.contiguous_format
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device).to(memory_format=layout)
    labels = torch.randint(0, 2, (args.batch_size, NUM_CLASSES), device=device).float()
    train_set, batches = program_loader(args, data_dir, device)
    trainers = {"program step": program_trainer(args, device, train_set.labels()),
                "plain torchvision": plain_trainer(args, device)}

    def fed() -> None:
        trainers["program step"](*next(batches))

    def loaded() -> None:
        next(batches)

    def on_device(step: Callable[[Any, Any], None]) -> Callable[[], None]:
        return lambda: step(images, labels)

    blocks = {name: on_device(step) for name, step in trainers.items()}
    blocks.update({"program, fed": fed, "input pipeline": loaded})
    for run in blocks.values():  # cuDNN's autotuning, the allocator, the loader's workers: none of it timed
        timed(args.warmup, args.batch_size, run, sync)
    samples: dict[str, list[float]] = {name: [] for name in blocks}
    for index in range(args.pairs):
        for name in report.pair_order(index):
            samples[name].append(timed(args.steps, args.batch_size, blocks[name], sync))
            print(f"pair {index + 1}/{args.pairs} {name}: {samples[name][-1]:,.1f} images/s", flush=True)
    return samples


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    from bench.results import save

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench.gpu_torch: no CUDA device here; --device cpu runs the smoke mode", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # both models alike: cuDNN picks its fastest kernels
    else:
        torch.set_num_threads(1)  # a smoke run: threads that spin against other work would only slow it down
    with tempfile.TemporaryDirectory(prefix="dsportal-gpu-bench-") as tmp:
        from programkit.data.synthetic import write_synthetic

        data_dir = write_synthetic(Path(tmp) / "chestxray14", images=args.images, size=args.source_size, seed=0)
        samples = measure(args, device, data_dir)
    settings = {key: getattr(args, key) for key in ("model", "image_size", "batch_size", "steps", "warmup", "pairs",
                                                    "amp", "channels_last", "images", "source_size")}
    data = {**report.figures(samples), "settings": settings, "versions": versions(device),
            "smoke": device.type != "cuda"}
    targets = report.targets(data) if device.type == "cuda" else []
    print(report.table(data))
    print("\n".join(report.verdicts(targets)) or "smoke run on the CPU: no targets")
    if args.results is not None:
        os.environ["DSPORTAL_BENCH_RESULTS"] = str(args.results)
    command = "python -m bench.gpu_torch " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"results: {save('gpu_torch', command=command, targets=targets, data=data)}")
    return 0 if all(t.met for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
