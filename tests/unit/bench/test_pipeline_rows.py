"""Every row bench.pipeline times builds and delivers batches from a tiny record set, and a measuring process is
pinned to the cores it was given (a real process, TensorFlow included, with a tiny data set)."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf  # noqa: E402  (the train extra: missing, this fails, never skips)

from bench.pipeline_names import NORMALISE, READ, STAGES  # noqa: E402
from bench.pipeline_rows import builders, delivered_dtype, images_per_sec  # noqa: E402
from bench.pipeline_worker import Plan, Worker  # noqa: E402
from chexnet.data.datasets import PipelineConfig  # noqa: E402
from chexnet.data.tfrecords import JPEG, PNG, Storage, convert  # noqa: E402
from programkit.data.synthetic import write_synthetic  # noqa: E402

BATCH, SIZE = 4, 32
SMALL = PipelineConfig(batch_size=BATCH, image_size=SIZE, shuffle_buffer=8)  # a full buffer is quick to fill
UNBATCHED = set(STAGES[:STAGES.index(NORMALISE) - 1])  # read .. flip: one number per image, batched cheaply


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> tuple:
    root = tmp_path_factory.mktemp("bench-pipeline")
    layout = write_synthetic(root / "layout", 16, 64, seed=1, workers=1)
    png, jpeg = root / "png", root / "jpeg"
    convert(layout, png, shards=2, storage=Storage.of(PNG), workers=1)
    convert(layout, jpeg, shards=2, storage=Storage.of(JPEG, 40, 90), workers=1)
    return png, jpeg


def test_every_row_delivers_batches_of_what_it_says(records):
    rows = builders(*records, SMALL)
    for name, build in rows.items():
        images = tf.nest.flatten(next(iter(build())))[0]
        if name in UNBATCHED:
            assert images.shape == [BATCH] and images.dtype == tf.int32, name
        elif name == NORMALISE:
            assert images.shape == [BATCH, SIZE, SIZE, 3] and images.dtype == tf.float32, name
        else:  # a training pipeline or a decode limit: uint8 grey, as the model takes it
            assert images.shape == [BATCH, SIZE, SIZE, 1] and images.dtype == tf.uint8, name
    assert delivered_dtype(rows[READ]()) == f"int32 [{BATCH}]"


def test_a_timed_run_gives_a_rate_and_the_cpu_it_used(records):
    rate, cpu_us = images_per_sec(builders(*records, SMALL)[READ](),
                                  0.1, BATCH)
    assert rate > 0 and cpu_us > 0


def test_a_measuring_process_runs_pinned_to_its_cores(records):
    worker = Worker(1, Plan(*records, BATCH, SIZE, None, 0.1))
    try:
        assert len(worker.info["cpus"]) == 1 and worker.info["cpus"][0] in os.sched_getaffinity(0)
        (rate, cpu_us), = worker.rates([READ]).values()
        assert rate > 0 and cpu_us > 0
    finally:
        worker.stop()
