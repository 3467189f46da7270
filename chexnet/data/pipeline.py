"""tf.data input pipelines for CheXNet: the parallel "new" one that training uses and the sequential "old" one.

Either reads a TFRecord directory (`python -m chexnet.data.tfrecords`, found by its manifest.json) or a ChestX-ray14
layout directory of PNG files. In pipeline order:

    list files -> shard the files by rank -> interleave reads -> shuffle -> decode -> crop or resize -> flip
    -> batch -> normalise -> prefetch

What is decoded depends on how the images are stored:
- resized JPEG or raw records (the converter's default): CheXNet's preprocessing. Training takes a random
  `image_size` crop of the stored short-side image (for JPEG only the crop window is decoded,
  `tf.io.decode_and_crop_jpeg`) and flips it; evaluation takes the centre crop, or with `ten_crop` the four corner
  crops, the centre crop and their mirror images (the model's 10 predictions are then averaged, as in CheXNet).
- original PNGs (PNG records, or the image directory): the whole image is decoded and resized to `image_size`.

Bad data never stops a run by itself (`chexnet.data.integrity`). A damaged TFRecord shard is read up to the damage
and the records it lost are counted (the manifest says how many each shard holds); a record that does not parse or
whose image does not decode is left out and counted exactly, by file. Each pipeline has its own `SkipCounter`
(`skip_counters`), which training reads every epoch; `skipped_count()` is everything this process's pipelines
have dropped since they started (or since `reset_skipped_count()`), counted again in every pass that meets it.
An endless training stream that finds nothing readable in a whole pass over its files fails instead of looping.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import tensorflow as tf

from chexnet.data.chestxray14 import IMAGES_DIR, SPLITS, DataError, Index, labels_matrix, load_index
from chexnet.data.integrity import GUARDED_CHUNK, SkipCounter, guarded, guarded_chunks
from chexnet.data.tfrecords import JPEG, MANIFEST, PNG, RAW, Storage, parse_example, storage_of
from chexnet.labels import CLASSES, NUM_CLASSES

log = logging.getLogger(__name__)

AUTOTUNE = tf.data.AUTOTUNE
PIPELINES = ("new", "old")
TFRECORD, IMAGES = "tfrecord", "images"
LABEL_READ_BATCH = 8192  # labels read at once for the class weights: a few floats each
READ_CYCLE = 8  # shards read at once: enough to hide one file's latency, few enough to keep reads sequential
IMAGENET_MEAN = (0.485, 0.456, 0.406)  # DenseNet-121 conventions, applied to the grey image copied to 3 channels
IMAGENET_STD = (0.229, 0.224, 0.225)
TEN_CROPS = 10
ORIGINAL_PNG = Storage(PNG, None, None)
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
    ten_crop: bool = False  # evaluation: 10 crops per image, batches [B, 10, S, S, 3] (resized records only)

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
    storage: Storage = ORIGINAL_PNG  # how the images are stored (an image directory: original PNGs)

    @property
    def resized(self) -> bool:
        """Whether the images are stored resized (JPEG or raw), to be cropped, rather than as original PNGs."""
        return self.storage.encoding != PNG

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
    storage = storage_of(manifest, root)
    if manifest.get("classes") != list(CLASSES):
        raise DataError(f"{root / MANIFEST}: classes {manifest.get('classes')}; expected {', '.join(CLASSES)}")
    shards = {split: [(str(root / s["file"]), int(s["records"])) for s in manifest["shards"][split]]
              for split in SPLITS}
    missing = [path for split in SPLITS for path, _ in shards[split] if not Path(path).is_file()]
    if missing:
        raise DataError(f"{root}: {len(missing)} shards named in {MANIFEST} are missing, e.g. {missing[:5]}")
    return DataSource(kind=TFRECORD, root=root, shards=shards, storage=storage)


def _check_fits(source: DataSource, cfg: PipelineConfig, ten_crop: bool = False) -> None:
    """A crop cannot be larger than the stored image, and ten crops need a stored image to crop from."""
    if ten_crop and not source.resized:
        raise DataError(f"ten_crop needs resized records to crop from; {source.root} holds original PNGs: convert "
                        "them with python -m chexnet.data.tfrecords --encoding jpeg --short-side 256")
    if source.resized and source.storage.short_side < cfg.image_size:
        raise DataError(f"image_size {cfg.image_size} is larger than the short side {source.storage.short_side} of "
                        f"the {source.storage.encoding} records in {source.root}: lower the image size or convert "
                        f"again with --short-side {cfg.image_size} or more")


# --- counting what was skipped (chexnet.data.integrity) ------------------------------------------------------

_COUNTERS: list[SkipCounter] = []  # every counter of this process's pipelines, newest last


def skip_counters(*splits: str) -> list[SkipCounter]:
    """The newest counter of each split named (all counters when none is named), for per-epoch reports."""
    if not splits:
        return list(_COUNTERS)
    newest = {counter.split: counter for counter in _COUNTERS}
    return [newest[split] for split in splits if split in newest]


def skipped_count() -> int:
    """Examples dropped by this process's pipelines: undecodable or unreadable images plus records of damaged shards."""
    return sum(counter.snapshot().skipped for counter in _COUNTERS)


