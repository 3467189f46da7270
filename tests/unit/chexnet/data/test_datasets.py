"""chexnet.data (sources, decoding, datasets): shapes, labels, sharding across ranks, and bad data skipped and
counted, for the image directory, original-PNG records and resized JPEG and raw records."""

import csv

import numpy as np
import pytest
import tensorflow as tf

from chexnet.data.datasets import (
    PipelineConfig,
    decode_only_dataset,
    eval_dataset,
    reset_skipped_count,
    skipped_count,
    train_dataset,
)
from chexnet.data.tfrecords import JPEG, PNG, RAW, Storage, convert
from programkit.data.chestxray14 import CSV_NAME, DataError
from programkit.data.sources import DataSource, source_of
from programkit.data.synthetic import write_synthetic
from programkit.labels import NUM_CLASSES, encode

SIZE = 16  # images on disk
IMAGE_SIZE = 24  # what the pipeline resizes to: not the stored size, so resizing is exercised
SHORT_SIDE = 28  # resized records: crops of 24 out of 28
BATCH = 4


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("layout"), 60, SIZE, seed=2, patients=20)


@pytest.fixture(scope="module")
def records(layout, tmp_path_factory):
    """Original PNGs in TFRecords: every image decodes to the same pixels every time, as the sharding tests need."""
    out = tmp_path_factory.mktemp("tfrecords")
    convert(layout, out, shards=4, storage=Storage.of(PNG))
    return out


@pytest.fixture(scope="module")
def resized(layout, tmp_path_factory):
    """{encoding: directory} of records resized to SHORT_SIDE."""
    found = {}
    for encoding in (JPEG, RAW):
        found[encoding] = tmp_path_factory.mktemp(encoding)
        convert(layout, found[encoding], shards=4, storage=Storage.of(encoding, SHORT_SIDE), workers=1)
    return found


@pytest.fixture(params=["images", "tfrecord", JPEG, RAW])
def source(request, layout, records, resized) -> DataSource:
    return source_of({"images": layout, "tfrecord": records}.get(request.param) or resized.get(request.param))


def _cfg(**overrides) -> PipelineConfig:
    return PipelineConfig(**{"batch_size": BATCH, "image_size": IMAGE_SIZE, **overrides})


def _csv_labels(layout) -> dict:
    with open(layout / CSV_NAME, newline="") as f:
        return {row["Image Index"]: encode(row["Finding Labels"]) for row in csv.DictReader(f)}


@pytest.mark.parametrize("pipeline", ["parallel", "sequential"])
def test_train_batches_have_the_model_shapes_and_never_end(source, pipeline):
    batches = train_dataset(source, _cfg(pipeline=pipeline))
    steps = source.count("train") // BATCH + 3  # past the end of one epoch
    for images, labels in batches.take(steps):
        # uint8 grey, one channel, as decoded: the model normalises in its first layer (chexnet.model)
        assert images.shape == (BATCH, IMAGE_SIZE, IMAGE_SIZE, 1) and images.dtype == tf.uint8
        assert labels.shape == (BATCH, NUM_CLASSES) and labels.dtype == tf.float32
    assert int(tf.reduce_max(images)) - int(tf.reduce_min(images)) > 50  # pixels, not a constant


def test_cache_gives_the_same_shapes(source):
    images, labels = next(iter(train_dataset(source, _cfg(cache=True, threads=2))))
    assert images.shape == (BATCH, IMAGE_SIZE, IMAGE_SIZE, 1) and images.dtype == tf.uint8
    assert labels.shape == (BATCH, NUM_CLASSES)


def test_eval_labels_match_the_csv_and_ranks_split_the_set(source, layout):
    by_id = _csv_labels(layout)
    expected = sorted(tuple(v) for v in (by_id[r] for r in _ids_of(source, "val")))
    parts = [[tuple(row) for _, labels in eval_dataset(source, "val", _cfg(), rank, 3) for row in labels.numpy()]
             for rank in range(3)]
    assert sorted(sum(parts, [])) == expected  # disjoint by position, together the whole split
    assert [len(p) for p in parts] == [len(range(r, len(expected), 3)) for r in range(3)]
    first = next(iter(eval_dataset(source, "val", _cfg(), 0, 1)))
    np.testing.assert_array_equal(first[1].numpy()[0], by_id[_ids_of(source, "val")[0]])


def _ids_of(source, split):
    if source.kind == "images":
        return [r.image_id for r in source.index.split(split)]
    ids = []
    for path in source.files(split):
        ids += [tf.io.parse_single_example(s, {"image_id": tf.io.FixedLenFeature([], tf.string)})["image_id"]
                .numpy().decode() for s in tf.data.TFRecordDataset(path)]
    return ids


def _key(image: np.ndarray) -> bytes:
    """An image's identity whether or not training flipped it (the synthetic noise makes every image unique)."""
    return min(image.tobytes(), image[:, ::-1].tobytes())


def _one_epoch_per_rank(source, size):
    cfg = _cfg(batch_size=1, shuffle_buffer=1)
    parts = []
    for rank in range(size):
        share = len(range(rank, source.count("train"), size))  # the element-sharding share
        if len(source.files("train")) >= size:  # the file-sharding share
            share = sum(n for path, n in source.shards["train"] if path in source.files("train")[rank::size])
        parts.append([_key(images.numpy()[0]) for images, _ in train_dataset(source, cfg, rank, size).take(share)])
    return parts


def _all_train_images(source):
    return sorted(_key(image) for images, _ in eval_dataset(source, "train", _cfg()) for image in images.numpy())


