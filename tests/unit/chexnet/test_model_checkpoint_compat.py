"""Checkpoints of the model as it was before it took uint8 (float32 [S, S, 3] normalised on the host, straight into
the backbone) restore into today's model through the paths that use them: `chexnet.evaluate`, `--resume`
(`chexnet.resume.restore_or_start`) and `--weights`; and the restored model, fed uint8, predicts what the old one
predicted from host-normalised float32."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bench.parity import float_model
from chexnet import evaluate, resume
from chexnet.data import decoding
from chexnet.data.datasets import PipelineConfig, eval_dataset
from chexnet.model import build_model
from programkit.data.sources import source_of
from programkit.data.synthetic import write_synthetic
from programkit.metrics import auroc_per_class

IMAGE_SIZE = 32  # the smallest the backbone takes: the test is about the object graph, not the pixels
BATCH = 8
EPOCHS_DONE = 3
SAVED_LR = 0.0123
ATOL = 1e-5


def compiled(model: tf.keras.Model) -> tf.keras.Model:
    """Compiled with the optimizer that training wraps in Horovod's DistributedOptimizer. Unwrapped here: the
    wrapper is a subclass of the same optimizer class with the same variables, and in an eager step it warns once
    per variable."""
    import horovod.tensorflow.keras as hvd

    hvd.init()  # one process, as `restore_or_start` needs for its broadcasts
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
    return model


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("layout"), 60, IMAGE_SIZE, seed=4, patients=30)


@pytest.fixture(scope="module")
def old(layout, tmp_path_factory):
    """(the model as it was before uint8 input (bench.parity keeps it) after one training step, its checkpoint
    directory saved the way `chexnet.train` saves)."""
    tf.keras.utils.set_random_seed(7)
    model = compiled(float_model(IMAGE_SIZE))
    images, labels = batch_of(layout, "train")
    with tf.GradientTape() as tape:  # one eager step: moves the weights, the batch-norm statistics and Adam's slots
        scores = model(decoding.normalise(images), training=True)
        loss = tf.reduce_mean(tf.keras.losses.binary_crossentropy(labels, scores))
    gradients = tape.gradient(loss, model.trainable_variables)
    model.optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
    directory = tmp_path_factory.mktemp("checkpoints")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer,
                                     epoch=tf.Variable(EPOCHS_DONE, dtype=tf.int64), lr=tf.Variable(SAVED_LR))
    tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=2).save()
    return model, directory


def old_predictions(model: tf.keras.Model, layout) -> tuple[np.ndarray, np.ndarray]:
    """(labels, scores) of the test split as the old model was fed: the same batches, normalised on the host."""
    batches = eval_dataset(source_of(layout), evaluate.SPLIT, PipelineConfig(batch_size=BATCH, image_size=IMAGE_SIZE))
    pairs = [(labels.numpy(), model(decoding.normalise(images), training=False).numpy()) for images, labels in batches]
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def test_evaluate_restores_an_old_checkpoint_to_the_same_scores_and_auroc(old, layout, tmp_path):
    model, directory = old
    cfg = evaluate.EvalConfig(checkpoint=directory, data_dir=layout, out=tmp_path, image_size=IMAGE_SIZE,
                              model="densenet121", batch_size=BATCH)
    labels, scores, used = evaluate.predict_test_split(cfg)
    old_labels, old_scores = old_predictions(model, layout)
    assert used.endswith("ckpt-1")
    np.testing.assert_array_equal(labels, old_labels)
    np.testing.assert_allclose(scores, old_scores, atol=ATOL)
    assert auroc_per_class(labels, scores) == auroc_per_class(old_labels, old_scores)
    assert scores.std(axis=0).min() > 10 * ATOL  # scores that differ by image: unrestored weights could not match


def batch_of(layout, split: str) -> tuple[tf.Tensor, tf.Tensor]:
    """The first uint8 batch of `split`, as evaluation reads it."""
    cfg = PipelineConfig(batch_size=BATCH, image_size=IMAGE_SIZE)
    return next(iter(eval_dataset(source_of(layout), split, cfg)))


def test_resume_restores_weights_optimizer_and_counters_of_an_old_checkpoint(old):
    model, directory = old
    new = compiled(build_model("densenet121", IMAGE_SIZE))
    epoch, lr = tf.Variable(0, dtype=tf.int64), tf.Variable(1.0)
    checkpoint = tf.train.Checkpoint(model=new, optimizer=new.optimizer, epoch=epoch, lr=lr)
    manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=2)
    done = resume.restore_or_start(new, checkpoint, manager, epoch, lr, resume=True, epochs=5, chief=True)
    assert done == EPOCHS_DONE and new.optimizer.learning_rate.numpy() == pytest.approx(SAVED_LR)
    assert_same(model.get_weights(), new.get_weights())
    assert_same([v.numpy() for v in model.optimizer.variables], [v.numpy() for v in new.optimizer.variables])


def test_a_whole_model_weights_file_of_the_old_model_loads(old, layout, tmp_path):
    model, _ = old
    path = tmp_path / "old.h5"
    model.save_weights(str(path))
    new = build_model("densenet121", IMAGE_SIZE, weights=path)
    assert_same(model.get_weights(), new.get_weights())
    images, _ = batch_of(layout, evaluate.SPLIT)
    np.testing.assert_allclose(new(images, training=False).numpy(),
                               model(decoding.normalise(images), training=False).numpy(), atol=ATOL)


def assert_same(expected: list[np.ndarray], found: list[np.ndarray]) -> None:
    assert len(expected) == len(found) and len(found) > 2
    for a, b in zip(expected, found, strict=True):
        np.testing.assert_array_equal(a, b)
