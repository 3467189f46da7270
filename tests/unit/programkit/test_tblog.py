"""The pure parts of exactly-once TensorBoard scalars: the epochs record, reading a logdir, what to re-write."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import tensorflow as tf
from tensorboard.compat.proto import event_pb2

from programkit import tblog

LOGDIR = "/runs/a"


def entry(epoch: int, loss: float = 0.5, logdir: str = LOGDIR, **scalars: float | None) -> tblog.EpochScalars:
    return tblog.EpochScalars(epoch=epoch, scalars={"loss/train": loss, "lr": 1e-3, **scalars}, logdir=logdir)


def write_events(logdir: Path, points: list[tuple[str, int]]) -> Path:
    """A new event file with a scalar per (tag, step), the way rank 0 writes them; returns the file."""
    before = set(logdir.iterdir()) if logdir.exists() else set()
    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        for tag, step in points:
            tf.summary.scalar(tag, 1.0, step=step)
    writer.close()
    (path,) = set(logdir.iterdir()) - before
    return path


def test_record_round_trip_keeps_values_none_and_nan(tmp_path):
    path = tmp_path / "checkpoints" / tblog.RECORD_FILE  # the directory does not exist before the first epoch
    first = entry(1, loss=0.123456789012345, **{"auroc/Hernia": None})
    second = entry(2, loss=math.nan)
    tblog.append_record(path, first)
    tblog.append_record(path, second)
    records = tblog.read_record(path)
    assert sorted(records) == [1, 2]
    assert records[1] == first  # float values survive exactly (JSON keeps a float's shortest repr)
    assert math.isnan(records[2].scalars["loss/train"]) and records[2].logdir == LOGDIR
    assert list(records[1].scalars) == ["loss/train", "lr", "auroc/Hernia"]  # the order tags are written in


def test_the_last_line_of_an_epoch_wins(tmp_path):
    path = tblog.record_path(tmp_path)
    for item in (entry(1), entry(2, loss=0.9), entry(2, loss=0.4)):
        tblog.append_record(path, item)
    assert tblog.read_record(path)[2].scalars["loss/train"] == 0.4


def test_a_line_cut_short_is_skipped_and_the_next_append_starts_a_new_line(tmp_path):
    path = tblog.record_path(tmp_path)
    tblog.append_record(path, entry(1))
    whole = entry(2).to_line()
    with path.open("ab") as out:
        out.write(whole[: len(whole) // 2])  # killed in the middle of the append
    assert sorted(tblog.read_record(path)) == [1]
    tblog.append_record(path, entry(2, loss=0.25))
    records = tblog.read_record(path)
    assert sorted(records) == [1, 2] and records[2].scalars["loss/train"] == 0.25


@pytest.mark.parametrize("line", [b"", b"[1, 2]", b'{"epoch": 0, "logdir": "/x", "scalars": {}}',
                                  b'{"epoch": 1, "scalars": {}}', b'{"epoch": 1, "logdir": "/x", "scalars": []}',
                                  b'{"epoch": 1, "logdir": "/x", "scalars": {"lr": "high"}}', b"\xff\xfe{"])
def test_lines_that_are_not_whole_records_are_ignored(line):
    assert tblog.parse_line(line) is None


def test_a_missing_record_reads_empty_and_reset_removes_it(tmp_path):
    path = tblog.record_path(tmp_path)
    assert tblog.read_record(path) == {}
    tblog.append_record(path, entry(1))
    tblog.reset_record(path)
    tblog.reset_record(path)  # nothing left to remove is fine
    assert not path.exists()


def test_read_logdir_collects_every_tag_and_step_over_all_event_files(tmp_path):
    write_events(tmp_path, [("loss/train", 1), ("throughput/images_per_sec", 11), ("throughput/images_per_sec", 21)])
    write_events(tmp_path, [("loss/train", 2), ("throughput/images_per_sec", 41)])
    (tmp_path / "notes.txt").write_text("not an event file")
    logged = tblog.read_logdir(tmp_path)
    assert logged.steps["loss/train"] == {1, 2}
    assert logged.last_step("throughput/images_per_sec") == 41
    assert logged.has("loss/train", 2) and not logged.has("loss/val", 2)
    assert logged.last_step("lr") == 0


def test_read_logdir_of_a_directory_that_does_not_exist_is_empty(tmp_path):
    assert tblog.read_logdir(tmp_path / "nope").steps == {}


@pytest.mark.parametrize("cut", ["mid-record", "mid-header", "zero-filled"])
def test_an_event_file_cut_short_by_a_kill_reads_up_to_the_cut(tmp_path, cut):
    path = write_events(tmp_path, [("loss/train", 1), ("loss/train", 2), ("loss/train", 3)])
    data = path.read_bytes()
    whole = tblog.read_logdir(tmp_path)
    assert whole.steps["loss/train"] == {1, 2, 3}
    # The last record is epoch 3's: cut inside it, inside its length header, or (a crashed node's file system)
    # followed by zeros instead of the bytes that never reached the disk.
    last_record = data.rindex(_record_of(path, 3))
    tail = {"mid-record": data[last_record:last_record + 20], "mid-header": data[last_record:last_record + 5],
            "zero-filled": b"\0" * 64}[cut]
    path.write_bytes(data[:last_record] + tail)
    assert tblog.read_logdir(tmp_path).steps["loss/train"] == {1, 2}


def _record_of(path: Path, step: int) -> bytes:
    """The framed bytes (length, CRC, event, CRC) of the event file's record at `step`."""
    data, pos = path.read_bytes(), 0
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 8], "little")
        record = data[pos:pos + 16 + length]
        event = event_pb2.Event.FromString(record[12:12 + length])
        if event.step == step and event.summary.value:
            return record
        pos += len(record)
    raise AssertionError(f"no record at step {step}")


def test_epochs_to_rewrite_are_the_checkpoints_own_that_the_logdir_lacks():
    records = {1: entry(1), 2: entry(2), 3: entry(3), 4: entry(4, logdir="/runs/other"), 5: entry(5)}
    logged = tblog.LoggedSteps()
    for tag in ("loss/train", "lr"):
        logged.add(tag, 1)
    logged.add("loss/train", 3)  # epoch 3 was cut short after its first scalar
    # 1 is whole; 2 and 3 are (partly) missing; 4 was logged to another logdir; 5 is past the checkpoint.
    rewrite = tblog.epochs_to_rewrite(records, logged, checkpoint_epoch=4, logdir=LOGDIR)
    assert [item.epoch for item in rewrite] == [2, 3]
    assert tblog.missing_tags(records[2], logged) == ["loss/train", "lr"]
    assert tblog.missing_tags(records[3], logged) == ["lr"]


def test_undefined_values_are_never_missing():
    undefined = entry(1, **{"auroc/Hernia": None})
    logged = tblog.LoggedSteps({"loss/train": {1}, "lr": {1}})
    assert tblog.missing_tags(undefined, logged) == []
    assert tblog.epochs_to_rewrite({1: undefined}, logged, checkpoint_epoch=1, logdir=LOGDIR) == []


def test_nothing_to_rewrite_without_a_record_or_before_the_first_checkpoint():
    assert tblog.epochs_to_rewrite({}, tblog.LoggedSteps(), checkpoint_epoch=3, logdir=LOGDIR) == []
    assert tblog.epochs_to_rewrite({1: entry(1)}, tblog.LoggedSteps(), checkpoint_epoch=0, logdir=LOGDIR) == []


def test_logdir_key_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert tblog.logdir_key(Path("logs")) == str(tmp_path / "logs")
