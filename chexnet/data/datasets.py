"""tf.data input pipelines for CheXNet: the "parallel" one that training uses and the "sequential" one it replaced.

In pipeline order (`programkit.data.sources` finds and shares out the files, `chexnet.data.decoding` decodes):

    list files -> shard the files by rank -> interleave reads -> shuffle -> decode -> crop or resize -> flip
    -> batch -> prefetch

Batches are uint8 grey, one channel ([B, S, S, 1]): the model normalises them in its first layer
(`chexnet.model.ImageNetNormalisation`), on the accelerator when there is one, so the host neither spends CPU on
float32 pixels nor ships 12x more bytes than the crop holds.

Bad data never stops a run by itself (`chexnet.data.integrity`). A damaged TFRecord shard is read up to the damage
and the records it lost are counted (the manifest says how many each shard holds); a record that does not parse or
whose image does not decode is left out and counted exactly, by file. Each pipeline has its own `SkipCounter`
(`skip_counters`), which training reads every epoch; `skipped_count()` is everything this process's pipelines
have dropped since they started (or since `reset_skipped_count()`), counted again in every pass that meets it.
An endless training stream that finds nothing readable in a whole pass over its files fails instead of looping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import tensorflow as tf

from chexnet.data import decoding
from chexnet.data.integrity import GUARDED_CHUNK, SkipCounter, guarded, guarded_chunks
from chexnet.data.tfrecords import parse_example
from programkit.data.chestxray14 import DataError, labels_matrix
from programkit.data.sources import TFRECORD, DataSource, check_fits, check_rank, check_split, rank_files
from programkit.labels import NUM_CLASSES
from programkit.reference import PIPELINES

log = logging.getLogger(__name__)

AUTOTUNE = tf.data.AUTOTUNE
LABEL_READ_BATCH = 8192  # labels read at once for the class weights: a few floats each
READ_CYCLE = 8  # shards read at once: enough to hide one file's latency, few enough to keep reads sequential


@dataclass(frozen=True)
class PipelineConfig:
    """How to feed the model; the defaults are the training defaults."""

    pipeline: str = "parallel"  # parallel reads, decode and prefetch; "sequential": one at a time, for the benchmark
    batch_size: int = 32  # per worker
    image_size: int = 224
    cache: bool = False  # keep decoded, resized images in memory after the first epoch (small sets only)
    threads: int | None = None  # a private thread pool of this size for the parallel pipeline; None: TF's shared
    shuffle_buffer: int = 1024
    seed: int = 0
    ten_crop: bool = False  # evaluation: 10 crops per image, batches [B, 10, S, S, 1] (resized records only)

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

    @property
    def parallel(self) -> bool:
        return self.pipeline == "parallel"

    @property
    def calls(self) -> int | None:
        """num_parallel_calls: tf.data's choice for the parallel pipeline, one at a time for the sequential one."""
        return AUTOTUNE if self.parallel else None


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


# --- reading, with every record counted -----------------------------------------------------------------------

