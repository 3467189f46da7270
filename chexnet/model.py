"""CheXNet: an ImageNet-style backbone with 14 sigmoid outputs, and the paper's weighted binary cross-entropy.

The model takes what the input pipeline delivers, uint8 grey images [S, S, 1], and normalises them in its first
layer (`ImageNetNormalisation`, no weights): on a GPU that work runs on the device. Layers without weights do not
move the checkpoint keys of the layers that have them (Keras numbers those apart), so checkpoints of the earlier
model, which took float32 [S, S, 3] normalised on the host, still restore.

Nothing here downloads: the backbone is built with `weights=None` and, if asked, loaded from a local file
(Keras' ImageNet "notop" `.h5` for the same backbone, or a whole-model weights file saved by this package).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorflow as tf

from chexnet.data.decoding import normalise
from programkit.labels import NUM_CLASSES

TINY_FILTERS = (16, 32, 64)  # tinycnn: three stride-2 convolutions, about 25 k weights
TINY_LAST_CONV = "tinycnn_conv3_relu"  # its last feature maps (Grad-CAM's layer in notebook 03)


def tiny_cnn(include_top: bool = False, weights: None = None, input_tensor: tf.Tensor | None = None,
             pooling: str = "avg") -> tf.keras.Model:
    """A backbone of three convolutions (TINY_FILTERS), built like Keras' applications (headless, average-pooled):
    for checking that data, jobs and a cluster work end to end in seconds on any CPU (the test boxes' jobs, a
    site's first job). It learns the synthetic demo set's marks; it is no CheXNet, and its AUROC says nothing of
    DenseNet-121's."""
    if include_top or weights is not None or pooling != "avg":
        raise ValueError("tinycnn is headless, average-pooled and has no pretrained weights")
    x = input_tensor
    for i, filters in enumerate(TINY_FILTERS, start=1):
        x = tf.keras.layers.Conv2D(filters, 3, strides=2, padding="same", use_bias=False, name=f"tinycnn_conv{i}")(x)
        x = tf.keras.layers.BatchNormalization(name=f"tinycnn_conv{i}_bn")(x)
        x = tf.keras.layers.Activation("relu", name=f"tinycnn_conv{i}_relu")(x)
    pooled = tf.keras.layers.GlobalAveragePooling2D(name="tinycnn_pool")(x)
    # As Keras' applications do: the model starts where `input_tensor` comes from (the uint8 image Input).
    return tf.keras.Model(tf.keras.utils.get_source_inputs(input_tensor), pooled, name="tinycnn")


BACKBONES: dict[str, Callable[..., tf.keras.Model]] = {
    "densenet121": tf.keras.applications.DenseNet121,
    "resnet50": tf.keras.applications.ResNet50,
    "tinycnn": tiny_cnn,
}
MIN_IMAGE_SIZE = 32  # the backbones downsample by 32 (tinycnn by 8); smaller inputs leave no spatial map to pool
# Frequencies are clipped so that a class with no positives (or no negatives) in a small training set still gets
# a finite, non-zero weight on both sides instead of silently dropping out of the loss.
MIN_FREQUENCY = 1e-3
# Keras' default batch-norm momentum (0.99) lets the moving statistics lag the weights by ~100s of steps, so
# short runs evaluate far worse than they train. 0.9 is PyTorch's default (momentum=0.1), the setting that the
# CheXNet paper and its public re-implementations trained with.
BATCH_NORM_MOMENTUM = 0.9
LOSS_EPSILON = 1e-7  # keeps log() finite for saturated sigmoids, as Keras' own binary cross-entropy does


@tf.keras.utils.register_keras_serializable(package="chexnet")
class ImageNetNormalisation(tf.keras.layers.Layer):
    """uint8 grey [B, S, S, 1] -> [B, S, S, 3] with ImageNet mean and std, in the layer's compute dtype.

    The math is `chexnet.data.decoding.normalise`, called as is, so the model and the host-side function cannot
    drift apart. No weights, no arguments: the base class's config is the whole config."""

    def call(self, images: tf.Tensor) -> tf.Tensor:
        return tf.cast(normalise(images), self.compute_dtype)  # float16 under mixed_float16: what the conv takes

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        return tf.TensorShape(input_shape)[:-1].concatenate([3])


def build_model(name: str = "densenet121", image_size: int = 224, weights: str | Path | None = None) -> tf.keras.Model:
    """uint8 grey [S, S, 1] -> ImageNet normalisation -> the backbone named `name` (global average pooled)
    -> Dense(14, sigmoid) in float32.

    The output layer is float32 even under the `mixed_float16` policy so the loss and AUROC see full precision.
    """
    if name not in BACKBONES:
        raise ValueError(f"--model must be one of {', '.join(sorted(BACKBONES))}; got {name!r}")
    if image_size < MIN_IMAGE_SIZE:
        raise ValueError(f"--image-size must be >= {MIN_IMAGE_SIZE}; got {image_size}")
    if weights is not None and not Path(weights).is_file():  # before the seconds a backbone takes to build
        raise ValueError(f"--weights must name a readable weights file; {weights} does not exist")
    inputs = tf.keras.Input(shape=(image_size, image_size, 1), dtype=tf.uint8, name="image")
    normalised = ImageNetNormalisation(name="imagenet_normalisation")(inputs)
    backbone = BACKBONES[name](include_top=False, weights=None, input_tensor=normalised, pooling="avg")
    for layer in backbone.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            layer.momentum = BATCH_NORM_MOMENTUM
    outputs = tf.keras.layers.Dense(NUM_CLASSES, activation="sigmoid", dtype="float32", name="findings")(
        backbone.output)
    model = tf.keras.Model(inputs, outputs, name=f"chexnet_{name}")
    if weights is not None:
        _load_weights(model, backbone, Path(weights))
    return model


def _load_weights(model: tf.keras.Model, backbone: tf.keras.Model, path: Path) -> None:
    """Whole-model weights if the file matches the whole model, else backbone-only (ImageNet "notop") weights."""
    try:
        model.load_weights(str(path))
    except ValueError:
        # An ImageNet notop file has one layer fewer than the whole model: load it into the backbone alone.
        backbone.load_weights(str(path))


def class_weights(train_labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-class (positive, negative) weights from the training labels, as in the CheXNet paper.

    w+ = |N| / (|P| + |N|) and w- = |P| / (|P| + |N|): the rarer side of each class weighs more.
    """
    labels = np.asarray(train_labels, dtype=np.float64)
    if labels.ndim != 2 or labels.shape[1] != NUM_CLASSES or labels.shape[0] == 0:
        raise ValueError(f"train_labels must have shape (n >= 1, {NUM_CLASSES}); got {labels.shape}")
    positive_frequency = np.clip(labels.mean(axis=0), MIN_FREQUENCY, 1.0 - MIN_FREQUENCY)
    return (1.0 - positive_frequency).astype(np.float32), positive_frequency.astype(np.float32)


Loss = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def weighted_bce(positive_weights: np.ndarray, negative_weights: np.ndarray) -> Loss:
    """A Keras loss: per-class weighted binary cross-entropy, averaged over classes (per example)."""
    w_pos = tf.constant(positive_weights, dtype=tf.float32)
    w_neg = tf.constant(negative_weights, dtype=tf.float32)

    def weighted_binary_crossentropy(y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        y_true = tf.cast(y_true, tf.float32)
        y_pred = tf.cast(y_pred, tf.float32)
        # clip_by_value turns a NaN into a bound, which would hide a diverged model behind a finite loss:
        # keep NaN as NaN so the training's NaN guard sees it.
        y_pred = tf.where(tf.math.is_nan(y_pred), y_pred, tf.clip_by_value(y_pred, LOSS_EPSILON, 1.0 - LOSS_EPSILON))
        per_class = -(w_pos * y_true * tf.math.log(y_pred) + w_neg * (1.0 - y_true) * tf.math.log(1.0 - y_pred))
        return tf.reduce_mean(per_class, axis=-1)

    return weighted_binary_crossentropy
