"""Corrupt TFRecord shards: what cannot be read, parsed or decoded is skipped and counted by file, the rest is read,
and too much of it stops training with a message naming the files (chexnet.data.integrity)."""

import numpy as np
import pytest
import tensorflow as tf

from chexnet.data import integrity
from chexnet.data.datasets import PipelineConfig, eval_dataset, skip_counters, train_dataset, train_labels
from chexnet.data.tfrecords import JPEG, Storage, convert
from programkit.data.chestxray14 import DataError
from programkit.data.sources import source_of
from programkit.data.synthetic import write_synthetic

SIZE, SHORT_SIDE, IMAGE_SIZE, SHARDS = 16, 20, 16, 3


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("layout"), 60, SIZE, seed=6, patients=20)


@pytest.fixture
def records(layout, tmp_path):
    """A fresh copy of resized JPEG records for each test, to damage."""
    convert(layout, tmp_path, shards=SHARDS, storage=Storage.of(JPEG, SHORT_SIDE), workers=1)
    return tmp_path


def _cfg(**overrides) -> PipelineConfig:
    return PipelineConfig(**{"batch_size": 4, "image_size": IMAGE_SIZE, **overrides})


def _read_train(records) -> tuple[int, integrity.Counts]:
    """One pass over train in order (the evaluation pipeline): the images read and what its counter saw."""
    source = source_of(records)
    seen = sum(int(images.shape[0]) for images, _ in eval_dataset(source, "train", _cfg()))
    (counter,) = skip_counters("train")
    return seen, counter.snapshot()


def _rewrite_record(shard, index: int, change) -> None:
    """Replaces record `index` of `shard` by change(example) (an Example) or change(bytes) (raw bytes)."""
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
    example = tf.train.Example.FromString(serialized[index])
    new = change(example)
    serialized[index] = new if isinstance(new, bytes) else new.SerializeToString()
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in serialized:
            writer.write(record)


def _without(feature: str):
    def change(example):
        del example.features.feature[feature]
        return example
    return change


def _garbage_image(example):
    example.features.feature["image"].bytes_list.value[0] = b"\xff\xd8\xff\xe0 not a JPEG after all" * 4
    return example


def test_a_clean_set_skips_nothing(records):
    seen, counts = _read_train(records)
    assert seen == source_of(records).count("train") and counts.skipped == 0 and counts.good.sum() == seen


@pytest.mark.parametrize("damage", ["truncated", "flipped bytes"])
def test_a_damaged_shard_is_read_up_to_the_damage_and_the_rest_is_counted_lost(records, damage):
    source = source_of(records)
    path, expected = source.shards["train"][1]
    data = bytearray(open(path, "rb").read())
    middle = len(data) // 2
    if damage == "truncated":
        data = data[:middle]
    else:
        data[middle:middle + 8] = bytes(b ^ 0xFF for b in data[middle:middle + 8])
    open(path, "wb").write(bytes(data))
    seen, counts = _read_train(records)
    total = source.count("train")
    assert 0 < expected - counts.lost[1] < expected  # the records before the damage were read
    assert counts.lost.tolist() == [0, counts.lost[1], 0] and counts.damaged.tolist() == [0, 1, 0]
    assert seen == total - counts.lost[1] and counts.bad.sum() == 0 and counts.total == total
    assert "train-00001-of-00003.tfrecord damaged" in counts.describe()


@pytest.mark.parametrize("change", [_garbage_image, _without("labels"), _without("image"),
                                    lambda example: b"\x00not an Example\x01"],
                         ids=["undecodable JPEG", "missing labels", "missing image", "not an Example"])
def test_a_record_that_does_not_parse_or_decode_is_skipped_and_counted_exactly(records, change):
    source = source_of(records)
    _rewrite_record(source.shards["train"][2][0], 3, change)
    seen, counts = _read_train(records)
    assert seen == source.count("train") - 1
    assert counts.bad.tolist() == [0, 0, 1] and counts.lost.sum() == 0 and counts.skipped == 1
    assert "train-00002-of-00003.tfrecord 1 records that do not parse or decode" in counts.describe()


