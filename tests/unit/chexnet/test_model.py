"""The model: uint8 input normalised in its first layer, output shape and dtype, saving and loading, unknown names,
and the CheXNet weighted binary cross-entropy."""

import numpy as np
import pytest
import tensorflow as tf

from chexnet.data import decoding
from chexnet.model import ImageNetNormalisation, build_model, class_weights, weighted_bce
from programkit.labels import NUM_CLASSES

ALL_LEVELS = np.arange(32 * 32, dtype=np.int64).reshape(1, 32, 32, 1).astype(np.uint8)  # 0..255, four times


@pytest.mark.parametrize("name", ["densenet121", "resnet50", "tinycnn"])
def test_build_model_takes_uint8_grey_and_has_14_float32_sigmoid_outputs(name):
    model = build_model(name, image_size=32)
    assert model.input.dtype == tf.uint8 and tuple(model.input.shape) == (None, 32, 32, 1)
    out = model(np.random.default_rng(0).integers(0, 256, (2, 32, 32, 1), dtype=np.uint8), training=False)
    assert out.shape == (2, NUM_CLASSES) and out.dtype == tf.float32
    assert np.all((out.numpy() > 0) & (out.numpy() < 1))


# Every backbone takes the same first layer and head (build_model): what does not depend on the backbone is tested on
# tinycnn, which builds in a fraction of a second where DenseNet-121 takes seconds (and its save and load 20 s).
def test_the_first_layer_normalises_every_level_as_the_host_function_does():
    model = build_model("tinycnn", image_size=32)
    layer = model.layers[1]
    assert isinstance(layer, ImageNetNormalisation) and not layer.weights
    found = tf.keras.Model(model.input, layer.output)(ALL_LEVELS).numpy()
    np.testing.assert_array_equal(found, decoding.normalise(ALL_LEVELS).numpy())
    expected = (ALL_LEVELS[0, ..., 0, None] / 255.0 - decoding.IMAGENET_MEAN) / decoding.IMAGENET_STD
    np.testing.assert_allclose(found[0], expected, rtol=1e-6, atol=1e-6)  # ImageNet's mean and std, per channel
    assert found.shape == (1, 32, 32, 3) and found.dtype == np.float32


def test_output_stays_float32_under_mixed_precision():
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = build_model("tinycnn", image_size=32)
        assert model.output.dtype == tf.float32
        assert model.get_layer("imagenet_normalisation").output.dtype == tf.float16  # what the first conv takes
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


def test_a_saved_model_reloads_with_its_normalisation(tmp_path):
    model = build_model("tinycnn", image_size=32)
    path = tmp_path / "chexnet.keras"
    model.save(path)
    loaded = tf.keras.models.load_model(path, compile=False)  # no custom_objects: the layer is registered
    assert isinstance(loaded.get_layer("imagenet_normalisation"), ImageNetNormalisation)
    np.testing.assert_array_equal(loaded(ALL_LEVELS, training=False).numpy(), model(ALL_LEVELS, training=False).numpy())


def test_unknown_model_names_the_flag_and_the_choices():
    with pytest.raises(ValueError, match=r"--model must be one of densenet121, resnet50, tinycnn; got 'vgg16'"):
        build_model("vgg16", image_size=64)


def test_tinycnn_is_small_and_its_last_feature_maps_are_named_for_grad_cam():
    """Three convolutions, tens of thousands of weights (DenseNet-121 has about 7 million): what the test boxes'
    jobs train in seconds. Notebook 03's Grad-CAM takes its last feature maps by name."""
    from chexnet.model import TINY_LAST_CONV

    model = build_model("tinycnn", image_size=64)
    assert 10_000 < model.count_params() < 50_000, model.count_params()
    assert tuple(model.get_layer(TINY_LAST_CONV).output.shape) == (None, 8, 8, 64)
    with pytest.raises(ValueError, match="no pretrained weights"):
        from chexnet.model import tiny_cnn
        tiny_cnn(weights="imagenet", input_tensor=tf.keras.Input((32, 32, 3)))


def test_missing_weights_file_names_the_flag(tmp_path):
    with pytest.raises(ValueError, match="--weights"):
        build_model("densenet121", image_size=32, weights=tmp_path / "nope.h5")  # at once, before building it


