"""Horovod scaling benchmark: training images/sec with 1 and 2 workers, and the scaling efficiency.

    python -m bench.scaling [--workers 1 2] [--repeats 2] [--image-size 128] [--batch-size 8]

Each run is a real `horovodrun -np N python -m chexnet.train ...` on the same synthetic data; its rate is the
median of the `throughput/images_per_sec` points it wrote to TensorBoard (all workers together, compile step
excluded). Runs alternate between worker counts. Efficiency = rate(N) / (N x rate(1)). For reference, the Dell
study measured 85 % at 2 V100 GPUs; on CPUs the workers share the same cores, so expect far less here.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import Measurement, records_of, synthetic_set, table

THROUGHPUT_TAG = "throughput/images_per_sec"
HOROVODRUN = str(Path(sys.executable).with_name("horovodrun"))  # the venv's, whatever PATH says
DELL_V100_EFFICIENCY = {2: 0.85, 8: 0.75, 16: 0.65}  # shared/reference: dell_chexnet_v100_throughput.csv


def scalar_values(logdir: Path, tag: str) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    values = []
    for events in sorted(logdir.rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0, "tensors": 0})
        accumulator.Reload()
        tags = accumulator.Tags()
        if tag in tags.get("scalars", []):
            values += [e.value for e in accumulator.Scalars(tag)]
        elif tag in tags.get("tensors", []):
            values += [float(make_ndarray(e.tensor_proto)) for e in accumulator.Tensors(tag)]
    return values


def train_rate(workers: int, data: Path, args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory(prefix="dsportal-scaling-") as tmp:
        logdir, checkpoints = Path(tmp) / "logs", Path(tmp) / "checkpoints"
        command = [HOROVODRUN, "-np", str(workers), "-H", f"localhost:{workers}",
                   sys.executable, "-m", "chexnet.train", "--data-dir", str(data), "--logdir", str(logdir),
                   "--checkpoint-dir", str(checkpoints), "--epochs", str(args.epochs),
                   "--batch-size", str(args.batch_size), "--image-size", str(args.image_size),
                   "--model", args.model, "--pipeline", "new"]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        rates = scalar_values(logdir, THROUGHPUT_TAG)
        if not rates:
            raise SystemExit(f"the {workers}-worker run wrote no {THROUGHPUT_TAG} points")
        return statistics.median(rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8, help="per worker")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--model", default="densenet121")
    args = parser.parse_args(argv)

    data = records_of(synthetic_set(args.images, 256), shards=8)
    samples: dict[int, list[float]] = {n: [] for n in args.workers}
    for _ in range(args.repeats):
        for workers in args.workers:
            samples[workers].append(train_rate(workers, data, args))
    rows = [Measurement(f"{n} worker{'s' if n > 1 else ''}", tuple(samples[n])) for n in args.workers]
    base = rows[0]
    print(table(f"Horovod training, {args.model} {args.image_size}x{args.image_size}, batch {args.batch_size} "
                f"per worker, {args.repeats} repeats", rows, base, base.name))
    for n, row in zip(args.workers, rows, strict=True):
        if n > 1:
            efficiency = row.median / (n * base.median)
            reference = DELL_V100_EFFICIENCY.get(n)
            note = f" (Dell, {n} V100 GPUs: {reference:.0%})" if reference else ""
            print(f"scaling efficiency at {n} workers: {efficiency:.0%}{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