def test_training_batches_go_on_past_bad_records_and_the_class_weights_leave_them_out(records):
    source = source_of(records)
    _rewrite_record(source.shards["train"][0][0], 0, _without("labels"))
    _rewrite_record(source.shards["train"][2][0], 1, _garbage_image)
    batches = list(train_dataset(source, _cfg(shuffle_buffer=1)).take(source.count("train") // 4 * 2))  # 2 passes
    assert all(images.shape == (4, IMAGE_SIZE, IMAGE_SIZE, 1) and images.dtype == tf.uint8 for images, _ in batches)
    (counter,) = skip_counters("train")
    counts = counter.snapshot()
    assert counts.bad[0] >= 1 and counts.bad[2] >= 1 and counts.bad[1] == 0  # once per pass that met them
    assert len(train_labels(source)) == source.count("train") - 1  # the missing labels; the bad JPEG has labels


def test_a_stream_with_nothing_readable_fails_naming_the_shards_instead_of_looping(records):
    source = source_of(records)
    for path, _ in source.shards["train"]:
        open(path, "wb").write(b"\x07" * 40)  # no record survives
    with pytest.raises(tf.errors.InvalidArgumentError) as failed:
        next(iter(train_dataset(source, _cfg())))
    message = integrity.unreadable_message(failed.value, skip_counters("train"))
    assert message is not None and "no readable training data" in message
    assert "train-00000-of-00003.tfrecord damaged" in message
    assert integrity.unreadable_message(ValueError("something else"), skip_counters("train")) is None
    with pytest.raises(DataError, match="no readable training record: .* train-00001-of-00003.tfrecord damaged"):
        train_labels(source)


def test_a_stream_whose_images_never_decode_fails_instead_of_looping(records):
    source = source_of(records)
    for path, records_in in source.shards["train"]:
        for index in range(records_in):
            _rewrite_record(path, index, _garbage_image)
    needle = f"no train record could be decoded in {source.count('train')} tries in a row"
    with pytest.raises(tf.errors.InvalidArgumentError, match=needle):
        next(iter(train_dataset(source, _cfg())))
    (counter,) = skip_counters("train")
    assert counter.snapshot().bad.sum() >= source.count("train") and counter.snapshot().good.sum() == 0


def _counts(good, bad, lost) -> integrity.Counts:
    read = [g + b for g, b in zip(good, bad, strict=True)]
    arrays = [np.array(v, np.int64) for v in (good, bad, lost, [int(x > 0) for x in lost], read)]
    return integrity.Counts("train", ("/d/train-00000-of-00002.tfrecord", "/d/train-00001-of-00002.tfrecord"),
                            *arrays)


def test_the_threshold_is_a_share_of_what_was_tried_and_nothing_readable_always_exceeds():
    assert not _counts([50, 45], [0, 5], [0, 0]).exceeds(0.1)  # 5 %
    assert _counts([50, 30], [0, 0], [0, 20]).exceeds(0.1)  # 20 %
    assert not _counts([50, 30], [0, 0], [0, 20]).exceeds(0.25)
    assert _counts([0, 0], [0, 1], [0, 0]).exceeds(1.0)  # every record unreadable
    assert not _counts([0, 0], [0, 0], [0, 0]).exceeds(0.0)  # nothing tried, nothing skipped
    later = _counts([100, 80], [0, 2], [0, 20])
    assert (later - _counts([50, 45], [0, 1], [0, 0])).skipped == 21
    message = integrity.too_many_message([_counts([50, 30], [0, 0], [0, 20])], 0.1)
    assert "more than 10% of the records were unreadable" in message and "--max-skipped-fraction 0.1" in message
    assert "20 of 100 train records skipped (20.0%): train-00001-of-00002.tfrecord damaged" in message


def test_each_epoch_reports_what_it_skipped_into_the_epoch_record_and_stops_above_the_threshold(records, capsys):
    import horovod.tensorflow as hvd

    from chexnet import callbacks as cb

    hvd.init()  # one process: the callback's allreduces are then skipped, as with one worker
    source = source_of(records)
    dataset = eval_dataset(source, "train", _cfg())
    (counter,) = skip_counters("train")
    validation = type("Validation", (), {"history": []})()
    monitor = cb.SkippedRecords([counter], 0.1, validation, announce=True)
    monitor.set_model(tf.keras.Sequential())
    for epoch in range(3):
        if epoch == 1:  # corrupted between epochs: a whole shard lost in epoch 2
            path, _ = source.shards["train"][1]
            open(path, "wb").write(open(path, "rb").read()[:10])
        validation.history.append({"epoch": epoch + 1})
        logs = {}
        sum(1 for _ in dataset)
        monitor.on_epoch_end(epoch, logs)
        assert logs[cb.TAG_SKIPPED] == validation.history[-1][cb.TAG_SKIPPED]
        if epoch == 0:
            assert logs[cb.TAG_SKIPPED] == 0 and monitor.failure is None and not monitor.model.stop_training
    lost = source.shards["train"][1][1]
    assert validation.history[1][cb.TAG_SKIPPED] == validation.history[2][cb.TAG_SKIPPED] == lost
    err = capsys.readouterr().err
    assert "epoch 1:" not in err and "epoch 2: skipped unreadable records (all workers):" in err
    assert "train-00001-of-00003.tfrecord damaged" in err
    assert monitor.model.stop_training and "more than 10% of the records were unreadable" in monitor.failure
