"""tf.data input pipelines for CheXNet: the parallel "new" one that training uses and the sequential "old" one.

Either reads a TFRecord directory (`python -m chexnet.data.tfrecords`, found by its manifest.json) or a ChestX-ray14
layout directory of PNG files. In pipeline order:

    list files -> shard the files by rank -> interleave reads -> shuffle -> decode + resize -> augment + normalise
    -> batch -> prefetch

Bad data never stops a run. An image that cannot be read or decoded is dropped (`ignore_errors`), and a damaged
TFRecord shard is read up to the damage. Both are counted in tf.Variables that the pipeline's own ops update, so the
count is right whichever thread met the problem: `skipped_count()` is the number of examples this process has
dropped since it started (or since `reset_skipped_count()`), counted again in every epoch that meets them.
While a pipeline is running, an image whose decode is under way at that very instant is counted as skipped until it
finishes; the number is exact once the pipeline has stopped, and at most `num_parallel_calls` high before that.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import tensorflow as tf

from chexnet.data.chestxray14 import IMAGES_DIR, SPLITS, DataError, Index, labels_matrix, load_index
from chexnet.data.tfrecords import FORMAT, MANIFEST, parse_example
from chexnet.labels import CLASSES, NUM_CLASSES

log = logging.getLogger(__name__)

AUTOTUNE = tf.data.AUTOTUNE
PIPELINES = ("new", "old")
TFRECORD, IMAGES = "tfrecord", "images"
READ_CYCLE = 8  # shards read at once: enough to hide one file's latency, few enough to keep reads sequential
IMAGENET_MEAN = (0.485, 0.456, 0.406)  # DenseNet-121 conventions, applied to the grey image copied to 3 channels
IMAGENET_STD = (0.229, 0.224, 0.225)
SOURCE_HELP = (f"expected a ChestX-ray14 layout ({IMAGES_DIR}/, Data_Entry_2017.csv, train_val_list.txt, "
               f"test_list.txt) or a TFRecord directory with {MANIFEST} (python -m chexnet.data.tfrecords)")


@dataclass(frozen=True)
class PipelineConfig:
    """How to feed the model; the defaults are the training defaults."""

    pipeline: str = "new"  # "new": parallel reads, decode and prefetch; "old": sequential, for the benchmark
    batch_size: int = 32  # per worker
    image_size: int = 224
    cache: bool = False  # keep decoded, resized images in memory after the first epoch (small sets only)
    threads: int | None = None  # a private thread pool of this size for the new pipeline; None: TF's shared pool
    shuffle_buffer: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        if self.pipeline not in PIPELINES:
            raise ValueError(f"pipeline must be one of {', '.join(PIPELINES)}; got {self.pipeline!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1; got {self.batch_size}")
        if self.image_size < 1:
            raise ValueError(f"image_size must be at least 1; got {self.image_size}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be at least 1 or None (TensorFlow's shared pool); got {self.threads}")
        if self.shuffle_buffer < 1:
            raise ValueError(f"shuffle_buffer must be at least 1; got {self.shuffle_buffer}")


@dataclass(frozen=True)
class DataSource:
    """Where the examples of each split are: TFRecord shards (with their record counts) or PNG files."""

    kind: str  # TFRECORD or IMAGES
    root: Path
    shards: dict[str, list[tuple[str, int]]] | None = None  # TFRECORD: split -> [(path, records)]
    index: Index | None = None  # IMAGES

    def count(self, split: str) -> int:
        """How many examples the split has (before any corrupt one is dropped while reading)."""
        _check_split(split)
        if self.kind == TFRECORD:
            return sum(records for _, records in self.shards[split])
        return len(self.index.split(split))

    def files(self, split: str) -> list[str]:
        """The split's shard files (TFRecord) or image files (layout), in a fixed order."""
        _check_split(split)
        if self.kind == TFRECORD:
            return [path for path, _ in self.shards[split]]
        return [str(r.path) for r in self.index.split(split)]


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")


