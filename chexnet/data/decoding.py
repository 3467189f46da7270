"""Decoding images and preparing them for the model: the decoder (bytes -> uint8 pixels) and the parser (crop, flip),
kept apart as in TensorFlow Model Garden's vision models.

What is decoded depends on how the images are stored (`DataSource.storage`):
- resized JPEG or raw records (the converter's default): CheXNet's preprocessing. Training takes a random
  `image_size` crop of the stored short-side image (for JPEG only the crop window is decoded,
  `tf.io.decode_and_crop_jpeg`) and flips it; evaluation takes the centre crop, or with `ten_crop` the four corner
  crops, the centre crop and their mirror images (the model's 10 predictions are then averaged, as in CheXNet).
- original PNGs (PNG records, or the image directory): the whole image is decoded and resized to `image_size`.

Images stay uint8 grey, one channel, all the way to the model: a uint8 [S, S, 1] crop is 12x fewer bytes to cache,
batch and copy to an accelerator than the float32 [S, S, 3] the backbone takes. The model's first layer
(`chexnet.model.ImageNetNormalisation`) turns it into that with `normalise`, on the device; `normalise` stays
callable here for host-side comparisons (the benchmarks' float32 rows) and for checks of the layer.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from chexnet.data.tfrecords import JPEG, RAW, parse_example
from programkit.data.sources import IMAGES, DataSource

IMAGENET_MEAN = (0.485, 0.456, 0.406)  # DenseNet-121 conventions, applied to the grey image copied to 3 channels
IMAGENET_STD = (0.229, 0.224, 0.225)
TEN_CROPS = 10
CROPS = ("random", "centre", "ten", "whole")  # how a resized record is cut (`resized_decoder`)


# --- the decoder: bytes -> uint8 pixels ---------------------------------------------------------------------------

def decode_resize(encoded: tf.Tensor, size: int) -> tf.Tensor:
    """PNG bytes -> uint8 [size, size, 1]; uint8 so that a cache holds 4x more images than float32 would."""
    image = tf.io.decode_png(encoded, channels=1)  # RGBA or 16-bit files in the real set become 8-bit grey too
    image = tf.image.resize(image, [size, size], method="bilinear")
    return tf.ensure_shape(tf.saturate_cast(tf.round(image), tf.uint8), [size, size, 1])


def random_window(shape: tf.Tensor, size: int) -> tf.Tensor:
    """[top, left, size, size] of a random size x size window inside an image of int32 `shape` [height, width]."""
    top = tf.random.uniform([], 0, shape[0] - size + 1, dtype=tf.int32)
    left = tf.random.uniform([], 0, shape[1] - size + 1, dtype=tf.int32)
    return tf.stack([top, left, size, size])


def centre_window(shape: tf.Tensor, size: int) -> tf.Tensor:
    """[top, left, size, size] of the centred size x size window."""
    return tf.stack([(shape[0] - size) // 2, (shape[1] - size) // 2, size, size])


def decode_stored(stored: tf.Tensor, shape: tf.Tensor, encoding: str) -> tf.Tensor:
    """A resized record's whole image: uint8 [height, width, 1]."""
    if encoding == JPEG:
        return tf.io.decode_jpeg(stored, channels=1)
    return tf.reshape(tf.io.decode_raw(stored, tf.uint8), [shape[0], shape[1], 1])


def decode_window(stored: tf.Tensor, shape: tf.Tensor, window: tf.Tensor, encoding: str) -> tf.Tensor:
    """Only the pixels of `window` ([top, left, height, width]) of a resized record: uint8 [height, width, 1].
    A JPEG decodes just the blocks the window touches, which is most of the speed of resized records."""
    if encoding == JPEG:
        return tf.io.decode_and_crop_jpeg(stored, window, channels=1)
    return crop(decode_stored(stored, shape, RAW), window)


def crop(image: tf.Tensor, window: tf.Tensor) -> tf.Tensor:
    return tf.slice(image, tf.stack([window[0], window[1], 0]), tf.stack([window[2], window[3], -1]))