def reset_skipped_count() -> None:
    for counter in _COUNTERS:
        counter.reset()


def _new_counter(split: str, files: list[str], shared_reads: bool, limit: int | None,
                 register: bool = True) -> SkipCounter:
    counter = SkipCounter(split, files, shared_reads, limit)
    if register:
        _COUNTERS.append(counter)
    return counter


# --- reading --------------------------------------------------------------------------------------------------

def _read_shard(path: tf.Tensor, expected: tf.Tensor, file: tf.Tensor, counter: SkipCounter) -> tf.data.Dataset:
    """(record, file) of one shard; a damaged shard ends at the damage and the records it lost are counted."""
    records = tf.data.TFRecordDataset(path).ignore_errors()  # DataLossError ends this file, not the run
    end = tf.data.Dataset.from_tensors((tf.constant(b""), tf.constant(True)))
    marked = records.map(lambda record: (record, tf.constant(False))).concatenate(end)
    numbered = marked.scan(tf.constant(0, tf.int64), _number_records)
    counted = numbered.map(partial(_count_lost, expected=expected, file=file, counter=counter))
    return counted.filter(lambda _, is_end: not is_end).map(lambda record, _: (record, file))


def _number_records(read: tf.Tensor, element: tuple) -> tuple:
    record, is_end = element
    read = read + tf.cast(tf.logical_not(is_end), tf.int64)
    return read, (record, is_end, read)


def _count_lost(record: tf.Tensor, is_end: tf.Tensor, read: tf.Tensor, expected: tf.Tensor, file: tf.Tensor,
                counter: SkipCounter) -> tuple:
    # A record counts as read; the end marker counts what the file lost (`read`: how many records it yielded).
    counted = tf.cond(is_end, lambda: _after(counter.count_read(file, read, expected)),
                      lambda: _after(counter.count_record(file)))
    with tf.control_dependencies([counted]):
        return tf.identity(record), is_end


def _after(ops: list[tf.Operation]) -> tf.Tensor:
    with tf.control_dependencies(ops):
        return tf.constant(True)


def _count_listed(path: tf.Tensor, labels: tf.Tensor, file: tf.Tensor, counter: SkipCounter) -> tuple:
    """An image file of a layout directory, about to be read: counted as read (its decode counts the rest)."""
    with tf.control_dependencies(counter.count_record(file)):
        return tf.identity(path), labels, file


