"""Where the examples are: a TFRecord directory (`python -m chexnet.data.tfrecords`, found by its manifest.json) or a
ChestX-ray14 layout directory of PNG files, and which of a split's files each Horovod rank reads.

The first step of the input pipeline (`chexnet.data.datasets` builds the rest): a split's files are shared out
between the ranks file by file; with fewer files than ranks, every rank reads every file and keeps every size-th
example instead ("element sharding").
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from programkit.data.chestxray14 import IMAGES_DIR, SPLITS, DataError, Index, labels_matrix, load_index
from programkit.data.storage import MANIFEST, PNG, Storage, storage_of
from programkit.labels import CLASSES
from programkit.userfiles import read_bytes

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

TFRECORD, IMAGES = "tfrecord", "images"
ORIGINAL_PNG = Storage(PNG, None, None)
MAX_MANIFEST_BYTES = 16 * 1024 * 1024  # its shards and fingerprints: a few KB
SOURCE_HELP = (f"expected a ChestX-ray14 layout ({IMAGES_DIR}/, Data_Entry_2017.csv, train_val_list.txt, "
               f"test_list.txt) or a TFRecord directory with {MANIFEST} (python -m chexnet.data.tfrecords)")


@dataclass(frozen=True)
class DataSource:
    """Where the examples of each split are: TFRecord shards (with their record counts) or PNG files."""

    kind: str  # TFRECORD or IMAGES
    root: Path
    shards: dict[str, list[tuple[str, int]]] | None = None  # TFRECORD: split -> [(path, records)]
    index: Index | None = None  # IMAGES
    storage: Storage = ORIGINAL_PNG  # how the images are stored (an image directory: original PNGs)
    fingerprints: dict | None = None  # TFRECORD: the image and patient lists' hashes its manifest records

    @property
    def resized(self) -> bool:
        """Whether the images are stored resized (JPEG or raw), to be cropped, rather than as original PNGs."""
        return self.storage.encoding != PNG

    def count(self, split: str) -> int:
        """How many examples the split has (before any corrupt one is dropped while reading)."""
        check_split(split)
        if self.kind == TFRECORD:
            return sum(records for _, records in self.shards[split])
        return len(self.index.split(split))

    def files(self, split: str) -> list[str]:
        """The split's shard files (TFRecord) or image files (layout), in a fixed order."""
        check_split(split)
        if self.kind == TFRECORD:
            return [path for path, _ in self.shards[split]]
        return [str(r.path) for r in self.index.split(split)]


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")


def check_rank(rank: int, size: int) -> None:
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank must be in [0, size) and size at least 1; got rank {rank}, size {size}")


def source_of(data_dir: str | Path, *, skip_bad: bool = False) -> DataSource:
    """A TFRecord directory if `data_dir` has a manifest.json, else a ChestX-ray14 layout directory."""
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(f"data directory {root} does not exist; {SOURCE_HELP}")
    if not any(root.iterdir()):
        raise DataError(f"data directory {root} is empty; {SOURCE_HELP}")
    if (root / MANIFEST).is_file():
        return _tfrecord_source(root)
    return DataSource(kind=IMAGES, root=root, index=load_index(root, skip_bad=skip_bad))


def _tfrecord_source(root: Path) -> DataSource:
    try:
        manifest = json.loads(read_bytes(root / MANIFEST, MAX_MANIFEST_BYTES))
    except (OSError, ValueError) as error:  # not JSON, too large, no longer a regular file
        raise DataError(f"{root / MANIFEST} is not valid JSON ({error}); rerun python -m chexnet.data.tfrecords") \
            from None
    storage = storage_of(manifest, root)
    if manifest.get("classes") != list(CLASSES):
        raise DataError(f"{root / MANIFEST}: classes {manifest.get('classes')}; expected {', '.join(CLASSES)}")
    shards = {split: [(str(root / s["file"]), int(s["records"])) for s in manifest["shards"][split]]
              for split in SPLITS}
    missing = [path for split in SPLITS for path, _ in shards[split] if not Path(path).is_file()]
    if missing:
        raise DataError(f"{root}: {len(missing)} shards named in {MANIFEST} are missing, e.g. {missing[:5]}")
    return DataSource(kind=TFRECORD, root=root, shards=shards, storage=storage,
                      fingerprints=manifest.get("fingerprints"))


def check_fits(source: DataSource, image_size: int, ten_crop: bool = False) -> None:
    """A crop cannot be larger than the stored image, and ten crops need a stored image to crop from."""
    if ten_crop and not source.resized:
        raise DataError(f"ten_crop needs resized records to crop from; {source.root} holds original PNGs: convert "
                        "them with python -m chexnet.data.tfrecords --encoding jpeg --short-side 256")
    if source.resized and source.storage.short_side < image_size:
        raise DataError(f"image_size {image_size} is larger than the short side {source.storage.short_side} of "
                        f"the {source.storage.encoding} records in {source.root}: lower the image size or convert "
                        f"again with --short-side {image_size} or more")


@dataclass(frozen=True)
class RankFiles:
    """One rank's share of a split's files: their paths, what each holds (TFRECORD: its record count; IMAGES: its
    labels) and their positions in the split (how skipped examples are named by file)."""

    paths: list[str]
    payload: list[int] | np.ndarray
    positions: list[int]
    element_sharding: bool  # fewer files than ranks: this rank reads all files and keeps every size-th example


def rank_files(source: DataSource, split: str, rank: int, size: int) -> RankFiles:
    """This rank's files; all of them, with element sharding, if there are fewer files than ranks (reads are then
    repeated on every rank)."""
    check_rank(rank, size)
    if source.kind == TFRECORD:
        files = source.shards[split]
        paths, payload = [p for p, _ in files], [n for _, n in files]
    else:
        records = source.index.split(split)
        paths, payload = [str(r.path) for r in records], labels_matrix(records)
    positions = list(range(len(paths)))
    if len(paths) >= size:
        return RankFiles(paths[rank::size], payload[rank::size], positions[rank::size], False)
    log.warning("%s: %d %s files for %d workers; sharding by element, every worker reads all files",
                split, len(paths), source.kind, size)
    return RankFiles(paths, payload, positions, True)