def examples_of(source: DataSource, split: str, rank: int, size: int, parallel: bool, *,
                shuffle_seed: int | None = None, stream: bool = False, shared_reads: bool = False,
                register: bool = True) -> tuple[tf.data.Dataset, SkipCounter]:
    """One pass over this rank's undecoded examples, each with its file's position in the split: (serialized
    record, file) from shards, or (PNG path, labels, file) from the layout; and the counter their decode must use.
    `shuffle_seed`: shuffle the files, the same way on every rank (so element sharding still splits one order).
    `stream`: an endless training stream, which fails after a whole pass of unreadable records instead of looping.
    `shared_reads`: the caller shards the elements, so every rank reads every file."""
    mine = rank_files(source, split, rank, size)
    records = sum(mine.payload) if source.kind == TFRECORD else len(mine.paths)
    limit = max(1, records // size if mine.element_sharding else records) if stream else None
    counter = SkipCounter(split, source.files(split), mine.element_sharding or shared_reads, limit)
    if register:
        _COUNTERS.append(counter)
    payload = mine.payload if source.kind != TFRECORD else tf.constant(mine.payload, tf.int64)
    files = tf.data.Dataset.from_tensor_slices((mine.paths, payload, tf.constant(mine.positions, tf.int32)))
    if shuffle_seed is not None:  # file names, labels and counts are tiny: shuffle all of them, not a buffer
        files = files.shuffle(len(mine.paths), seed=shuffle_seed, reshuffle_each_iteration=True)
    if source.kind != TFRECORD:
        examples = files.map(partial(_count_listed, counter=counter))
    elif parallel:
        # Element sharding needs the same order on every rank: then the interleave must be deterministic.
        examples = files.interleave(partial(_read_shard, counter=counter), num_parallel_calls=AUTOTUNE,
                                    cycle_length=min(READ_CYCLE, len(mine.paths)),
                                    deterministic=mine.element_sharding)
    else:
        examples = files.flat_map(partial(_read_shard, counter=counter))
    return (examples.shard(size, rank) if mine.element_sharding else examples), counter


def _count_listed(path: tf.Tensor, labels: tf.Tensor, file: tf.Tensor, counter: SkipCounter) -> tuple:
    """An image file of a layout directory, about to be read: counted as read (its decode counts the rest)."""
    with tf.control_dependencies(counter.count_record(file)):
        return tf.identity(path), labels, file


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


def decoded(examples: tf.data.Dataset, counter: SkipCounter, decode: Callable[..., tuple], parallel: bool,
            deterministic: bool = False) -> tf.data.Dataset:
    """Decoded examples; what does not parse or decode is left out and counted in `counter` (exactly, by file)."""
    one = guarded(decode)
    fixed = all(spec.shape.is_fully_defined() for spec in tf.nest.flatten(examples.take(0).flat_map(one).element_spec))
    if fixed:  # guard chunks, not single records: the guard's own datasets cost as much as a decode
        one, examples = guarded_chunks(decode, one, GUARDED_CHUNK), examples.batch(GUARDED_CHUNK)
    if parallel:
        images = examples.interleave(one, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    else:
        images = examples.flat_map(one)
    return images.map(counter.count_outcome).filter(_is_valid).map(_example_only)


def _is_valid(example: tuple, valid: tf.Tensor) -> tf.Tensor:
    return valid


def _example_only(example: tuple, valid: tf.Tensor) -> tuple:
    return example


# --- the datasets ----------------------------------------------------------------------------------------------------


def train_labels(source: DataSource) -> np.ndarray:
    """The training split's labels, for the loss weights: from the index, or parsed from the shards (no image is
    decoded, so this takes seconds). Records that do not parse, or a damaged shard's lost ones, are left out."""
    if source.index is not None:
        return labels_matrix(source.index.train)
    examples, counter = examples_of(source, "train", 0, 1, parallel=True, register=False)
    labels = decoded(examples, counter, lambda serialized: parse_example(serialized)["labels"], parallel=True)
    found = np.concatenate([batch.numpy() for batch in labels.batch(LABEL_READ_BATCH)] or
                           [np.zeros((0, NUM_CLASSES), np.float32)])
    counts = counter.snapshot()
    if counts.skipped and not len(found):
        raise DataError(f"{source.root}: no readable training record: {counts.describe()}; check the named files or "
                        "convert the data again (python -m chexnet.data.tfrecords)")
    if counts.skipped:
        log.warning("class weights from the readable records only: %s", counts.describe())
    return found


def train_dataset(source: DataSource, cfg: PipelineConfig, rank: int = 0, size: int = 1) -> tf.data.Dataset:
    """Endless batches (images uint8 [B, S, S, 1], labels float32 [B, 14]) of this rank's part of train."""
    check_fits(source, cfg.image_size)
    examples, counter = examples_of(source, "train", rank, size, cfg.parallel, shuffle_seed=cfg.seed, stream=True)
    decode = partial(decoded, counter=counter, parallel=cfg.parallel)
    if not source.resized:
        decoder = decoding.example_decoder(source, partial(decoding.decode_resize, size=cfg.image_size))
        if cfg.cache:  # decode once, then shuffle the decoded images every epoch
            images = decode(examples, decode=decoder).cache().repeat().shuffle(cfg.shuffle_buffer, seed=cfg.seed)
        else:  # shuffle the small encoded images, decode after
            images = decode(examples.repeat().shuffle(cfg.shuffle_buffer, seed=cfg.seed), decode=decoder)
        if not cfg.parallel:  # the sequential pipeline as first written: flip image by image
            return _finish(images.map(decoding.augmented).batch(cfg.batch_size, drop_remainder=True), cfg)
        images = images.map(decoding.augmented, num_parallel_calls=cfg.calls)
    elif cfg.cache:  # cache the whole stored images, crop afresh every epoch
        whole = decoding.example_decoder(source, decoding.resized_decoder(source, cfg.image_size, "whole"))
        images = decode(examples, decode=whole).cache().repeat().shuffle(cfg.shuffle_buffer, seed=cfg.seed).map(
            partial(decoding.random_crop_flip, size=cfg.image_size), num_parallel_calls=cfg.calls)
    else:
        crop = decoding.resized_decoder(source, cfg.image_size, "random")
        flipped = decoding.example_decoder(source, lambda stored, shape: decoding.augment(crop(stored, shape)))
        images = decode(examples.repeat().shuffle(cfg.shuffle_buffer, seed=cfg.seed), decode=flipped)
    return _finish(images.batch(cfg.batch_size, drop_remainder=True, num_parallel_calls=cfg.calls), cfg)


def eval_dataset(source: DataSource, split: str, cfg: PipelineConfig, rank: int = 0,
                 size: int = 1) -> tf.data.Dataset:
    """One pass over rank's share of `split` (every size-th example), in order, no augmentation, last batch short.

    Images uint8 [B, S, S, 1]; with `cfg.ten_crop`, [B, 10, S, S, 1] (see `decoding.ten_crop`)."""
    check_split(split)
    check_rank(rank, size)
    check_fits(source, cfg.image_size, ten_crop=cfg.ten_crop)
    examples, counter = examples_of(source, split, 0, 1, parallel=False, shared_reads=size > 1)
    examples = examples.shard(size, rank)
    if not source.resized:
        decoder = decoding.example_decoder(source, partial(decoding.decode_resize, size=cfg.image_size))
        images = decoded(examples, counter, decoder, cfg.parallel, deterministic=True)
        return _finish(images.batch(cfg.batch_size), cfg)
    crops = decoding.resized_decoder(source, cfg.image_size, "ten" if cfg.ten_crop else "centre")
    images = decoded(examples, counter, decoding.example_decoder(source, crops), cfg.parallel, deterministic=True)
    return _finish(images.batch(cfg.batch_size, num_parallel_calls=cfg.calls,
                                deterministic=True if cfg.parallel else None), cfg)


def decode_only_dataset(source: DataSource, split: str, cfg: PipelineConfig) -> tf.data.Dataset:
    """The machine's decode limit: one pass of read + the decode that training does (decode + resize for original
    PNGs, decode of the crop window for resized records) on all cores, batched, nothing else (training adds the
    shuffle and the flip).

    Yields (images uint8 [B, S, S, 1], labels [B, 14]); the last batch may be short."""
    check_split(split)
    check_fits(source, cfg.image_size)
    examples, counter = examples_of(source, split, 0, 1, parallel=True)
    decode = decoding.resized_decoder(source, cfg.image_size, "centre") if source.resized else \
        partial(decoding.decode_resize, size=cfg.image_size)
    images = decoded(examples, counter, decoding.example_decoder(source, decode), parallel=True)
    return _finish(images.batch(cfg.batch_size, num_parallel_calls=AUTOTUNE), PipelineConfig(threads=cfg.threads))


def _finish(batches: tf.data.Dataset, cfg: PipelineConfig) -> tf.data.Dataset:
    options = tf.data.Options()
    if cfg.parallel:
        if cfg.threads is not None:
            options.threading.private_threadpool_size = cfg.threads
        return batches.prefetch(AUTOTUNE).with_options(options)
    # The sequential pipeline as first written: nothing in parallel, not even what tf.data would otherwise add itself.
    options.autotune.enabled = False
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    return batches.with_options(options)