def test_whole_model_weights_round_trip(tmp_path):
    first = build_model("tinycnn", image_size=32)
    path = tmp_path / "w.h5"
    first.save_weights(str(path))
    second = build_model("tinycnn", image_size=32, weights=path)
    for a, b in zip(first.get_weights(), second.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_class_weights_favour_the_rare_side():
    labels = np.zeros((10, NUM_CLASSES), dtype=np.float32)
    labels[:2, 0] = 1  # 20 % positives
    labels[:, 1] = 1  # all positive: clipped, still finite on both sides
    w_pos, w_neg = class_weights(labels)
    assert w_pos[0] == pytest.approx(0.8) and w_neg[0] == pytest.approx(0.2)
    assert 0 < w_pos[1] < 0.01 and 0.99 < w_neg[1] < 1
    assert 0.99 < w_pos[2] < 1 and 0 < w_neg[2] < 0.01  # no positives at all
    with pytest.raises(ValueError, match="train_labels must have shape"):
        class_weights(np.zeros((3, 5)))


def test_weighted_bce_matches_the_formula():
    rng = np.random.default_rng(0)
    y_true = (rng.random((8, NUM_CLASSES)) < 0.3).astype(np.float32)
    y_pred = rng.uniform(0.05, 0.95, (8, NUM_CLASSES)).astype(np.float32)
    w_pos, w_neg = rng.random(NUM_CLASSES).astype(np.float32), rng.random(NUM_CLASSES).astype(np.float32)
    got = weighted_bce(w_pos, w_neg)(tf.constant(y_true), tf.constant(y_pred)).numpy()
    expected = -(w_pos * y_true * np.log(y_pred) + w_neg * (1 - y_true) * np.log(1 - y_pred)).mean(axis=1)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_weighted_bce_with_unit_weights_is_keras_bce_and_stays_finite():
    y_true = tf.constant([[1.0] * 7 + [0.0] * 7])
    y_pred = tf.constant([[0.9] * 7 + [0.2] * 7])
    ones = np.ones(NUM_CLASSES, dtype=np.float32)
    ours = weighted_bce(ones, ones)(y_true, y_pred).numpy()
    keras = tf.keras.losses.binary_crossentropy(y_true, y_pred).numpy()
    np.testing.assert_allclose(ours, keras, rtol=1e-5)
    saturated = weighted_bce(ones, ones)(y_true, tf.constant([[0.0] * 7 + [1.0] * 7])).numpy()
    assert np.all(np.isfinite(saturated)) and saturated[0] > 10  # confidently wrong costs a lot, but no inf


def test_weighted_bce_ranks_a_good_prediction_below_a_bad_one():
    labels = np.zeros((4, NUM_CLASSES), dtype=np.float32)
    labels[0, :] = 1
    loss = weighted_bce(*class_weights(labels))
    good = loss(tf.constant(labels), tf.constant(np.clip(labels, 0.1, 0.9))).numpy().mean()
    bad = loss(tf.constant(labels), tf.constant(np.clip(1 - labels, 0.1, 0.9))).numpy().mean()
    assert good < bad


def test_weighted_bce_lets_a_nan_prediction_through():
    # Clipping alone maps NaN to a bound and hides a diverged model behind a finite loss.
    ones = np.ones(NUM_CLASSES, dtype=np.float32)
    y_pred = np.full((2, NUM_CLASSES), 0.5, np.float32)
    y_pred[1, 3] = np.nan
    loss = weighted_bce(ones, ones)(tf.zeros((2, NUM_CLASSES)), tf.constant(y_pred)).numpy()
    assert np.isfinite(loss[0]) and np.isnan(loss[1])


def test_imagenet_style_notop_weights_load_into_the_backbone(tmp_path):
    # What a local ImageNet "notop" file holds: the bare application, without our 14-class head.
    notop = tf.keras.applications.DenseNet121(include_top=False, weights=None, input_shape=(32, 32, 3),
                                              pooling="avg")
    path = tmp_path / "densenet121_notop.h5"
    notop.save_weights(str(path))
    model = build_model("densenet121", image_size=32, weights=path)
    backbone_weights = model.get_weights()[:-2]  # all but the head's kernel and bias
    for ours, theirs in zip(backbone_weights, notop.get_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)
