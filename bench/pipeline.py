"""Input pipeline benchmark: the `old` and `new` pipelines on original PNGs and the `new` one on resized JPEG records,
each against the decode limit of what it reads, side by side in one run.

    python -m bench.pipeline [--images 256] [--size 1024] [--batch-size 32] [--image-size 224]
                                     [--short-side 256] [--quality 95] [--repeats 5] [--seconds 3] [--threads N]

The data set is synthetic ChestX-ray14 (`--size` x `--size` greyscale PNGs, 1024 as the real set). The PNG rows
read TFRecords of the original PNG bytes (decode + resize to `--image-size` per image); the JPEG rows read the same
images converted by `python -m chexnet.data.tfrecords --encoding jpeg` (short side `--short-side`), from which
training decodes only a random `--image-size` crop. A decode limit is read + the same decode only, on all cores,
batched, nothing else: the best this machine can deliver from those records. No training step runs. The runs
alternate (row 1, row 2, ..., row 1, ...) so that noise from other work on the machine hits them alike; each run is
timed for `--seconds` after a warm-up, and medians are reported with their spread.
"""

from __future__ import annotations

import argparse
import os
import time

from bench.common import Measurement, records_of, synthetic_set, table_with_limits

WARMUP_BATCHES = 2
WARMUP_SECONDS = 1.0  # lets tf.data's autotuner reach its parallelism before the clock starts
SHARDS = 8
OLD_PNG, NEW_PNG, PNG_LIMIT = "old, original PNGs", "new, original PNGs", "PNG decode limit"
NEW_JPEG, JPEG_LIMIT = "new, JPEG records", "JPEG decode limit"
LIMIT_OF = {OLD_PNG: PNG_LIMIT, NEW_PNG: PNG_LIMIT, NEW_JPEG: JPEG_LIMIT}


def images_per_sec(dataset, seconds: float, batch_size: int) -> float:
    """Pull batches through the pipeline for `seconds` (after a warm-up) and return the rate."""
    iterator = iter(dataset)
    started = time.perf_counter()
    warmed = 0
    while warmed < WARMUP_BATCHES or time.perf_counter() - started < WARMUP_SECONDS:
        next(iterator)
        warmed += 1
    started, batches = time.perf_counter(), 0
    while batches == 0 or time.perf_counter() - started < seconds:
        next(iterator)
        batches += 1
    return batches * batch_size / (time.perf_counter() - started)


def measure(args: argparse.Namespace) -> list[Measurement]:
    from chexnet.data.datasets import PipelineConfig, decode_only_dataset, train_dataset
    from chexnet.data.sources import source_of
    from chexnet.data.tfrecords import JPEG, Storage

    original = synthetic_set(args.images, args.size)
    png = source_of(records_of(original, SHARDS))
    jpeg = source_of(records_of(original, SHARDS, Storage.of(JPEG, args.short_side, args.quality)))

    def config(pipeline: str) -> PipelineConfig:
        return PipelineConfig(pipeline, args.batch_size, args.image_size, threads=args.threads)

    runs = {
        OLD_PNG: lambda: train_dataset(png, config("old")),
        NEW_PNG: lambda: train_dataset(png, config("new")),
        PNG_LIMIT: lambda: decode_only_dataset(png, "train", config("new")).repeat(),
        NEW_JPEG: lambda: train_dataset(jpeg, config("new")),
        JPEG_LIMIT: lambda: decode_only_dataset(jpeg, "train", config("new")).repeat(),
    }
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, make in runs.items():
            samples[name].append(images_per_sec(make(), args.seconds, args.batch_size))
    return [Measurement(name, tuple(values)) for name, values in samples.items()]


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run, every option spelled out."""
    threads = [] if args.threads is None else [f"--threads {args.threads}"]
    return " ".join(["python -m bench.pipeline", f"--images {args.images}", f"--size {args.size}",
                     f"--batch-size {args.batch_size}", f"--image-size {args.image_size}",
                     f"--short-side {args.short_side}", f"--quality {args.quality}", f"--repeats {args.repeats}",
                     f"--seconds {args.seconds:g}", *threads])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256, help="synthetic images in the data set")
    parser.add_argument("--size", type=int, default=1024, help="original image size (ChestX-ray14: 1024)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224, help="what the model is fed")
    parser.add_argument("--short-side", type=int, default=256, help="short side of the JPEG records")
    parser.add_argument("--quality", type=int, default=95, help="JPEG quality of the records")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per run (after warm-up)")
    parser.add_argument("--threads", type=int, default=None, help="private tf.data thread pool (default: shared)")
    args = parser.parse_args(argv)
    rows = measure(args)
    cores = len(os.sched_getaffinity(0))
    print(table_with_limits(
        f"Input pipeline, {args.size}x{args.size} greyscale PNG -> {args.image_size}, batch {args.batch_size}, "
        f"{args.repeats} alternating runs of {args.seconds:g} s, {cores} cores; JPEG records: short side "
        f"{args.short_side}, quality {args.quality}", rows, LIMIT_OF))
    print(f"command: {command(args)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