def source_of(data_dir: str | Path, *, skip_bad: bool = False) -> DataSource:
    """A TFRecord directory if `data_dir` has a manifest.json, else a ChestX-ray14 layout directory."""
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(f"data directory {root} does not exist; {SOURCE_HELP}")
    if not any(root.iterdir()):
        raise DataError(f"data directory {root} is empty; {SOURCE_HELP}")
    if (root / MANIFEST).is_file():
        return _tfrecord_source(root)
    return DataSource(kind=IMAGES, root=root, index=load_index(root, skip_bad=skip_bad))


def _tfrecord_source(root: Path) -> DataSource:
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except json.JSONDecodeError as error:
        raise DataError(f"{root / MANIFEST} is not valid JSON ({error}); rerun python -m chexnet.data.tfrecords") \
            from None
    if manifest.get("format") != FORMAT:
        raise DataError(f"{root / MANIFEST}: format {manifest.get('format')!r}; this reader knows {FORMAT!r}")
    if manifest.get("classes") != list(CLASSES):
        raise DataError(f"{root / MANIFEST}: classes {manifest.get('classes')}; expected {', '.join(CLASSES)}")
    shards = {split: [(str(root / s["file"]), int(s["records"])) for s in manifest["shards"][split]]
              for split in SPLITS}
    missing = [path for split in SPLITS for path, _ in shards[split] if not Path(path).is_file()]
    if missing:
        raise DataError(f"{root}: {len(missing)} shards named in {MANIFEST} are missing, e.g. {missing[:5]}")
    return DataSource(kind=TFRECORD, root=root, shards=shards)


# --- counting what was skipped -------------------------------------------------------------------------------

class _Counters:
    """Decodes begun and finished, and records lost from damaged shards; int64 variables the pipelines update."""

    def __init__(self) -> None:
        with tf.init_scope():  # plain process-wide variables, even if the first pipeline is built in a tf.function
            self.attempted = tf.Variable(0, dtype=tf.int64, trainable=False, name="decodes_attempted")
            self.decoded = tf.Variable(0, dtype=tf.int64, trainable=False, name="decodes_done")
            self.lost = tf.Variable(0, dtype=tf.int64, trainable=False, name="records_lost")


_COUNTERS: _Counters | None = None


def _counters() -> _Counters:
    global _COUNTERS
    if _COUNTERS is None:
        _COUNTERS = _Counters()
    return _COUNTERS


def skipped_count() -> int:
    """Examples dropped by this process's pipelines: undecodable or unreadable images plus records of damaged shards."""
    counters = _counters()
    return int(counters.attempted.numpy() - counters.decoded.numpy() + counters.lost.numpy())


def reset_skipped_count() -> None:
    counters = _counters()
    for variable in (counters.attempted, counters.decoded, counters.lost):
        variable.assign(0)


# --- reading --------------------------------------------------------------------------------------------------

def _read_shard(path: tf.Tensor, expected: tf.Tensor) -> tf.data.Dataset:
    """The records of one shard; a damaged shard ends at the damage and the records it lost are counted."""
    records = tf.data.TFRecordDataset(path).ignore_errors()  # DataLossError ends this file, not the run
    end = tf.data.Dataset.from_tensors((tf.constant(b""), tf.constant(True)))
    marked = records.map(lambda record: (record, tf.constant(False))).concatenate(end)
    numbered = marked.scan(tf.constant(0, tf.int64), _number_records)
    counted = numbered.map(partial(_count_lost, expected=expected))
    return counted.filter(lambda _, is_end: not is_end).map(lambda record, _: record)


def _number_records(read: tf.Tensor, element: tuple) -> tuple:
    record, is_end = element
    read = read + tf.cast(tf.logical_not(is_end), tf.int64)
    return read, (record, is_end, read)


def _count_lost(record: tf.Tensor, is_end: tf.Tensor, read: tf.Tensor, expected: tf.Tensor) -> tuple:
    lost = tf.where(is_end, tf.maximum(expected - read, 0), tf.constant(0, tf.int64))
    with tf.control_dependencies([_counters().lost.assign_add(lost)]):
        return tf.identity(record), is_end


