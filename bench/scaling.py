"""Horovod scaling benchmark: training images/sec with 1 and 2 workers, and the scaling efficiency.

    python -m bench.scaling [--workers 1 2] [--repeats 2] [--image-size 128] [--batch-size 8]

Each run is a real `horovodrun -np N python -m chexnet.train ...` on the same synthetic data; its rate is the
median of the `throughput/images_per_sec` points it wrote to TensorBoard (all workers together, compile step
excluded). Runs alternate between worker counts. Efficiency = rate(N) / (N x rate(1)), the first --workers count
being the reference. For reference, the Dell study measured 85 % at 2 V100 GPUs; on CPUs the workers share the
same cores, so expect far less here. No target: the figures (every run's rate, medians, spreads, efficiencies)
are saved to docs/results/scaling.json.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import Measurement, records_of, synthetic_set, table
from bench.results import save

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
                   "--model", args.model, "--pipeline", "parallel"]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        rates = scalar_values(logdir, THROUGHPUT_TAG)
        if not rates:
            raise SystemExit(f"the {workers}-worker run wrote no {THROUGHPUT_TAG} points")
        return statistics.median(rates)


def results(samples: dict[int, list[float]], settings: dict) -> dict:
    """What is saved and printed: a row per worker count (the first is the reference), the efficiencies."""
    rows = [Measurement(f"{n} worker{'s' if n > 1 else ''}", tuple(rates)) for n, rates in samples.items()]
    first, base = next(iter(samples)), rows[0].median  # efficiency = rate(n) / (n / first x rate(first))
    return {**settings,
            "rows": [{**row.as_row(), "workers": n, "ratio": row.median / base if base else None}
                     for n, row in zip(samples, rows, strict=True)],
            "efficiency": {str(n): row.median * first / (n * base) if base else None
                           for n, row in zip(samples, rows, strict=True) if n != first},
            "dell_v100_efficiency": {str(n): e for n, e in DELL_V100_EFFICIENCY.items()}}


def report(data: dict) -> str:
    rows = [Measurement(row["name"], tuple(row["samples"])) for row in data["rows"]]
    lines = [table(f"Horovod training, {data['model']} {data['image_size']}x{data['image_size']}, batch "
                   f"{data['batch_size']} per worker, {data['repeats']} repeats", rows, rows[0], rows[0].name)]
    for n, efficiency in data["efficiency"].items():
        reference = data["dell_v100_efficiency"].get(n)
        note = f" (Dell, {n} V100 GPUs: {reference:.0%})" if reference else ""
        lines.append(f"scaling efficiency at {n} workers: {efficiency:.0%}{note}")
    return "\n".join(lines)


def command(args: argparse.Namespace) -> str:
    return (f"python -m bench.scaling --workers {' '.join(map(str, args.workers))} --repeats {args.repeats} "
            f"--images {args.images} --image-size {args.image_size} --batch-size {args.batch_size} "
            f"--epochs {args.epochs} --model {args.model}")


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
    if args.repeats < 1 or not args.workers or min(args.workers) < 1 or len(set(args.workers)) != len(args.workers):
        parser.error(f"--workers {args.workers}, --repeats {args.repeats}; allowed: distinct worker counts of 1 or "
                     "more (the first is the reference), --repeats 1 or more")
    data = records_of(synthetic_set(args.images, 256), shards=8)
    samples: dict[int, list[float]] = {n: [] for n in args.workers}
    for _ in range(args.repeats):
        for workers in args.workers:
            samples[workers].append(train_rate(workers, data, args))
    found = results(samples, {"model": args.model, "image_size": args.image_size, "batch_size": args.batch_size,
                              "repeats": args.repeats, "images": args.images, "epochs": args.epochs})
    print(report(found))
    print(f"results: {save('scaling', command=command(args), targets=[], data=found)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
