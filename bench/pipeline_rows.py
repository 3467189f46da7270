"""The datasets that bench.pipeline times, built from chexnet.data's public functions (nothing here is a knob in the
product), and the timing of one run. Imported only inside a measuring process (bench.pipeline_worker): it imports
TensorFlow.

The rows and their groups are named in bench.pipeline_names.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

import tensorflow as tf

from bench import pipeline_names as row
from chexnet.data import decoding
from chexnet.data.datasets import AUTOTUNE, PipelineConfig, decode_only_dataset, decoded, examples_of, train_dataset
from chexnet.data.tfrecords import parse_example
from programkit.data.sources import DataSource, source_of

WARMUP_BATCHES = 2
WARMUP_SECONDS = 1.0  # lets tf.data's autotuner reach its parallelism before the clock starts
READ_CYCLE = 8  # shards read at once by the uncounted reader, as chexnet.data.datasets reads them

Builders = dict[str, Callable[[], tf.data.Dataset]]


def images_per_sec(dataset: tf.data.Dataset, seconds: float, batch_size: int) -> tuple[float, float]:
    """Pull batches through the pipeline for `seconds` (after a warm-up): (images/s, CPU microseconds per image
    that this process used meanwhile, all its threads, the consumer's included)."""
    iterator = iter(dataset)
    started = time.perf_counter()
    warmed = 0
    while warmed < WARMUP_BATCHES or time.perf_counter() - started < WARMUP_SECONDS:
        next(iterator)
        warmed += 1
    cpu, started, batches = _cpu_seconds(), time.perf_counter(), 0
    while batches == 0 or time.perf_counter() - started < seconds:
        next(iterator)
        batches += 1
    elapsed, images = time.perf_counter() - started, batches * batch_size
    return images / elapsed, (_cpu_seconds() - cpu) * 1e6 / images


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def delivered_dtype(dataset: tf.data.Dataset) -> str:
    """What a pipeline hands the model: 'uint8 [32, 224, 224, 1]' (the images of its first component)."""
    images = tf.nest.flatten(dataset.element_spec)[0]
    return f"{images.dtype.name} {images.shape.as_list()}"


def builders(png_dir: Path, jpeg_dir: Path, cfg: PipelineConfig) -> Builders:
    """Every row by name: a function that builds a fresh dataset (a fresh iterator each run, as training has)."""
    png, jpeg = source_of(png_dir), source_of(jpeg_dir)
    sequential = replace(cfg, pipeline="sequential", threads=None)
    rows: Builders = {
        row.SEQUENTIAL_PNG: lambda: train_dataset(png, sequential),
        row.PARALLEL_PNG: lambda: train_dataset(png, cfg),
        row.PNG_LIMIT: lambda: decode_only_dataset(png, "train", cfg).repeat(),
        row.PARALLEL_JPEG: lambda: train_dataset(jpeg, cfg),
        row.JPEG_LIMIT: lambda: decode_only_dataset(jpeg, "train", cfg).repeat(),
    }
    rows |= stage_builders(jpeg, cfg)
    batched = partial(_batched, cfg=cfg)
    rows |= {
        row.NO_SHUFFLE: lambda: batched(_images(jpeg, cfg, _flipped(jpeg, cfg), shuffle=False)),
        row.NO_COUNTERS: lambda: batched(_uncounted(jpeg, cfg)),
        row.NO_AUGMENT: lambda: batched(_images(jpeg, cfg, _window(jpeg, cfg, "centre"))),
    }
    shared = replace(cfg, threads=None)  # TF's shared pool, whatever --threads says
    rows |= {
        row.SHARED_POOL: lambda: train_dataset(jpeg, shared),
        row.PRIVATE_2: lambda: train_dataset(jpeg, replace(shared, threads=2)),
        row.PRIVATE_4: lambda: train_dataset(jpeg, replace(shared, threads=4)),
        row.INTRA_1: lambda: _one_thread_per_op(train_dataset(jpeg, shared)),
    }
    return rows


def stage_builders(jpeg: DataSource, cfg: PipelineConfig) -> Builders:
    """The training pipeline on JPEG records, one stage more in each. Before `batch` the images are not batched:
    each is counted as one number (one of its values, so that no step that made it can be optimised away), batched
    cheaply, so that pulling a batch costs the same Python overhead in every stage."""
    batched = partial(_batched, cfg=cfg)
    return {
        row.READ: lambda: _counted(_images(jpeg, cfg, _parsed), cfg),
        row.DECODE: lambda: _counted(_images(jpeg, cfg, _whole_then_window(jpeg, cfg)), cfg),
        row.CROP: lambda: _counted(_images(jpeg, cfg, _window(jpeg, cfg, "random")), cfg),
        row.FLIP: lambda: _counted(_images(jpeg, cfg, _flipped(jpeg, cfg)), cfg),
        row.BATCH: lambda: batched(_images(jpeg, cfg, _flipped(jpeg, cfg))),
        row.NORMALISE: lambda: batched(_images(jpeg, cfg, _flipped(jpeg, cfg)), normalise=True),
    }


# --- decoders of one serialized record (what `decoded` guards and counts) ----------------------------------------

def _parsed(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    example = parse_example(serialized)
    return example["image"], example["labels"]


def _window(source: DataSource, cfg: PipelineConfig, how: str) -> Callable[..., tuple]:
    return decoding.example_decoder(source, decoding.resized_decoder(source, cfg.image_size, how))


def _whole_then_window(source: DataSource, cfg: PipelineConfig) -> Callable[..., tuple]:
    """Decode the whole stored image, then cut the random window from it in memory: the same pixels as
    `decode_and_crop_jpeg`, so that the next stage shows what decoding only the window saves."""
    size, encoding = cfg.image_size, source.storage.encoding

    def whole_then_window(stored: tf.Tensor, shape: tf.Tensor) -> tf.Tensor:
        whole = decoding.decode_stored(stored, shape, encoding)
        return tf.ensure_shape(decoding.crop(whole, decoding.random_window(shape, size)), [size, size, 1])

    return decoding.example_decoder(source, whole_then_window)


def _flipped(source: DataSource, cfg: PipelineConfig) -> Callable[..., tuple]:
    """What training decodes: a random window, flipped half the time."""
    window = decoding.resized_decoder(source, cfg.image_size, "random")
    return decoding.example_decoder(source, lambda stored, shape: decoding.augment(window(stored, shape)))


# --- pipelines --------------------------------------------------------------------------------------------------

def _images(source: DataSource, cfg: PipelineConfig, decode: Callable[..., tuple],
            shuffle: bool = True) -> tf.data.Dataset:
    """Counted reads, (shuffle,) guarded and counted decode: the training pipeline up to its batch."""
    examples, counter = examples_of(source, "train", 0, 1, parallel=True, shuffle_seed=cfg.seed, stream=True)
    examples = examples.repeat()
    if shuffle:
        examples = examples.shuffle(cfg.shuffle_buffer, seed=cfg.seed)
    return decoded(examples, counter, decode, parallel=True)


def _uncounted(source: DataSource, cfg: PipelineConfig) -> tf.data.Dataset:
    """The training pipeline's reads and decode without chexnet.data.integrity: plain reads, no guard, no counts."""
    files = tf.data.Dataset.from_tensor_slices(source.files("train")).shuffle(64, seed=cfg.seed).repeat()
    records = files.interleave(tf.data.TFRecordDataset, cycle_length=READ_CYCLE, num_parallel_calls=AUTOTUNE,
                               deterministic=False)
    shuffled = records.shuffle(cfg.shuffle_buffer, seed=cfg.seed)
    return shuffled.map(_flipped(source, cfg), num_parallel_calls=AUTOTUNE, deterministic=False)


def _one_value(image: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """One number that depends on the element's data (a length for bytes, the first pixel for an image)."""
    if image.dtype == tf.string:
        return tf.strings.length(image)
    return tf.cast(tf.reshape(image, [-1])[0], tf.int32)


def _counted(images: tf.data.Dataset, cfg: PipelineConfig) -> tf.data.Dataset:
    return _finish(images.map(_one_value).batch(cfg.batch_size, drop_remainder=True), cfg)


def _batched(images: tf.data.Dataset, cfg: PipelineConfig, normalise: bool = False) -> tf.data.Dataset:
    batches = images.batch(cfg.batch_size, drop_remainder=True, num_parallel_calls=AUTOTUNE)
    return _finish(batches.map(decoding.normalised, num_parallel_calls=AUTOTUNE) if normalise else batches, cfg)


def _finish(batches: tf.data.Dataset, cfg: PipelineConfig) -> tf.data.Dataset:
    """prefetch, and the private pool if one was asked for: as chexnet.data.datasets ends the parallel pipeline."""
    options = tf.data.Options()
    if cfg.threads is not None:
        options.threading.private_threadpool_size = cfg.threads
    return batches.prefetch(AUTOTUNE).with_options(options)


def _one_thread_per_op(dataset: tf.data.Dataset) -> tf.data.Dataset:
    options = tf.data.Options()
    options.threading.max_intra_op_parallelism = 1
    return dataset.with_options(options)