def _parse(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    example = parse_example(serialized)
    return example["image"], example["labels"]


def _parse_resized(serialized: tf.Tensor) -> tuple[tuple[tf.Tensor, tf.Tensor], tf.Tensor]:
    """-> ((stored bytes, int32 [height, width]), labels)."""
    example = parse_example(serialized)
    shape = tf.cast(tf.stack([example["height"], example["width"]]), tf.int32)
    return (example["image"], shape), example["labels"]


def _rank_files(source: DataSource, split: str, rank: int, size: int) -> tuple[list, list, list, bool]:
    """This rank's files, what to expect of each and their positions in the split; if there are fewer files than
    ranks, all files and element_sharding=True (each rank then keeps every size-th example, so reads are repeated)."""
    _check_rank(rank, size)
    if source.kind == TFRECORD:
        files = source.shards[split]
        paths, payload = [p for p, _ in files], [n for _, n in files]
    else:
        records = source.index.split(split)
        paths, payload = [str(r.path) for r in records], labels_matrix(records)
    positions = list(range(len(paths)))
    if len(paths) >= size:
        return paths[rank::size], payload[rank::size], positions[rank::size], False
    log.warning("%s: %d %s files for %d workers; sharding by element, every worker reads all files",
                split, len(paths), source.kind, size)
    return paths, payload, positions, True


def _check_rank(rank: int, size: int) -> None:
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank must be in [0, size) and size at least 1; got rank {rank}, size {size}")


def _examples(source: DataSource, split: str, cfg: PipelineConfig, rank: int, size: int, parallel: bool,
              shuffle_files: bool, stream: bool = False, shared_reads: bool = False,
              register: bool = True) -> tuple[tf.data.Dataset, SkipCounter]:
    """One pass over this rank's undecoded examples, each with its file's position in the split: (serialized
    record, file) from shards, or (PNG path, labels, file) from the layout; and the counter their decode must use.
    `stream`: an endless training stream, which fails after a whole pass of unreadable records instead of looping.
    `shared_reads`: the caller shards the elements, so every rank reads every file."""
    paths, payload, positions, element_sharding = _rank_files(source, split, rank, size)
    records = sum(payload) if source.kind == TFRECORD else len(paths)
    limit = max(1, records // size if element_sharding else records) if stream else None
    counter = _new_counter(split, source.files(split), element_sharding or shared_reads, limit, register)
    if source.kind == IMAGES:
        files = tf.data.Dataset.from_tensor_slices((paths, payload, tf.constant(positions, tf.int32)))
        if shuffle_files:  # file names and labels are tiny: shuffle all of them, not a buffer
            files = files.shuffle(len(paths), seed=cfg.seed, reshuffle_each_iteration=True)
        files = files.map(partial(_count_listed, counter=counter))
        return (files.shard(size, rank) if element_sharding else files), counter
    files = tf.data.Dataset.from_tensor_slices((paths, tf.constant(payload, tf.int64),
                                                tf.constant(positions, tf.int32)))
    if shuffle_files:  # the same seed on every rank, so element sharding below still splits one common order
        files = files.shuffle(len(paths), seed=cfg.seed, reshuffle_each_iteration=True)
    read = partial(_read_shard, counter=counter)
    if parallel:
        # Element sharding needs the same order on every rank: then the interleave must be deterministic.
        examples = files.interleave(read, cycle_length=min(READ_CYCLE, len(paths)), num_parallel_calls=AUTOTUNE,
                                    deterministic=element_sharding)
    else:
        examples = files.flat_map(read)
    return (examples.shard(size, rank) if element_sharding else examples), counter


def _example_decoder(source: DataSource, decode_image: Callable[..., tf.Tensor]) -> Callable[..., tuple]:
    """`decode_image(encoded)` (original PNGs) or `decode_image(stored, shape)` (resized records) -> a decoder of
    whole examples to (image, labels): a serialized record, parsed first, or a layout's (path, labels)."""
    if source.kind == IMAGES:
        return lambda path, labels: (decode_image(tf.io.read_file(path)), labels)

    def decode(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        if source.resized:
            (stored, shape), labels = _parse_resized(serialized)
            return decode_image(stored, shape), labels
        encoded, labels = _parse(serialized)
        return decode_image(encoded), labels

    return decode


def train_labels(source: DataSource) -> np.ndarray:
    """The training split's labels, for the loss weights: from the index, or parsed from the shards (no image is
    decoded, so this takes seconds). Records that do not parse, or a damaged shard's lost ones, are left out."""
    if source.index is not None:
        return labels_matrix(source.index.train)
    examples, counter = _examples(source, "train", PipelineConfig(), 0, 1, parallel=True, shuffle_files=False,
                                  register=False)
    labels = _decoded(examples, counter, lambda serialized: parse_example(serialized)["labels"], parallel=True)
    found = np.concatenate([batch.numpy() for batch in labels.batch(LABEL_READ_BATCH)] or
                           [np.zeros((0, NUM_CLASSES), np.float32)])
    counts = counter.snapshot()
    if counts.skipped and not len(found):
        raise DataError(f"{source.root}: no readable training record: {counts.describe()}; check the named files or "
                        "convert the data again (python -m chexnet.data.tfrecords)")
    if counts.skipped:
        log.warning("class weights from the readable records only: %s", counts.describe())
    return found


# --- decoding (the decoder) and preparing for the model (the parser) --------------------------------------------

def decode_resize(encoded: tf.Tensor, size: int) -> tf.Tensor:
    """PNG bytes -> uint8 [size, size, 1]; uint8 so that a cache holds 4x more images than float32 would."""
    image = tf.io.decode_png(encoded, channels=1)  # RGBA or 16-bit files in the real set become 8-bit grey too
    image = tf.image.resize(image, [size, size], method="bilinear")
    return tf.ensure_shape(tf.saturate_cast(tf.round(image), tf.uint8), [size, size, 1])


def random_window(shape: tf.Tensor, size: int) -> tf.Tensor:
    """[top, left, size, size] of a random size x size window inside an image of int32 `shape` [height, width]."""
    top = tf.random.uniform([], 0, shape[0] - size + 1, dtype=tf.int32)
    left = tf.random.uniform([], 0, shape[1] - size + 1, dtype=tf.int32)
    return tf.stack([top, left, size, size])


def centre_window(shape: tf.Tensor, size: int) -> tf.Tensor:
    """[top, left, size, size] of the centred size x size window."""
    return tf.stack([(shape[0] - size) // 2, (shape[1] - size) // 2, size, size])


def decode_stored(stored: tf.Tensor, shape: tf.Tensor, encoding: str) -> tf.Tensor:
    """A resized record's whole image: uint8 [height, width, 1]."""
    if encoding == JPEG:
        return tf.io.decode_jpeg(stored, channels=1)
    return tf.reshape(tf.io.decode_raw(stored, tf.uint8), [shape[0], shape[1], 1])


def decode_window(stored: tf.Tensor, shape: tf.Tensor, window: tf.Tensor, encoding: str) -> tf.Tensor:
    """Only the pixels of `window` ([top, left, height, width]) of a resized record: uint8 [height, width, 1].
    A JPEG decodes just the blocks the window touches, which is most of the speed of resized records."""
    if encoding == JPEG:
        return tf.io.decode_and_crop_jpeg(stored, window, channels=1)
    return crop(decode_stored(stored, shape, RAW), window)


def crop(image: tf.Tensor, window: tf.Tensor) -> tf.Tensor:
    return tf.slice(image, tf.stack([window[0], window[1], 0]), tf.stack([window[2], window[3], -1]))


def ten_crop(image: tf.Tensor, size: int) -> tf.Tensor:
    """[H, W, C] -> [10, size, size, C]: the four corner crops and the centre crop (torchvision's TenCrop order),
    then the same five of the mirrored image."""
    shape = tf.shape(image)[:2]
    bottom, right = shape[0] - size, shape[1] - size
    corners = [(0, 0), (0, right), (bottom, 0), (bottom, right), (bottom // 2, right // 2)]
    crops = tf.stack([image[top:top + size, left:left + size] for top, left in corners])
    return tf.concat([crops, tf.reverse(crops, axis=[2])], axis=0)


def _resized_decoder(source: DataSource, size: int, how: str) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """how: "random" (training) or "centre" crop, or "ten" crops [10, size, size, 1], or "whole" (to cache)."""
    encoding = source.storage.encoding

    def decode(stored: tf.Tensor, shape: tf.Tensor) -> tf.Tensor:
        if how == "whole":
            return decode_stored(stored, shape, encoding)
        if how == "ten":
            return tf.ensure_shape(ten_crop(decode_stored(stored, shape, encoding), size), [TEN_CROPS, size, size, 1])
        window = random_window(shape, size) if how == "random" else centre_window(shape, size)
        return tf.ensure_shape(decode_window(stored, shape, window, encoding), [size, size, 1])

    return decode


def augment(image: tf.Tensor) -> tf.Tensor:
    return tf.image.random_flip_left_right(image)


def _random_crop_flip(image: tf.Tensor, labels: tf.Tensor, size: int) -> tuple:
    """A cached whole image -> a random size x size crop, flipped half the time."""
    window = random_window(tf.shape(image)[:2], size)
    return augment(tf.ensure_shape(crop(image, window), [size, size, 1])), labels


def normalise(image: tf.Tensor) -> tf.Tensor:
    """uint8 grey [..., S, S, 1] -> float32 [..., S, S, 3] with ImageNet mean and std (one image or a batch).

    A uint8 has 256 values: (x / 255 - mean) / std is looked up in a 256 x 3 table, one gather that writes each
    output value once. Arithmetic on the pixels took twice as long, as much CPU as decoding a JPEG crop does."""
    levels = tf.range(256, dtype=tf.float32)[:, None] / 255.0
    table = (levels - IMAGENET_MEAN) / IMAGENET_STD
    return tf.gather(table, tf.cast(tf.squeeze(image, axis=-1), tf.int32))


def _for_training(image: tf.Tensor, labels: tf.Tensor) -> tuple:
    return normalise(augment(image)), labels


def _for_evaluation(image: tf.Tensor, labels: tf.Tensor) -> tuple:
    return normalise(image), labels


def _normalised_batch(images: tf.Tensor, labels: tf.Tensor) -> tuple:
    return normalise(images), labels


def _decoded(examples: tf.data.Dataset, counter: SkipCounter, decode: Callable[..., tuple], parallel: bool,
             deterministic: bool = False) -> tf.data.Dataset:
    """Decoded examples; what does not parse or decode is left out and counted in `counter` (exactly, by file)."""
    one = guarded(decode)
    fixed = all(spec.shape.is_fully_defined() for spec in tf.nest.flatten(examples.take(0).flat_map(one).element_spec))
    if fixed:  # guard chunks, not single records: the guard's own datasets cost as much as a decode
        one, examples = guarded_chunks(decode, one, GUARDED_CHUNK), examples.batch(GUARDED_CHUNK)
    if parallel:
        decoded = examples.interleave(one, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    else:
        decoded = examples.flat_map(one)
    return decoded.map(counter.count_outcome).filter(_is_valid).map(_example_only)


def _is_valid(example: tuple, valid: tf.Tensor) -> tf.Tensor:
    return valid


def _example_only(example: tuple, valid: tf.Tensor) -> tuple:
    return example


# --- the datasets --------------------------------------------------------------------------------------------------

def train_dataset(source: DataSource, cfg: PipelineConfig, rank: int = 0, size: int = 1) -> tf.data.Dataset:
    """Endless batches (images float32 [B, S, S, 3], labels float32 [B, 14]) of this rank's part of train."""
    _check_fits(source, cfg)
    parallel = cfg.pipeline == "new"
    calls = AUTOTUNE if parallel else None
    examples, counter = _examples(source, "train", cfg, rank, size, parallel, shuffle_files=True, stream=True)
    if not source.resized:
        decode = _example_decoder(source, partial(decode_resize, size=cfg.image_size))
        if cfg.cache:  # decode once, then shuffle the decoded images every epoch
            images = _decoded(examples, counter, decode, parallel).cache().repeat()
            images = images.shuffle(cfg.shuffle_buffer, seed=cfg.seed)
        else:  # shuffle the small encoded images, decode after
            encoded = examples.repeat().shuffle(cfg.shuffle_buffer, seed=cfg.seed)
            images = _decoded(encoded, counter, decode, parallel)
        if not parallel:  # the old pipeline as first written: flip and normalise image by image
            batches = images.map(_for_training).batch(cfg.batch_size, drop_remainder=True)
            return _finish(batches, cfg)
        images = images.map(lambda image, labels: (augment(image), labels), num_parallel_calls=calls)
    elif cfg.cache:  # cache the whole stored images, crop afresh every epoch
        decode = _example_decoder(source, _resized_decoder(source, cfg.image_size, "whole"))
        whole = _decoded(examples, counter, decode, parallel).cache().repeat()
        images = whole.shuffle(cfg.shuffle_buffer, seed=cfg.seed).map(
            partial(_random_crop_flip, size=cfg.image_size), num_parallel_calls=calls)
    else:
        encoded = examples.repeat().shuffle(cfg.shuffle_buffer, seed=cfg.seed)
        decode = _resized_decoder(source, cfg.image_size, "random")
        flipped = _example_decoder(source, lambda stored, shape: augment(decode(stored, shape)))
        images = _decoded(encoded, counter, flipped, parallel)
    # uint8 batches are 4x smaller to copy; normalising a whole batch is one vectorised op instead of B small ones.
    batches = images.batch(cfg.batch_size, drop_remainder=True, num_parallel_calls=calls)
    return _finish(batches.map(_normalised_batch, num_parallel_calls=calls), cfg)


def eval_dataset(source: DataSource, split: str, cfg: PipelineConfig, rank: int = 0,
                 size: int = 1) -> tf.data.Dataset:
    """One pass over rank's share of `split` (every size-th example), in order, no augmentation, last batch short.

    Images float32 [B, S, S, 3]; with `cfg.ten_crop`, [B, 10, S, S, 3] (see `ten_crop`)."""
    _check_split(split)
    _check_rank(rank, size)
    _check_fits(source, cfg, ten_crop=cfg.ten_crop)
    parallel = cfg.pipeline == "new"
    calls = AUTOTUNE if parallel else None
    examples, counter = _examples(source, split, cfg, 0, 1, parallel=False, shuffle_files=False,
                                  shared_reads=size > 1)
    examples = examples.shard(size, rank)
    if not source.resized:
        decode = _example_decoder(source, partial(decode_resize, size=cfg.image_size))
        images = _decoded(examples, counter, decode, parallel, deterministic=True)
        batches = images.map(_for_evaluation, num_parallel_calls=calls).batch(cfg.batch_size)
        return _finish(batches, cfg)
    decode = _example_decoder(source, _resized_decoder(source, cfg.image_size, "ten" if cfg.ten_crop else "centre"))
    images = _decoded(examples, counter, decode, parallel, deterministic=True)
    batches = images.batch(cfg.batch_size, num_parallel_calls=calls, deterministic=True if parallel else None)
    return _finish(batches.map(_normalised_batch, num_parallel_calls=calls), cfg)


def decode_only_dataset(source: DataSource, split: str, cfg: PipelineConfig) -> tf.data.Dataset:
    """The machine's decode limit: one pass of read + the decode that training does (decode + resize for original
    PNGs, decode of the crop window for resized records) on all cores, batched, nothing else.

    Yields (images uint8 [B, S, S, 1], labels [B, 14]); the last batch may be short."""
    _check_split(split)
    _check_fits(source, cfg)
    examples, counter = _examples(source, split, cfg, 0, 1, parallel=True, shuffle_files=False)
    decode = _resized_decoder(source, cfg.image_size, "centre") if source.resized else \
        partial(decode_resize, size=cfg.image_size)
    decoded = _decoded(examples, counter, _example_decoder(source, decode), parallel=True)
    return _finish(decoded.batch(cfg.batch_size, num_parallel_calls=AUTOTUNE), PipelineConfig(threads=cfg.threads))


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
    "AUTOTUNE", "DataError", "DataSource", "NUM_CLASSES", "PipelineConfig", "TEN_CROPS", "decode_only_dataset",
    "eval_dataset", "reset_skipped_count", "skip_counters", "skipped_count", "source_of", "ten_crop", "train_dataset",
    "train_labels",
]
