"""How the project's TFRecord directories are stored (written by chexnet.data.tfrecords): the manifest's name,
formats and encodings, and `Storage` read from a manifest. No TensorFlow: every training program reads this (the
PyTorch one too), and programkit.data.sources, which finds a run's files, builds on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from programkit.data.chestxray14 import DataError

MANIFEST = "manifest.json"
FORMAT = "chexnet-tfrecord-2"  # what chexnet.data.tfrecords writes: any encoding, named in the manifest
FORMAT_PNG_ONLY = "chexnet-tfrecord-1"  # the first format (original PNGs, no encoding field); still read
FORMATS = (FORMAT, FORMAT_PNG_ONLY)
JPEG, RAW, PNG = "jpeg", "raw", "png"
ENCODINGS = (JPEG, RAW, PNG)
DEFAULT_SHARDS = 16
DEFAULT_SHORT_SIDE = 256  # CheXNet's recipe: resize to 256, crop 224
DEFAULT_QUALITY = 95
DEFAULT_SEED = 0  # train records are written in a shuffled order, so that any one shard mixes patients
CHUNK = 8  # images handed to a worker process at a time: few enough to keep shards streaming


@dataclass(frozen=True)
class Storage:
    """How the images of a TFRecord directory are stored: what a reader must know to decode them."""

    encoding: str = JPEG
    short_side: int | None = DEFAULT_SHORT_SIDE  # None: the original size (png)
    quality: int | None = DEFAULT_QUALITY  # JPEG only

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}; got {self.encoding!r}")
        if self.encoding != PNG and (self.short_side is None or self.short_side < 1):
            raise ValueError(f"short_side must be at least 1 for encoding {self.encoding}; got {self.short_side}")
        if self.encoding == JPEG and not (self.quality is not None and 1 <= self.quality <= 100):
            raise ValueError(f"quality must be in 1..100 for encoding jpeg; got {self.quality}")

    @classmethod
    def of(cls, encoding: str = JPEG, short_side: int = DEFAULT_SHORT_SIDE,
           quality: int = DEFAULT_QUALITY) -> Storage:
        """The options as the command line gives them; those that do not apply to the encoding become None."""
        return cls(encoding, None if encoding == PNG else short_side, quality if encoding == JPEG else None)


def storage_of(manifest: dict, root: Path) -> Storage:
    """The storage a manifest describes; DataError naming the directory and what it holds if it is not readable."""
    found = manifest.get("format")
    if found == FORMAT_PNG_ONLY:
        return Storage(PNG, None, None)
    encoding = manifest.get("encoding")
    if found != FORMAT or encoding not in ENCODINGS:
        raise DataError(f"{root} holds TFRecords of format {found!r} with encoding {encoding!r} ({root / MANIFEST}); "
                        f"this reader knows formats {', '.join(FORMATS)} with encodings {', '.join(ENCODINGS)}: "
                        "convert the data again with this version (python -m chexnet.data.tfrecords)")
    try:
        return Storage(encoding, manifest.get("short_side"), manifest.get("quality"))
    except ValueError as error:
        raise DataError(f"{root / MANIFEST}: {error}") from None


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"
