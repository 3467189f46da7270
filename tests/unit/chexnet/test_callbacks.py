"""Rank 0's TensorBoard writing across kills: record before the checkpoint, log after it, catch up, skip what is there.

No Horovod processes: these callbacks' TensorBoard and checkpoint paths use none of its collectives.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

from chexnet import callbacks as cb
from chexnet.resume import EpochLog
from programkit import tblog


def values(epoch: int, loss: float) -> dict[str, object]:
    """One WholeSetValidation.history entry; Hernia's AUROC undefined (all labels one value)."""
    return {"epoch": epoch, **dict.fromkeys(cb.EPOCH_TAGS, 0.75), cb.TAG_LOSS_TRAIN: loss, cb.TAG_LR: 1e-3,
            "auroc/Hernia": None}


def logged_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    return {tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
            for tag in acc.Tags()[event_accumulator.TENSORS]}


def epoch_log(tmp_path: Path) -> EpochLog:
    return EpochLog(tmp_path / "logs", tblog.record_path(tmp_path / "checkpoints"),
                       tblog.read_logdir(tmp_path / "logs"))


def test_record_then_publish_writes_each_defined_scalar_once(tmp_path):
    log = epoch_log(tmp_path)
    entry = log.record(values(1, loss=0.5))
    assert tblog.read_record(log.record_path)[1] == entry
    assert entry.logdir == str(tmp_path / "logs")
    assert log.publish(entry) == len(cb.EPOCH_TAGS) - 1  # Hernia is undefined
    assert log.publish(entry) == 0  # what the logdir holds is never written again
    log.close()
    found = logged_scalars(tmp_path / "logs")
    assert "auroc/Hernia" not in found
    assert found[cb.TAG_LOSS_TRAIN] == [(1, 0.5)] and found[cb.TAG_LR][0][1] == tf.constant(1e-3).numpy()


def test_catch_up_writes_what_a_kill_left_out_up_to_the_checkpoint(tmp_path, capsys):
    log = epoch_log(tmp_path)
    for epoch in (1, 2, 3):
        entry = log.record(values(epoch, loss=epoch / 10))
        if epoch == 1:
            log.publish(entry)
    log.close()
    # Killed after checkpoint 2 was saved, before epoch 2 was logged (epoch 3 was recorded, never checkpointed).
    resumed = epoch_log(tmp_path)
    assert resumed.catch_up(checkpoint_epoch=2) == [2]
    assert resumed.catch_up(checkpoint_epoch=2) == []
    resumed.close()
    found = logged_scalars(tmp_path / "logs")
    assert all([step for step, _ in found[tag]] == [1, 2] for tag in cb.EPOCH_TAGS if tag != "auroc/Hernia")
    assert found[cb.TAG_LOSS_TRAIN][1][1] == tf.constant(0.2).numpy()  # the recorded value, as float32
    assert "wrote epoch 2 to TensorBoard from the checkpoint's record" in capsys.readouterr().err


def test_nothing_to_catch_up_makes_no_event_file(tmp_path):
    log = epoch_log(tmp_path)
    assert log.catch_up(checkpoint_epoch=5) == []
    log.close()
    assert not (tmp_path / "logs").exists()


class OrderCheckingManager:
    """A CheckpointManager stand-in that checks, at save time, that the epoch is recorded and not yet logged."""

    def __init__(self, log: EpochLog) -> None:
        self.log = log
        self.saved: list[int] = []

    def save(self, checkpoint_number: int) -> str:
        assert checkpoint_number in tblog.read_record(self.log.record_path)
        self.log.writer.flush()
        assert not tblog.read_logdir(self.log.logdir).has(cb.TAG_LOSS_TRAIN, checkpoint_number)
        self.saved.append(checkpoint_number)
        return f"ckpt-{checkpoint_number}"


def test_checkpoint_saver_records_before_and_logs_after_the_save(tmp_path):
    log = epoch_log(tmp_path)
    manager = OrderCheckingManager(log)
    validation = SimpleNamespace(history=[values(1, loss=0.5)])
    saver = cb.CheckpointSaver(manager, tf.Variable(0, dtype=tf.int64), tf.Variable(0.0), cb.NanGuard(),
                               validation, log)
    saver.set_model(SimpleNamespace(optimizer=SimpleNamespace(learning_rate=1e-4)))
    saver.on_epoch_end(0)
    log.close()
    assert manager.saved == [1]
    assert saver.epoch.numpy() == 1 and saver.lr.numpy() == tf.constant(1e-4).numpy()
    assert [step for step, _ in logged_scalars(tmp_path / "logs")[cb.TAG_LOSS_TRAIN]] == [1]


def test_a_tripped_guard_records_saves_and_logs_nothing(tmp_path):
    log = epoch_log(tmp_path)
    manager = OrderCheckingManager(log)
    guard = cb.NanGuard()
    guard.tripped = True
    saver = cb.CheckpointSaver(manager, tf.Variable(0, dtype=tf.int64), tf.Variable(0.0), guard,
                               SimpleNamespace(history=[]), log)
    saver.on_epoch_end(0)
    assert manager.saved == [] and not log.record_path.exists()


def test_throughput_skips_the_steps_the_logdir_holds(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    # Two points per 5-step epoch, after its 3rd and 5th steps (its first step is not measured): global steps 8
    # and 10 in the second epoch. A killed run logged up to step 8; the resumed run re-trains that epoch.
    throughput = cb.ThroughputLogger(writer, images_per_step=32, steps_per_epoch=5, every_steps=2, logged_through=8)
    throughput.on_epoch_begin(1)
    for batch in range(5):
        throughput.on_train_batch_end(batch)
    writer.close()
    assert sorted(tblog.read_logdir(tmp_path).steps[cb.TAG_THROUGHPUT]) == [10]
