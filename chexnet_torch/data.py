"""The same data as chexnet.train, read without TensorFlow: a ChestX-ray14 layout of PNGs, or the project's
TFRecord directories (python -m chexnet.data.tfrecords: jpeg, raw or png images in tf.train.Example records).

A TFRecord shard is indexed once (each record's offset and length, from its framing: length, its CRC, the data, its
CRC), so a worker reads one record at a time; the Example is decoded by a small protobuf reader (`parse_example`:
the five features the converter writes). Images are grey, resized so that the short side is the image size, then
cropped square (random crop and flip for training, centre crop otherwise), repeated to 3 channels and normalised
as ImageNet's backbones expect.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from programkit.data.chestxray14 import DataError, labels_matrix
from programkit.data.sources import IMAGES, DataSource
from programkit.data.storage import JPEG, PNG, RAW
from programkit.labels import NUM_CLASSES

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)
MAX_RECORD_BYTES = 64 * 2**20  # one image: a ChestX-ray14 PNG is about 1 MB


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise DataError("a record's protobuf has a varint longer than 10 bytes")


def _fields(data: bytes):
    """(field number, wire type, value) of a protobuf message: bytes for length-delimited fields, ints otherwise."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        else:
            raise DataError(f"a record's protobuf has wire type {wire}, which tf.train.Example never uses")
        yield number, wire, value


def parse_example(data: bytes) -> dict[str, list]:
    """A tf.train.Example's features: name -> its values (bytes, floats or ints)."""
    found: dict[str, list] = {}
    for number, _, features in _fields(data):
        if number != 1:
            continue
        for entry_number, _, entry in _fields(features):  # Features.feature: map<string, Feature> entries
            if entry_number != 1:
                continue
            name, feature = "", b""
            for field, _, value in _fields(entry):
                if field == 1:
                    name = value.decode()
                elif field == 2:
                    feature = value
            for kind, _, values in _fields(feature):  # 1 bytes_list, 2 float_list, 3 int64_list
                items = [v for n, _, v in _fields(values) if n == 1] if kind == 1 else None
                if kind == 2:
                    packed = b"".join(v if isinstance(v, bytes) else b"" for _, _, v in _fields(values))
                    items = list(struct.unpack(f"<{len(packed) // 4}f", packed))
                elif kind == 3:
                    items = []
                    for _, wire, v in _fields(values):
                        if wire == 2:  # packed
                            pos = 0
                            while pos < len(v):
                                number_, pos = _varint(v, pos)
                                items.append(number_)
                        else:
                            items.append(v)
                found[name] = items or []
    return found


def index_shard(path: str) -> list[tuple[int, int]]:
    """Each record's (offset of its data, its length) in a TFRecord file."""
    found = []
    with open(path, "rb") as shard:
        offset = 0
        while header := shard.read(12):
            if len(header) < 12:
                raise DataError(f"{path}: a record's header is cut short at byte {offset}")
            (length,) = struct.unpack("<Q", header[:8])
            if length > MAX_RECORD_BYTES:
                raise DataError(f"{path}: a record of {length} bytes at byte {offset}; not a TFRecord file?")
            found.append((offset + 12, length))
            offset += 12 + length + 4
            shard.seek(offset)
    return found


@dataclass(frozen=True)
class Item:
    """Where one example is: a TFRecord (file, offset, length) or an image file with its labels."""

    path: str
    offset: int = -1
    length: int = 0
    labels: tuple[float, ...] = ()


def items_of(source: DataSource, split: str) -> list[Item]:
    """Every example of `split`, in the split's fixed order."""
    if source.kind == IMAGES:
        records = source.index.split(split)
        rows = labels_matrix(records)
        return [Item(str(r.path), labels=tuple(map(float, row))) for r, row in zip(records, rows, strict=True)]
    return [Item(path, offset, length) for path, _ in source.shards[split] for offset, length in index_shard(path)]


class ChestXrays(Dataset):
    """One split's examples as (float32 [3, S, S] normalised image, float32 [14] labels)."""

    def __init__(self, source: DataSource, split: str, image_size: int, train: bool) -> None:
        self.source, self.items, self.size, self.train = source, items_of(source, split), image_size, train
        self.encoding = PNG if source.kind == IMAGES else source.storage.encoding

    def __len__(self) -> int:
        return len(self.items)

    def _read(self, item: Item) -> tuple[Image.Image, np.ndarray]:
        if item.offset < 0:
            return Image.open(item.path), np.asarray(item.labels, dtype=np.float32)
        with open(item.path, "rb") as shard:
            shard.seek(item.offset)
            example = parse_example(shard.read(item.length))
        image, labels = example["image"][0], np.asarray(example["labels"], dtype=np.float32)
        if labels.shape != (NUM_CLASSES,):
            raise DataError(f"{item.path}: a record with {labels.shape[0]} labels; expected {NUM_CLASSES}")
        if self.encoding == RAW:
            height, width = example["height"][0], example["width"][0]
            return Image.frombytes("L", (width, height), image), labels
        if self.encoding not in (JPEG, PNG):
            raise DataError(f"{item.path}: records of encoding {self.encoding!r}")
        return Image.open(io.BytesIO(image)), labels

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, labels = self._read(self.items[index])
        grey = image.convert("L")
        scale = self.size / min(grey.size)
        grey = grey.resize((max(self.size, round(grey.width * scale)), max(self.size, round(grey.height * scale))),
                           Image.BILINEAR)
        if self.train:
            left = int(torch.randint(0, grey.width - self.size + 1, ()).item())
            top = int(torch.randint(0, grey.height - self.size + 1, ()).item())
        else:
            left, top = (grey.width - self.size) // 2, (grey.height - self.size) // 2
        grey = grey.crop((left, top, left + self.size, top + self.size))
        if self.train and bool(torch.randint(0, 2, ()).item()):
            grey = grey.transpose(Image.FLIP_LEFT_RIGHT)
        pixels = np.asarray(grey, dtype=np.float32)[None] / 255.0
        normalised = (np.repeat(pixels, 3, axis=0) - MEAN) / STD
        return torch.from_numpy(normalised), torch.from_numpy(labels)

    def labels(self) -> np.ndarray:
        """Every example's labels (the class weights' input): read from the records (TFRecords) or the index."""
        if self.source.kind == IMAGES:
            return np.asarray([item.labels for item in self.items], dtype=np.float32).reshape(-1, NUM_CLASSES)
        found = []
        for item in self.items:
            with open(item.path, "rb") as shard:
                shard.seek(item.offset)
                found.append(parse_example(shard.read(item.length))["labels"])
        return np.asarray(found, dtype=np.float32).reshape(-1, NUM_CLASSES)
