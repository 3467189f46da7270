"""CheXNet's crops: a random window inside the image, the centre window, ten crops, and their predictions averaged."""

import numpy as np
import tensorflow as tf

from chexnet.data.decoding import centre_window, crop, decode_window, random_window, ten_crop
from chexnet.evaluate import average_over_crops

SIZE = 24


def _image(height: int = 30, width: int = 40) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (height, width, 1), dtype=np.uint8)


def test_random_windows_stay_inside_and_reach_every_edge():
    shape = tf.constant([30, 40])
    windows = np.array([random_window(shape, SIZE).numpy() for _ in range(400)])
    assert (windows[:, 2:] == SIZE).all()
    assert windows[:, 0].min() == 0 and windows[:, 0].max() == 30 - SIZE
    assert windows[:, 1].min() == 0 and windows[:, 1].max() == 40 - SIZE


def test_centre_window_and_crop():
    image = _image()
    window = centre_window(tf.constant([30, 40]), SIZE).numpy()
    assert window.tolist() == [3, 8, SIZE, SIZE]
    np.testing.assert_array_equal(crop(tf.constant(image), window).numpy(), image[3:27, 8:32])


def test_decoding_a_jpeg_window_gives_the_window_of_the_whole_decode():
    jpeg = tf.io.encode_jpeg(tf.constant(_image()), quality=95)
    whole = tf.io.decode_jpeg(jpeg, channels=1).numpy()
    for top, left in [(0, 0), (6, 16), (3, 5)]:
        window = tf.constant([top, left, SIZE, SIZE])
        part = decode_window(jpeg, tf.constant([30, 40]), window, "jpeg").numpy()
        np.testing.assert_array_equal(part, whole[top:top + SIZE, left:left + SIZE])
    raw = tf.constant(_image().tobytes())
    np.testing.assert_array_equal(decode_window(raw, tf.constant([30, 40]), tf.constant([6, 16, SIZE, SIZE]),
                                                "raw").numpy(), _image()[6:30, 16:40])


def test_ten_crop_is_corners_centre_and_their_mirror_images():
    image = _image()
    crops = ten_crop(tf.constant(image), SIZE).numpy()
    assert crops.shape == (10, SIZE, SIZE, 1)
    expected = [image[:24, :24], image[:24, 16:], image[6:, :24], image[6:, 16:], image[3:27, 8:32]]
    for k, part in enumerate(expected):
        np.testing.assert_array_equal(crops[k], part)
        np.testing.assert_array_equal(crops[k + 5], part[:, ::-1])


def test_the_ten_predictions_of_an_image_are_averaged():
    images = tf.random.uniform([3, 10, 8, 8, 3], seed=1)

    def predict(batch):  # a "model" with 2 outputs: each crop's mean pixel and its top-left pixel
        return tf.stack([tf.reduce_mean(batch, axis=[1, 2, 3]), batch[:, 0, 0, 0]], axis=1)

    scores = average_over_crops(predict, images).numpy()
    assert scores.shape == (3, 2)
    np.testing.assert_allclose(scores[:, 0], tf.reduce_mean(images, axis=[1, 2, 3, 4]).numpy(), rtol=1e-5)
    np.testing.assert_allclose(scores[:, 1], tf.reduce_mean(images[:, :, 0, 0, 0], axis=1).numpy(), rtol=1e-5)