def ten_crop(image: tf.Tensor, size: int) -> tf.Tensor:
    """[H, W, C] -> [10, size, size, C]: the four corner crops and the centre crop (torchvision's TenCrop order),
    then the same five of the mirrored image."""
    shape = tf.shape(image)[:2]
    bottom, right = shape[0] - size, shape[1] - size
    corners = [(0, 0), (0, right), (bottom, 0), (bottom, right), (bottom // 2, right // 2)]
    crops = tf.stack([image[top:top + size, left:left + size] for top, left in corners])
    return tf.concat([crops, tf.reverse(crops, axis=[2])], axis=0)


def resized_decoder(source: DataSource, size: int, how: str) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """how: "random" (training) or "centre" crop, or "ten" crops [10, size, size, 1], or "whole" (to cache)."""
    if how not in CROPS:
        raise ValueError(f"how must be one of {', '.join(CROPS)}; got {how!r}")
    encoding = source.storage.encoding

    def decode(stored: tf.Tensor, shape: tf.Tensor) -> tf.Tensor:
        if how == "whole":
            return decode_stored(stored, shape, encoding)
        if how == "ten":
            return tf.ensure_shape(ten_crop(decode_stored(stored, shape, encoding), size), [TEN_CROPS, size, size, 1])
        window = random_window(shape, size) if how == "random" else centre_window(shape, size)
        return tf.ensure_shape(decode_window(stored, shape, window, encoding), [size, size, 1])

    return decode


def example_decoder(source: DataSource, decode_image: Callable[..., tf.Tensor]) -> Callable[..., tuple]:
    """`decode_image(encoded)` (original PNGs) or `decode_image(stored, shape)` (resized records) -> a decoder of
    whole examples to (image, labels): a serialized record, parsed first, or a layout's (path, labels)."""
    if source.kind == IMAGES:
        return lambda path, labels: (decode_image(tf.io.read_file(path)), labels)

    def decode(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = parse_example(serialized)
        if source.resized:
            shape = tf.cast(tf.stack([example["height"], example["width"]]), tf.int32)
            return decode_image(example["image"], shape), example["labels"]
        return decode_image(example["image"]), example["labels"]

    return decode


# --- the parser: what the model is fed ------------------------------------------------------------------------------

def augment(image: tf.Tensor) -> tf.Tensor:
    return tf.image.random_flip_left_right(image)


def random_crop_flip(image: tf.Tensor, labels: tf.Tensor, size: int) -> tuple:
    """A cached whole image -> a random size x size crop, flipped half the time."""
    window = random_window(tf.shape(image)[:2], size)
    return augment(tf.ensure_shape(crop(image, window), [size, size, 1])), labels


def augmented(image: tf.Tensor, labels: tf.Tensor) -> tuple:
    return augment(image), labels


# --- what the model's first layer does (chexnet.model.ImageNetNormalisation), kept callable on the host ------------

def normalisation_table() -> tf.Tensor:
    """float32 [256, 3]: what each uint8 grey level becomes, (level / 255 - mean) / std per ImageNet channel."""
    levels = tf.range(256, dtype=tf.float32)[:, None] / 255.0
    return (levels - IMAGENET_MEAN) / IMAGENET_STD


def normalise(image: tf.Tensor) -> tf.Tensor:
    """uint8 grey [..., S, S, 1] -> float32 [..., S, S, 3] with ImageNet mean and std (one image or a batch).

    The one definition of the model's input normalisation: the model's first layer calls this very function.
    A uint8 has 256 values, so each is looked up in `normalisation_table`: one gather that writes each output value
    once (on a CPU, arithmetic on the pixels took twice as long)."""
    return tf.gather(normalisation_table(), tf.cast(tf.squeeze(image, axis=-1), tf.int32))


def normalised(images: tf.Tensor, labels: tf.Tensor) -> tuple:
    """`normalise` as a map over (images, labels): the host-side float32 pipeline that comparisons measure."""
    return normalise(images), labels
