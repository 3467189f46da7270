"""Input pipeline benchmark: the `new` and `old` pipelines against the machine's decode limit, side by side.

    python -m chexnet.bench.pipeline [--images 256] [--size 1024] [--batch-size 32] [--repeats 5] [--batches 12]

All three read the same TFRecords (original-size PNGs, as ChestX-ray14 ships them) and repeat, so each
repeat times the same number of batches. The decode limit is decode + resize only, on all cores, nothing
else: what this machine can deliver at best. The runs alternate (new, old, limit, new, ...) so that noise
from other work on the machine hits them alike; medians are reported with their spread.
"""

from __future__ import annotations

import argparse
import time

from chexnet.bench.common import Measurement, records_of, synthetic_set, table

WARMUP_BATCHES = 2


def images_per_sec(dataset, batches: int, batch_size: int) -> float:
    """Pull `batches` batches through the pipeline (after warm-up) and time it."""
    iterator = iter(dataset)
    for _ in range(WARMUP_BATCHES):
        next(iterator)
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch_size / (time.perf_counter() - started)


def measure(images: int, size: int, batch_size: int, image_size: int, repeats: int,
            batches: int) -> list[Measurement]:
    from chexnet.data.pipeline import PipelineConfig, decode_only_dataset, source_of, train_dataset

    records = records_of(synthetic_set(images, size), shards=8)
    source = source_of(records)
    runs = {
        "new pipeline": lambda: train_dataset(source, PipelineConfig("new", batch_size, image_size)),
        "old pipeline": lambda: train_dataset(source, PipelineConfig("old", batch_size, image_size)),
        "decode limit": lambda: decode_only_dataset(source, "train", PipelineConfig("new", batch_size, image_size))
        .repeat(),
    }
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, make in runs.items():
            samples[name].append(images_per_sec(make(), batches, batch_size))
    return [Measurement(name, tuple(values)) for name, values in samples.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256, help="synthetic images in the data set")
    parser.add_argument("--size", type=int, default=1024, help="stored image size (ChestX-ray14: 1024)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224, help="what the model is fed")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=12, help="timed batches per repeat (after warm-up)")
    args = parser.parse_args(argv)
    rows = measure(args.images, args.size, args.batch_size, args.image_size, args.repeats, args.batches)
    limit = next(r for r in rows if r.name == "decode limit")
    print(table(f"Input pipeline, {args.size}x{args.size} PNG in TFRecords -> {args.image_size}, "
                f"batch {args.batch_size}, {args.repeats} repeats", rows, limit, "limit"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
