"""ChestX-ray14 layout -> sharded TFRecords of training-ready images, so that many workers read disjoint files in large
sequential reads and decode small images instead of 1024x1024 PNGs.

    python -m chexnet.data.tfrecords --source D --out T --shards K [--encoding jpeg|raw|png] [--short-side 256]
                                     [--quality 95] [--workers N] [--seed 0] [--skip-bad]

writes T/{split}-{i:05d}-of-{n:05d}.tfrecord for train, val (carved from train_val by patient, exactly as
`load_index` does for the image directory) and test, then T/manifest.json. The manifest is written last, so a
directory holding one is complete; it names the format, the encoding, the short side and the JPEG quality.

Each example holds the image (`image`), its `height` and `width`, the 14 labels (`labels`) and the original file
name (`image_id`). The image is, by `--encoding`:
- jpeg (default): grey, resized so that its short side is `--short-side` (aspect ratio kept), JPEG at `--quality`;
  the pipeline then decodes only the training crop (`tf.io.decode_and_crop_jpeg`);
- raw: the same resized grey pixels, uncompressed uint8, row by row (height x width bytes);
- png: the original PNG bytes unchanged (the first format; decoded and resized at full size while training).

Resizing and encoding run in `--workers` processes (default: every core); the shards' content depends only on the
source, the options and `--seed` (the order of the train records), never on the number of workers.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import tensorflow as tf
from PIL import Image

from programkit.data.chestxray14 import SPLITS, DataError, Record, load_index, progress
from programkit.data.storage import (  # noqa: F401  (the storage's names, where they were defined first)
    CHUNK,
    DEFAULT_QUALITY,
    DEFAULT_SEED,
    DEFAULT_SHARDS,
    DEFAULT_SHORT_SIDE,
    ENCODINGS,
    FORMAT,
    FORMAT_PNG_ONLY,
    FORMATS,
    JPEG,
    MANIFEST,
    PNG,
    RAW,
    Storage,
    shard_name,
    storage_of,
)
from programkit.labels import CLASSES, NUM_CLASSES
from programkit.model_card import split_fingerprints

log = logging.getLogger(__name__)

FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "labels": tf.io.FixedLenFeature([NUM_CLASSES], tf.float32),
    "image_id": tf.io.FixedLenFeature([], tf.string),
    "height": tf.io.FixedLenFeature([], tf.int64, default_value=0),  # 0: not recorded (png encoding, format 1)
    "width": tf.io.FixedLenFeature([], tf.int64, default_value=0),
}


# --- one image: read, resize, encode (in worker processes: numpy and PIL only) -----------------------------------

def resized_shape(height: int, width: int, short_side: int) -> tuple[int, int]:
    """(height, width) with the short side `short_side` and the aspect ratio kept (rounded)."""
    scale = short_side / min(height, width)
    return max(1, round(height * scale)), max(1, round(width * scale))


def grey8(image: Image.Image) -> Image.Image:
    """8-bit grey, as `tf.io.decode_png(channels=1)` makes it: 16-bit files keep their high byte, colour is luma."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        pixels = np.asarray(image).astype(np.uint32) >> 8
        return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), mode="L")
    return image if image.mode == "L" else image.convert("L")


def encode_image(png: bytes, storage: Storage) -> tuple[bytes, int, int]:
    """Original PNG bytes -> (stored bytes, height, width) for `storage`."""
    if storage.encoding == PNG:
        with Image.open(io.BytesIO(png)) as image:
            return png, image.height, image.width
    with Image.open(io.BytesIO(png)) as image:
        image.load()  # decode now: a truncated file fails here with OSError, not later with a closed file
        grey = grey8(image)
        height, width = resized_shape(grey.height, grey.width, storage.short_side)
        if (height, width) != (grey.height, grey.width):
            # PIL's bilinear filter widens with the scale factor when shrinking: it averages, not aliases.
            grey = grey.resize((width, height), Image.Resampling.BILINEAR)
    if storage.encoding == RAW:
        return grey.tobytes(), height, width
    out = io.BytesIO()
    grey.save(out, format="JPEG", quality=storage.quality)
    return out.getvalue(), height, width


def _encode_file(job: tuple[Path, Storage]) -> tuple[bytes, int, int] | str:
    """A worker's task: the encoded image, or the reason it could not be read (reported by the parent)."""
    path, storage = job
    try:
        return encode_image(path.read_bytes(), storage)
    except (OSError, ValueError, SyntaxError) as error:  # PIL's errors for missing, truncated or foreign files
        return f"{type(error).__name__}: {error}"


# --- examples -------------------------------------------------------------------------------------------------

def to_example(record: Record, image: bytes, height: int, width: int) -> tf.train.Example:
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
        "labels": tf.train.Feature(float_list=tf.train.FloatList(value=record.labels.tolist())),
        "image_id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[record.image_id.encode()])),
        "height": tf.train.Feature(int64_list=tf.train.Int64List(value=[height])),
        "width": tf.train.Feature(int64_list=tf.train.Int64List(value=[width])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature))