def _parse(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    example = parse_example(serialized)
    return example["image"], example["labels"]


def _rank_files(source: DataSource, split: str, rank: int, size: int) -> tuple[list, list, bool]:
    """This rank's files and what to expect of each; if there are fewer files than ranks, all files and
    element_sharding=True (each rank then keeps every size-th example, so reads are repeated)."""
    _check_rank(rank, size)
    if source.kind == TFRECORD:
        files = source.shards[split]
        paths, payload = [p for p, _ in files], [n for _, n in files]
    else:
        records = source.index.split(split)
        paths, payload = [str(r.path) for r in records], labels_matrix(records)
    if len(paths) >= size:
        return paths[rank::size], payload[rank::size], False
    log.warning("%s: %d %s files for %d workers; sharding by element, every worker reads all files",
                split, len(paths), source.kind, size)
    return paths, payload, True


def _check_rank(rank: int, size: int) -> None:
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank must be in [0, size) and size at least 1; got rank {rank}, size {size}")


def _encoded_examples(source: DataSource, split: str, cfg: PipelineConfig, rank: int, size: int,
                      parallel: bool, shuffle_files: bool) -> tf.data.Dataset:
    """One pass over this rank's (encoded image, labels): PNG bytes from shards, or PNG paths from the layout."""
    paths, payload, element_sharding = _rank_files(source, split, rank, size)
    if source.kind == IMAGES:
        files = tf.data.Dataset.from_tensor_slices((paths, payload))
        if shuffle_files:  # file names and labels are tiny: shuffle all of them, not a buffer
            files = files.shuffle(len(paths), seed=cfg.seed, reshuffle_each_iteration=True)
        return files.shard(size, rank) if element_sharding else files
    files = tf.data.Dataset.from_tensor_slices((paths, tf.constant(payload, tf.int64)))
    if shuffle_files:  # the same seed on every rank, so element sharding below still splits one common order
        files = files.shuffle(len(paths), seed=cfg.seed, reshuffle_each_iteration=True)
    if parallel:
        # Element sharding needs the same order on every rank: then the interleave must be deterministic.
        records = files.interleave(_read_shard, cycle_length=min(READ_CYCLE, len(paths)),
                                   num_parallel_calls=AUTOTUNE, deterministic=element_sharding)
    else:
        records = files.flat_map(_read_shard)
    if element_sharding:
        records = records.shard(size, rank)
    return records.map(_parse, num_parallel_calls=AUTOTUNE if parallel else None)


# --- decoding (the decoder) and preparing for the model (the parser) --------------------------------------------

def decode_resize(encoded: tf.Tensor, size: int) -> tf.Tensor:
    """PNG bytes -> uint8 [size, size, 1]; uint8 so that a cache holds 4x more images than float32 would."""
    image = tf.io.decode_png(encoded, channels=1)  # RGBA or 16-bit files in the real set become 8-bit grey too
    image = tf.image.resize(image, [size, size], method="bilinear")
    return tf.ensure_shape(tf.saturate_cast(tf.round(image), tf.uint8), [size, size, 1])


def _decode_counted(encoded: tf.Tensor, labels: tf.Tensor, size: int, from_path: bool) -> tuple:
    """`decode_resize` between two counters: a decode that fails leaves `attempted` one ahead of `decoded`."""
    counters = _counters()
    with tf.control_dependencies([counters.attempted.assign_add(1)]):
        data = tf.io.read_file(encoded) if from_path else tf.identity(encoded)
        image = decode_resize(data, size)
    with tf.control_dependencies([image]):
        done = counters.decoded.assign_add(1)
    with tf.control_dependencies([done]):
        return tf.identity(image), labels


def augment(image: tf.Tensor) -> tf.Tensor:
    return tf.image.random_flip_left_right(image)


def normalise(image: tf.Tensor) -> tf.Tensor:
    """uint8 grey [S, S, 1] -> float32 [S, S, 3] with ImageNet mean and std."""
    image = tf.image.grayscale_to_rgb(tf.cast(image, tf.float32) / 255.0)
    return (image - IMAGENET_MEAN) / IMAGENET_STD


def _for_training(image: tf.Tensor, labels: tf.Tensor) -> tuple:
    return normalise(augment(image)), labels


def _for_evaluation(image: tf.Tensor, labels: tf.Tensor) -> tuple:
    return normalise(image), labels


def _decoded(examples: tf.data.Dataset, source: DataSource, cfg: PipelineConfig, parallel: bool,
             deterministic: bool = False) -> tf.data.Dataset:
    decode = partial(_decode_counted, size=cfg.image_size, from_path=source.kind == IMAGES)
    if not parallel:
        return examples.map(decode).ignore_errors()
    return examples.map(decode, num_parallel_calls=AUTOTUNE, deterministic=deterministic).ignore_errors()


# --- the datasets --------------------------------------------------------------------------------------------------

def train_dataset(source: DataSource, cfg: PipelineConfig, rank: int = 0, size: int = 1) -> tf.data.Dataset:
    """Endless batches (images float32 [B, S, S, 3], labels float32 [B, 14]) of this rank's part of train."""
    parallel = cfg.pipeline == "new"
    calls = AUTOTUNE if parallel else None
    examples = _encoded_examples(source, "train", cfg, rank, size, parallel, shuffle_files=True)
    if cfg.cache:  # decode once, then shuffle the decoded images every epoch
        images = _decoded(examples, source, cfg, parallel).cache().repeat()
        images = images.shuffle(cfg.shuffle_buffer, seed=cfg.seed)
    else:  # shuffle the small encoded images, decode after
        encoded = examples.repeat().shuffle(cfg.shuffle_buffer, seed=cfg.seed)
        images = _decoded(encoded, source, cfg, parallel)
    batches = images.map(_for_training, num_parallel_calls=calls).batch(cfg.batch_size, drop_remainder=True)
    return _finish(batches, cfg)


def eval_dataset(source: DataSource, split: str, cfg: PipelineConfig, rank: int = 0,
                 size: int = 1) -> tf.data.Dataset:
    """One pass over rank's share of `split` (every size-th example), in order, no augmentation, last batch short."""
    _check_split(split)
    _check_rank(rank, size)
    parallel = cfg.pipeline == "new"
    examples = _encoded_examples(source, split, cfg, 0, 1, parallel=False, shuffle_files=False).shard(size, rank)
    images = _decoded(examples, source, cfg, parallel, deterministic=True)
    batches = images.map(_for_evaluation, num_parallel_calls=AUTOTUNE if parallel else None).batch(cfg.batch_size)
    return _finish(batches, cfg)


def decode_only_dataset(source: DataSource, split: str, cfg: PipelineConfig) -> tf.data.Dataset:
    """The machine's decode limit: one pass of read + decode + resize on all cores, batched, nothing else.

    Yields (images uint8 [B, S, S, 1], labels [B, 14]); the last batch may be short."""
    _check_split(split)
    examples = _encoded_examples(source, split, cfg, 0, 1, parallel=True, shuffle_files=False)
    decoded = _decoded(examples, source, cfg, parallel=True)
    return decoded.batch(cfg.batch_size, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)


def _finish(batches: tf.data.Dataset, cfg: PipelineConfig) -> tf.data.Dataset:
    options = tf.data.Options()
    if cfg.pipeline == "new":
        if cfg.threads is not None:
            options.threading.private_threadpool_size = cfg.threads
        return batches.prefetch(AUTOTUNE).with_options(options)
    # The old pipeline as first written: nothing in parallel, not even what tf.data would otherwise add by itself.
    options.autotune.enabled = False
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    return batches.with_options(options)


__all__ = [
    "AUTOTUNE", "DataError", "DataSource", "NUM_CLASSES", "PipelineConfig", "decode_only_dataset", "eval_dataset",
    "reset_skipped_count", "skipped_count", "source_of", "train_dataset",
]
