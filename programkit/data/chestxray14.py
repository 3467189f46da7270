"""The ChestX-ray14 layout on disk: which images exist, what they show, and which split each belongs to.

    DATA_DIR/images/00000001_000.png ...
    DATA_DIR/Data_Entry_2017.csv      "Image Index", "Finding Labels" ("Effusion|Mass", "No Finding"), "Patient ID"...
    DATA_DIR/train_val_list.txt       one image file name per line (the official split is by patient)
    DATA_DIR/test_list.txt

`load_index` reads all of it into `Record`s and carves a validation split out of train_val, by patient, so that
no patient's images are seen both in training and in evaluation. Nothing here touches TensorFlow.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from programkit.labels import CLASSES, NO_FINDING, NUM_CLASSES, UnknownLabel, encode

log = logging.getLogger(__name__)

IMAGES_DIR = "images"
CSV_NAME = "Data_Entry_2017.csv"
TRAIN_VAL_LIST = "train_val_list.txt"
TEST_LIST = "test_list.txt"
IMAGE_COLUMN = "Image Index"
LABELS_COLUMN = "Finding Labels"
PATIENT_COLUMN = "Patient ID"
REQUIRED_COLUMNS = (IMAGE_COLUMN, LABELS_COLUMN, PATIENT_COLUMN)
SPLITS = ("train", "val", "test")
MAX_EXAMPLES = 5  # how many offending rows an error message names

T = TypeVar("T")


class DataError(ValueError):
    """The data directory is missing, incomplete or inconsistent; the message says what and where."""


@dataclass(frozen=True)
class Record:
    """One image: its file, its patient and its 14 labels (float32 zeros and ones, in `CLASSES` order)."""

    image_id: str
    patient_id: str
    labels: np.ndarray = field(compare=False, repr=False)
    path: Path = field(compare=False)


@dataclass(frozen=True)
class Index:
    """The three splits of a data directory, and how many bad records `skip_bad=True` left out."""

    train: list[Record]
    val: list[Record]
    test: list[Record]
    skipped: int = 0

    def split(self, name: str) -> list[Record]:
        if name not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {name!r}")
        return getattr(self, name)


class _Problems:
    """Bad rows grouped by kind, so that one error (or warning) reports them all with a few examples each."""

    def __init__(self) -> None:
        self._kinds: dict[str, tuple[str, list[str], str]] = {}
        self._counts: dict[str, int] = {}

    def add(self, kind: str, where: str, example: str, hint: str = "") -> None:
        _, examples, _ = self._kinds.setdefault(kind, (where, [], hint))
        self._counts[kind] = self._counts.get(kind, 0) + 1
        if len(examples) < MAX_EXAMPLES:
            examples.append(example)

    @property
    def total(self) -> int:
        return sum(self._counts.values())

    def __str__(self) -> str:
        lines = []
        for kind, (where, examples, hint) in self._kinds.items():
            line = f"{where}: {self._counts[kind]} {kind}, e.g. {'; '.join(examples)}"
            lines.append(line + (f"; {hint}" if hint else ""))
        return "\n".join(lines)


def load_index(data_dir: str | Path, *, val_fraction: float = 0.1, seed: int = 0, skip_bad: bool = False) -> Index:
    """Read a ChestX-ray14 layout directory; raise `DataError` on bad rows unless `skip_bad` (then warn and drop)."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1); got {val_fraction}")
    root = _check_layout(Path(data_dir))
    problems = _Problems()
    records, rejected = _read_csv(root, problems)
    train_val_ids = _read_list(root / TRAIN_VAL_LIST)
    test_ids = _read_list(root / TEST_LIST)
    train_val = _select(records, rejected, train_val_ids, TRAIN_VAL_LIST, problems)
    test = _select(records, rejected, test_ids, TEST_LIST, problems)
    train_val = _drop_patients_in_both(train_val, test, problems)
    if problems.total:
        if not skip_bad:
            raise DataError(f"{root}: bad records (pass skip_bad=True / --skip-bad to leave them out)\n{problems}")
        log.warning("%s: leaving out %d bad records\n%s", root, problems.total, problems)
    train, val = split_by_patient(train_val, val_fraction, seed)
    if not train:
        raise DataError(f"{root}: no usable training images in {TRAIN_VAL_LIST}")
    return Index(train=train, val=val, test=test, skipped=problems.total)


def _check_layout(root: Path) -> Path:
    expected = f"expected {IMAGES_DIR}/, {CSV_NAME}, {TRAIN_VAL_LIST} and {TEST_LIST}"
    if not root.is_dir():
        raise DataError(f"data directory {root} does not exist; {expected}")
    missing = [name for name in (IMAGES_DIR, CSV_NAME, TRAIN_VAL_LIST, TEST_LIST) if not (root / name).exists()]
    if missing:
        raise DataError(f"{root}: missing {', '.join(missing)}; {expected}")
    return root


