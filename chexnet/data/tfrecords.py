"""ChestX-ray14 layout -> sharded TFRecords, so that many workers can read disjoint files in large sequential reads.

    python -m chexnet.data.tfrecords --source D --out T --shards K [--skip-bad]

writes T/{split}-{i:05d}-of-{n:05d}.tfrecord for train, val (carved from train_val by patient, exactly as
`load_index` does for the image directory) and test, then T/manifest.json. The manifest is written last, so a
directory holding one is complete. Each example keeps the original PNG bytes unchanged (`image`), the 14 labels
(`labels`) and the file name (`image_id`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import tensorflow as tf

from chexnet.data.chestxray14 import SPLITS, DataError, Record, load_index, progress
from chexnet.labels import CLASSES, NUM_CLASSES

MANIFEST = "manifest.json"
FORMAT = "chexnet-tfrecord-1"
DEFAULT_SHARDS = 16
TRAIN_ORDER_SEED = 0  # train records are written in a shuffled order, so that any one shard mixes patients
FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "labels": tf.io.FixedLenFeature([NUM_CLASSES], tf.float32),
    "image_id": tf.io.FixedLenFeature([], tf.string),
}


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def to_example(record: Record) -> tf.train.Example:
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[record.path.read_bytes()])),
        "labels": tf.train.Feature(float_list=tf.train.FloatList(value=record.labels.tolist())),
        "image_id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[record.image_id.encode()])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature))


def parse_example(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
    """One serialized example -> {"image": PNG bytes, "labels": float32 [14], "image_id": bytes}."""
    return tf.io.parse_single_example(serialized, FEATURES)


def convert(source: str | Path, out: str | Path, shards: int, skip_bad: bool = False) -> dict:
    """Write the TFRecords and the manifest for the layout at `source`; return the manifest."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1; got {shards}")
    index = load_index(source, skip_bad=skip_bad)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _remove_previous(out)
    manifest = {"format": FORMAT, "source": str(Path(source).resolve()), "classes": list(CLASSES),
                "skipped": index.skipped, "counts": {}, "shards": {}}
    for split in SPLITS:
        records = _ordered(index.split(split), split)
        manifest["counts"][split] = len(records)
        manifest["shards"][split] = _write_split(out, split, records, shards)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _remove_previous(out: Path) -> None:
    """A rerun with fewer shards must not leave the old run's extra shards for readers to find."""
    (out / MANIFEST).unlink(missing_ok=True)
    for split in SPLITS:
        for old in out.glob(f"{split}-*-of-*.tfrecord"):
            old.unlink()


def _ordered(records: list[Record], split: str) -> list[Record]:
    if split != "train":
        return records  # evaluation order stays the split list's order
    order = np.random.default_rng(TRAIN_ORDER_SEED).permutation(len(records))
    return [records[i] for i in order]


def _write_split(out: Path, split: str, records: list[Record], shards: int) -> list[dict]:
    """Contiguous, near-equal chunks; at least one (possibly empty) file, so every split has a shard to list."""
    count = max(1, min(shards, len(records)))
    sizes = [len(chunk) for chunk in np.array_split(np.arange(len(records)), count)]
    names = [shard_name(split, i, count) for i in range(count)]
    shard_of = np.repeat(np.arange(count), sizes)
    with ExitStack() as stack:
        writers = [stack.enter_context(tf.io.TFRecordWriter(str(out / name))) for name in names]
        for record, shard in zip(progress(records, len(records), f"{split:5s}"), shard_of, strict=True):
            writers[shard].write(to_example(record).SerializeToString())
    return [{"file": name, "records": size} for name, size in zip(names, sizes, strict=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chexnet.data.tfrecords", description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, type=Path, help="ChestX-ray14 layout directory")
    parser.add_argument("--out", required=True, type=Path, help="directory for the shards and manifest.json")
    parser.add_argument("--shards", type=int, default=DEFAULT_SHARDS, help="shards per split (at most)")
    parser.add_argument("--skip-bad", action="store_true", help="leave out bad rows with a warning, not an error")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        manifest = convert(args.source, args.out, args.shards, skip_bad=args.skip_bad)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        parser.error(str(error))
    counts = ", ".join(f"{split} {n}" for split, n in manifest["counts"].items())
    print(f"wrote {counts} examples to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