def parse_example(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
    """One serialized example -> {"image": stored bytes, "labels": float32 [14], "image_id": bytes, "height",
    "width": int64 (0 in the first format)}."""
    return tf.io.parse_single_example(serialized, FEATURES)


# --- the conversion -------------------------------------------------------------------------------------------

def convert(source: str | Path, out: str | Path, shards: int, skip_bad: bool = False,
            storage: Storage | None = None, workers: int | None = None, seed: int = DEFAULT_SEED) -> dict:
    """Write the TFRecords and the manifest for the layout at `source`; return the manifest.

    `storage=None` stores JPEGs with the short side 256 at quality 95; `workers=None` uses every core."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1; got {shards}")
    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers < 1:
        raise ValueError(f"workers must be at least 1; got {workers}")
    storage = storage or Storage()
    index = load_index(source, skip_bad=skip_bad)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _remove_previous(out)
    manifest = {"format": FORMAT, "encoding": storage.encoding, "short_side": storage.short_side,
                "quality": storage.quality, "seed": seed, "source": str(Path(source).resolve()),
                "classes": list(CLASSES), "skipped": index.skipped, "counts": {}, "shards": {}}
    written: dict[str, list[tuple[str, str]]] = {}
    with _encoder(workers) as encode:
        for split in SPLITS:
            records = _ordered(index.split(split), split, seed)
            encoded = encode(_encode_file, [(r.path, storage) for r in records])
            manifest["shards"][split], kept = _write_split(out, split, records, encoded, shards, skip_bad)
            bad = len(records) - len(kept)
            written[split] = [(r.image_id, r.patient_id) for r in kept]
            manifest["counts"][split] = len(kept)
            manifest["skipped"] += bad
    # What a model card compares (programkit.model_card): the records hold no patient, so the lists are hashed here.
    manifest["fingerprints"] = split_fingerprints(written)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


class _encoder:
    """`encode(function, jobs)` -> results in the jobs' order: in this process, or in a pool of `workers`."""

    def __init__(self, workers: int) -> None:
        self.workers, self.pool = workers, None

    def __enter__(self):
        if self.workers > 1:
            # fork: the workers run numpy and PIL only, and start at once instead of importing TensorFlow again.
            # SIGTERM blocked while they are made: each is born with it blocked, and takes it only once its start
            # has made it fatal (_ended_by_sigterm); the pool's threads, made here too, keep it blocked.
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            try:
                self.pool = multiprocessing.get_context("fork").Pool(self.workers, initializer=_ended_by_sigterm)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            return lambda function, jobs: self.pool.imap(function, jobs, chunksize=CHUNK)
        return lambda function, jobs: map(function, jobs)

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


def _ended_by_sigterm() -> None:
    """A pool worker's start: SIGTERM ends it. A forked worker inherits its parent's handler, which may not end it:
    under coverage.py's (`make coverage`), a worker the pool terminated waited on the task queue's lock for ever, and
    the pool's join with it (tests/unit/chexnet/data/test_tfrecords.py, 2026-12-04: 1 run in 2 hung). It is born
    with SIGTERM blocked (_encoder), so one sent before this line (a loaded `make test`, 2026-12-05: the pool ended
    before its second worker had started) waits for it and then ends the worker."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _remove_previous(out: Path) -> None:
    """A rerun with fewer shards must not leave the old run's extra shards for readers to find."""
    (out / MANIFEST).unlink(missing_ok=True)
    for split in SPLITS:
        for old in out.glob(f"{split}-*-of-*.tfrecord"):
            old.unlink()


def _ordered(records: list[Record], split: str, seed: int) -> list[Record]:
    if split != "train":
        return records  # evaluation order stays the split list's order
    order = np.random.default_rng(seed).permutation(len(records))
    return [records[i] for i in order]


def _write_split(out: Path, split: str, records: list[Record], encoded: Iterator, shards: int,
                 skip_bad: bool) -> tuple[list[dict], list[Record]]:
    """Contiguous, near-equal chunks by position; at least one (possibly empty) file, so every split has a shard
    to list. Returns the shards with the records each holds, and the records written (not those left out as
    unreadable)."""
    count = max(1, min(shards, len(records)))
    sizes = [len(chunk) for chunk in np.array_split(np.arange(len(records)), count)]
    names = [shard_name(split, i, count) for i in range(count)]
    shard_of = np.repeat(np.arange(count), sizes)
    written, kept = [0] * count, []
    with ExitStack() as stack:
        writers = [stack.enter_context(tf.io.TFRecordWriter(str(out / name))) for name in names]
        for record, shard, result in zip(records, shard_of, progress(encoded, len(records), f"{split:5s}"),
                                         strict=True):
            if isinstance(result, str):
                if not skip_bad:
                    raise DataError(f"{record.path}: cannot be read as an image ({result}); "
                                    "pass --skip-bad to leave it out")
                log.warning("%s: left out, cannot be read as an image (%s)", record.path, result)
                continue
            writers[shard].write(to_example(record, *result).SerializeToString())
            written[shard] += 1
            kept.append(record)
    return [{"file": name, "records": n} for name, n in zip(names, written, strict=True)], kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chexnet.data.tfrecords", description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, type=Path, help="ChestX-ray14 layout directory")
    parser.add_argument("--out", required=True, type=Path, help="directory for the shards and manifest.json")
    parser.add_argument("--shards", type=int, default=DEFAULT_SHARDS, help="shards per split (at most)")
    parser.add_argument("--encoding", default=JPEG, choices=ENCODINGS,
                        help="jpeg: resized JPEG (default); raw: resized uint8 pixels; png: the original files")
    parser.add_argument("--short-side", type=int, default=DEFAULT_SHORT_SIDE,
                        help="jpeg, raw: resize so that the shorter side has this many pixels (aspect kept)")
    parser.add_argument("--quality", type=int, default=DEFAULT_QUALITY, help="jpeg: quality 1..100")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes that resize and encode (default: every core)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the order of the train records")
    parser.add_argument("--skip-bad", action="store_true",
                        help="leave out bad rows and unreadable images with a warning, not an error")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        storage = Storage.of(args.encoding, args.short_side, args.quality)
        manifest = convert(args.source, args.out, args.shards, skip_bad=args.skip_bad, storage=storage,
                           workers=args.workers, seed=args.seed)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        parser.error(str(error))
    counts = ", ".join(f"{split} {n}" for split, n in manifest["counts"].items())
    print(f"wrote {counts} examples ({storage.encoding}) to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