@pytest.mark.parametrize("size", [2, 5])  # 4 train shards: files for 2 ranks, elements for 5
def test_ranks_get_disjoint_parts_that_make_up_the_whole_train_split(records, size, caplog):
    source = source_of(records)
    parts = _one_epoch_per_rank(source, size)
    assert sorted(sum(parts, [])) == _all_train_images(source)
    assert all(len(set(p)) == len(p) for p in parts)
    assert ("sharding by element" in caplog.text) == (size > len(source.files("train")))


def test_crops_of_resized_records(resized):
    """Training images are random crops of the stored image, maybe flipped; evaluation takes the centre crop."""
    source = source_of(resized[RAW])
    stored = {}
    for path in source.files("train") + source.files("val"):
        for record in tf.data.TFRecordDataset(path):
            example = tf.io.parse_single_example(record, {"image": tf.io.FixedLenFeature([], tf.string)})
            pixels = np.frombuffer(example["image"].numpy(), np.uint8).reshape(SHORT_SIDE, SHORT_SIDE)
            stored[pixels.tobytes()] = pixels
    offsets = range(SHORT_SIDE - IMAGE_SIZE + 1)
    windows = {image[top:top + IMAGE_SIZE, left:left + IMAGE_SIZE][:, ::flip].tobytes(): (top, left)
               for image in stored.values() for top in offsets for left in offsets for flip in (1, -1)}
    seen = set()
    for images, _ in train_dataset(source, _cfg(batch_size=8)).take(6):
        for image in images.numpy()[..., 0]:
            assert image.tobytes() in windows  # inside the stored image, the crop's size
            seen.add(windows[image.tobytes()])
    assert len(seen) > 3  # and not always the same window
    centre = (SHORT_SIDE - IMAGE_SIZE) // 2
    centres = {image[centre:centre + IMAGE_SIZE, centre:centre + IMAGE_SIZE].tobytes() for image in stored.values()}
    for images, _ in eval_dataset(source, "val", _cfg()):
        assert all(image.tobytes() in centres for image in images.numpy()[..., 0])


def test_ten_crop_batches_and_what_they_need(resized, records, layout):
    source = source_of(resized[JPEG])
    images, labels = next(iter(eval_dataset(source, "test", _cfg(ten_crop=True))))
    assert images.shape == (BATCH, 10, IMAGE_SIZE, IMAGE_SIZE, 1) and images.dtype == tf.uint8
    assert labels.shape == (BATCH, NUM_CLASSES)
    np.testing.assert_array_equal(images[:, 5].numpy(), images[:, 0].numpy()[:, :, ::-1])  # mirrored
    for original in (records, layout):
        with pytest.raises(DataError, match="ten_crop needs resized records"):
            eval_dataset(source_of(original), "test", _cfg(ten_crop=True))
    with pytest.raises(DataError, match=f"image_size {SHORT_SIDE + 1} is larger than the short side {SHORT_SIDE}"):
        train_dataset(source, _cfg(image_size=SHORT_SIDE + 1))


def test_decode_only_yields_every_image_once(source):
    total = sum(int(images.shape[0]) for images, _ in decode_only_dataset(source, "test", _cfg()))
    assert total == source.count("test")


def test_a_corrupt_png_is_skipped_and_counted(tmp_path):
    layout = write_synthetic(tmp_path / "d", 20, SIZE, seed=5, patients=8)
    source = source_of(layout)
    bad = source.index.test[0].path
    bad.write_bytes(bad.read_bytes()[:40])  # a truncated PNG
    reset_skipped_count()
    seen = sum(int(images.shape[0]) for images, _ in eval_dataset(source, "test", _cfg()))
    assert seen == source.count("test") - 1 and skipped_count() == 1


def test_a_truncated_tfrecord_shard_is_read_up_to_the_damage(layout, tmp_path):
    out = tmp_path / "t"
    manifest = convert(layout, out, shards=2)
    shard = out / manifest["shards"]["test"][0]["file"]
    data = shard.read_bytes()
    shard.write_bytes(data[:len(data) * 2 // 3])
    reset_skipped_count()
    source = source_of(out)
    seen = sum(int(images.shape[0]) for images, _ in eval_dataset(source, "test", _cfg()))
    assert 0 < seen < source.count("test") and skipped_count() == source.count("test") - seen
    reset_skipped_count()
    batches = list(train_dataset(source, _cfg(batch_size=2)).take(3))  # an endless one keeps going too
    assert len(batches) == 3


def test_bad_inputs_give_clear_errors(tmp_path, layout):
    with pytest.raises(DataError, match="does not exist"):
        source_of(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="is empty"):
        source_of(tmp_path / "empty")
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        PipelineConfig(batch_size=0)
    with pytest.raises(ValueError, match="pipeline must be one of parallel, sequential; got 'fast'"):
        PipelineConfig(pipeline="fast")
    with pytest.raises(ValueError, match="split must be one of train, val, test"):
        source_of(layout).count("dev")


def test_unknown_label_in_a_layout_directory(tmp_path):
    layout = write_synthetic(tmp_path / "d", 10, SIZE, seed=1)
    text = (layout / CSV_NAME).read_text().splitlines()
    text[1] = text[1].replace(text[1].split(",")[1], "Pneumonitis", 1)
    (layout / CSV_NAME).write_text("\n".join(text) + "\n")
    with pytest.raises(DataError, match="unknown labels.*'Pneumonitis'"):
        source_of(layout)
    assert source_of(layout, skip_bad=True).count("train") + source_of(layout, skip_bad=True).count("val") \
        + source_of(layout, skip_bad=True).count("test") == 9