def _read_csv(root: Path, problems: _Problems) -> tuple[dict[str, Record], set[str]]:
    """Good rows of Data_Entry_2017.csv by image id, and the ids of bad rows (reported to `problems`).

    Row numbers in messages are the file's line numbers (the header is line 1), as an editor shows them.
    """
    on_disk = {entry.name for entry in os.scandir(root / IMAGES_DIR)}  # one listing, not 112k stat calls
    records: dict[str, Record] = {}
    rejected: set[str] = set()
    with open(root / CSV_NAME, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames:
            raise DataError(f"{root / CSV_NAME} is empty; expected a header with {', '.join(REQUIRED_COLUMNS)}")
        absent = [c for c in REQUIRED_COLUMNS if c not in reader.fieldnames]
        if absent:
            raise DataError(f"{root / CSV_NAME}: missing columns {', '.join(absent)}; "
                            f"it has {', '.join(c for c in reader.fieldnames if c)}")
        for row in reader:
            record = _parse_row(row, reader.line_num, root, on_disk, problems)
            if record is None:
                rejected.add((row.get(IMAGE_COLUMN) or "").strip())
                continue
            if record.image_id in records:
                problems.add("duplicate rows", CSV_NAME, f"row {reader.line_num}: {record.image_id!r}")
                continue
            records[record.image_id] = record
    if not records and not problems.total:
        raise DataError(f"{root / CSV_NAME} has a header but no rows")
    return records, rejected


def _parse_row(row: dict, line: int, root: Path, on_disk: set[str], problems: _Problems) -> Record | None:
    values = [(row.get(c) or "").strip() for c in REQUIRED_COLUMNS]
    if not all(values):
        empty = [c for c, v in zip(REQUIRED_COLUMNS, values, strict=True) if not v]
        problems.add("malformed rows", CSV_NAME, f"row {line}: empty {', '.join(empty)}")
        return None
    image_id, finding_labels, patient_id = values
    try:
        labels = encode(finding_labels)
    except UnknownLabel:
        problems.add("rows with unknown labels", CSV_NAME, f"row {line}: {finding_labels!r}",
                     hint=f"allowed: {', '.join(CLASSES)}, joined by '|', or {NO_FINDING!r}")
        return None
    if image_id not in on_disk:
        problems.add("rows whose image file is missing", CSV_NAME, f"row {line}: {IMAGES_DIR}/{image_id}")
        return None
    return Record(image_id=image_id, patient_id=patient_id, labels=labels, path=root / IMAGES_DIR / image_id)


def _read_list(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def _select(records: dict[str, Record], rejected: set[str], image_ids: list[str], list_name: str,
            problems: _Problems) -> list[Record]:
    selected = []
    for number, image_id in enumerate(image_ids, start=1):
        record = records.get(image_id)
        if record is not None:
            selected.append(record)
        elif image_id not in rejected:  # a bad CSV row is reported once, not again for its list
            problems.add(f"images not in {CSV_NAME}", list_name, f"line {number}: {image_id!r}")
    return selected


def _drop_patients_in_both(train_val: list[Record], test: list[Record], problems: _Problems) -> list[Record]:
    test_patients = {r.patient_id for r in test}
    kept = []
    for record in train_val:
        if record.patient_id in test_patients:
            problems.add(f"images of patients who are also in {TEST_LIST}", TRAIN_VAL_LIST,
                         f"{record.image_id!r} (patient {record.patient_id})")
        else:
            kept.append(record)
    return kept


def split_by_patient(records: list[Record], val_fraction: float, seed: int) -> tuple[list[Record], list[Record]]:
    """Move `val_fraction` of the patients (not images) to validation; the same seed gives the same split."""
    patients = sorted({r.patient_id for r in records})
    n_val = math.ceil(val_fraction * len(patients)) if len(patients) > 1 else 0
    chosen = set(np.random.default_rng(seed).permutation(patients)[:n_val].tolist())
    train = [r for r in records if r.patient_id not in chosen]
    val = [r for r in records if r.patient_id in chosen]
    return train, val


def labels_matrix(records: list[Record]) -> np.ndarray:
    """The labels of `records` as a float32 [n, 14] array."""
    return np.stack([r.labels for r in records]) if records else np.zeros((0, NUM_CLASSES), np.float32)


def progress(items: Iterable[T], total: int, what: str) -> Iterator[T]:
    """Yield `items`, drawing a one-line progress bar on stderr (tqdm is not a dependency)."""
    width, started, last = 30, time.monotonic(), 0.0
    for done, item in enumerate(items, start=1):
        yield item
        now = time.monotonic()
        if now - last >= 0.2 or done == total:  # redraw at most 5 times a second
            last = now
            filled = width * done // max(total, 1)
            rate = done / max(now - started, 1e-9)
            sys.stderr.write(f"\r{what} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {rate:.0f}/s")
            sys.stderr.flush()
    if total:
        sys.stderr.write("\n")
