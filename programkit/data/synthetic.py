"""Synthetic ChestX-ray14: the real layout and label statistics, with a signal a network can learn in minutes.

    python -m programkit.data.synthetic --out D --images N --size S [--seed K] [--patients P]

Every image is a smooth dark "chest" with noise and a random global brightness and contrast. Each pathology
present stamps a bright mark at its own cell of a 4x4 grid. The marks have 14 different shapes, each symmetric
left to right, because training flips images horizontally: a flip moves a mark to the mirrored cell, where another
class lives, so position alone would become ambiguous, while the shape still names the class.

Labels follow the real set's frequencies (No Finding about half the images, Infiltration the most common finding,
Hernia rare) with multi-label rows; several images per patient; about a fifth of the patients in test_list.txt.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image

from programkit.data.chestxray14 import CSV_NAME, IMAGES_DIR, TEST_LIST, TRAIN_VAL_LIST, progress
from programkit.labels import NUM_CLASSES, decode

DEFAULT_SIZE = 1024  # the real set's resolution
IMAGES_PER_PATIENT = 3  # the real set has 112,120 images of 30,805 patients
TEST_PATIENT_FRACTION = 0.2
NO_FINDING_RATE = 0.5
# Per-image prevalence in the real set (Wang et al. 2017), Hernia raised from 0.2 % so that small sets have some.
PREVALENCE = np.array([
    0.103, 0.025, 0.119, 0.177, 0.052, 0.056, 0.013, 0.047, 0.042, 0.021, 0.022, 0.015, 0.030, 0.005,
])
MIN_POSITIVES = 5  # every class appears at least this often once a set has MIN_POSITIVES_FROM images
MIN_POSITIVES_FROM = 200
GRID = 4  # marks sit on a GRID x GRID lattice of cells; class k uses cell k
MARK_RADIUS = 0.1  # of the image size
MARK_BRIGHTNESS = 110.0
NOISE_SIGMA = 8.0
PNG_COMPRESS_LEVEL = 1  # noise does not compress anyway; level 1 writes 3x faster than the default 6
CSV_HEADER = [  # the real file's header, brackets and trailing comma included, so readers meet what they will meet
    "Image Index", "Finding Labels", "Follow-up #", "Patient ID", "Patient Age", "Patient Gender",
    "View Position", "OriginalImage[Width", "Height]", "OriginalImagePixelSpacing[x", "y]", "",
]


def _shape_masks(n: int) -> list[np.ndarray]:
    """14 boolean n x n marks, all left-right symmetric and different from each other."""
    steps = (2.0 * np.arange(n) - (n - 1)) / (n - 1)  # exactly symmetric about 0, unlike linspace's rounding
    v, u = np.meshgrid(steps, steps, indexing="ij")
    r, box, au, av = np.hypot(u, v), np.maximum(abs(u), abs(v)), abs(u), abs(v)
    return [
        r <= 1.0,                                           # disc
        (r <= 1.0) & (r >= 0.55),                           # ring
        box <= 0.8,                                         # square
        (box <= 0.95) & (box >= 0.55),                      # hollow square
        (box <= 1.0) & ((au <= 0.3) | (av <= 0.3)),         # plus
        (box <= 1.0) & (abs(au - av) <= 0.3),               # X
        au + av <= 1.0,                                     # diamond
        (au <= 1.0) & (av <= 0.35),                         # horizontal bar
        (au <= 0.35) & (av <= 1.0),                         # vertical bar
        (av <= 0.9) & (au <= (v + 1.0) / 2.0),              # triangle, point up
        (av <= 0.9) & (au <= (1.0 - v) / 2.0),              # triangle, point down
        (box <= 1.0) & (np.floor((v + 1.0) * 2.0) % 2 == 0),  # horizontal stripes
        np.hypot(au - 0.55, v) <= 0.42,                     # two dots side by side
        np.hypot(u, av - 0.55) <= 0.42,                     # two dots one above the other
    ]


@lru_cache(maxsize=4)
def _canvas(size: int) -> tuple[np.ndarray, list[tuple[slice, slice, np.ndarray]]]:
    """The smooth background and where each class's mark goes, computed once per image size."""
    y, x = np.mgrid[0:size, 0:size] / size
    lungs = sum(np.exp(-(((x - cx) / 0.18) ** 2 + ((y - 0.5) / 0.3) ** 2)) for cx in (0.3, 0.7))
    background = 70.0 + 25.0 * y - 35.0 * lungs  # brighter towards the abdomen, darker lungs
    n = max(3, round(2 * MARK_RADIUS * size))
    cell = size / GRID
    stamps = []
    for k, mask in enumerate(_shape_masks(n)):
        top = int((k // GRID + 0.5) * cell - n / 2)
        left = int((k % GRID + 0.5) * cell - n / 2)
        stamps.append((slice(top, top + n), slice(left, left + n), mask))
    return background.astype(np.float32), stamps


def render(labels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """One size x size uint8 image showing the marks of the classes set in `labels`."""
    background, stamps = _canvas(size)
    image = background * rng.uniform(0.85, 1.15) + rng.uniform(-15.0, 15.0)
    for k in np.flatnonzero(labels):
        rows, cols, mask = stamps[k]
        image[rows, cols] += MARK_BRIGHTNESS * mask
    image += rng.standard_normal((size, size), dtype=np.float32) * NOISE_SIGMA
    return np.clip(image, 0, 255).astype(np.uint8)


def sample_labels(n: int, rng: np.random.Generator) -> np.ndarray:
    """[n, 14] zeros and ones: about half "No Finding", otherwise one main finding plus co-occurring ones."""
    labels = np.zeros((n, NUM_CLASSES), np.float32)
    sick = rng.random(n) >= NO_FINDING_RATE
    main = rng.choice(NUM_CLASSES, size=n, p=PREVALENCE / PREVALENCE.sum())
    extra = rng.random((n, NUM_CLASSES)) < PREVALENCE
    labels[sick] = extra[sick]
    labels[np.flatnonzero(sick), main[sick]] = 1.0
    if n >= MIN_POSITIVES_FROM:
        for k in range(NUM_CLASSES):
            short = MIN_POSITIVES - int(labels[:, k].sum())
            if short > 0:
                labels[rng.choice(np.flatnonzero(labels[:, k] == 0), short, replace=False), k] = 1.0
    return labels


def assign_patients(n: int, patients: int, rng: np.random.Generator) -> np.ndarray:
    """Patient number (1-based) of each of n images: every patient has one image, the rest spread unevenly."""
    patients = max(1, min(patients, n))
    extra = rng.choice(patients, size=n - patients, p=_skewed(patients, rng))
    return np.sort(np.concatenate([np.arange(patients), extra])) + 1


def _skewed(patients: int, rng: np.random.Generator) -> np.ndarray:
    weights = rng.gamma(0.5, size=patients) + 1e-6  # a few patients with many follow-ups, as in the real set
    return weights / weights.sum()


def _write_png(job: tuple[Path, np.ndarray, int, int, int]) -> None:
    path, labels, size, seed, index = job
    image = render(labels, size, np.random.default_rng([seed, index]))  # per image: same pixels in any process
    Image.fromarray(image, mode="L").save(path, format="PNG", compress_level=PNG_COMPRESS_LEVEL)


def write_synthetic(out: str | Path, images: int, size: int = DEFAULT_SIZE, seed: int = 0,
                    patients: int | None = None, workers: int | None = None) -> Path:
    """Write a ChestX-ray14 layout directory with `images` synthetic size x size PNGs; return its path."""
    if images < 2:
        raise ValueError(f"images must be at least 2 (one for train_val, one for test); got {images}")
    if size < 16:
        raise ValueError(f"size must be at least 16 pixels; got {size}")
    out = Path(out)
    (out / IMAGES_DIR).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    labels = sample_labels(images, rng)
    patient_of = assign_patients(images, patients or max(2, images // IMAGES_PER_PATIENT), rng)
    image_ids = _image_ids(patient_of)
    _write_images(out, image_ids, labels, size, seed, workers)
    _write_csv(out / CSV_NAME, image_ids, patient_of, labels, rng)
    _write_split(out, image_ids, patient_of, rng)
    return out


def _image_ids(patient_of: np.ndarray) -> list[str]:
    follow_up: dict[int, int] = {}
    ids = []
    for patient in patient_of.tolist():
        ids.append(f"{patient:08d}_{follow_up.get(patient, 0):03d}.png")
        follow_up[patient] = follow_up.get(patient, 0) + 1
    return ids


def _write_images(out: Path, image_ids: list[str], labels: np.ndarray, size: int, seed: int,
                  workers: int | None) -> None:
    jobs = [(out / IMAGES_DIR / image_id, labels[i], size, seed, i) for i, image_id in enumerate(image_ids)]
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(jobs) * size * size < 2**22:  # small sets: starting processes costs more than it saves
        for _ in progress(map(_write_png, jobs), len(jobs), "images"):
            pass
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for _ in progress(pool.map(_write_png, jobs, chunksize=16), len(jobs), "images"):
            pass


def _write_csv(path: Path, image_ids: list[str], patient_of: np.ndarray, labels: np.ndarray,
               rng: np.random.Generator) -> None:
    ages = rng.integers(1, 95, size=len(image_ids))
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_HEADER)
        for i, image_id in enumerate(image_ids):
            follow_up = int(image_id[9:12])
            writer.writerow([image_id, decode(labels[i]), follow_up, int(patient_of[i]), int(ages[i]),
                             rng.choice(["M", "F"]), rng.choice(["PA", "AP"]), 2500, 2048, 0.143, 0.143, ""])


def _write_split(out: Path, image_ids: list[str], patient_of: np.ndarray, rng: np.random.Generator) -> None:
    patients = np.unique(patient_of)
    n_test = min(len(patients) - 1, max(1, round(TEST_PATIENT_FRACTION * len(patients))))
    test_patients = set(rng.permutation(patients)[:n_test].tolist())
    test = [i for i, p in zip(image_ids, patient_of.tolist(), strict=True) if p in test_patients]
    train_val = [i for i, p in zip(image_ids, patient_of.tolist(), strict=True) if p not in test_patients]
    (out / TEST_LIST).write_text("".join(f"{i}\n" for i in test))
    (out / TRAIN_VAL_LIST).write_text("".join(f"{i}\n" for i in train_val))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m programkit.data.synthetic", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="directory to write the layout into")
    parser.add_argument("--images", required=True, type=int, help="how many images")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="width and height in pixels")
    parser.add_argument("--seed", type=int, default=0, help="same seed, same data")
    parser.add_argument("--patients", type=int, default=None,
                        help=f"how many patients (default: images / {IMAGES_PER_PATIENT})")
    args = parser.parse_args(argv)
    try:
        out = write_synthetic(args.out, args.images, args.size, args.seed, args.patients)
    except ValueError as error:
        parser.error(str(error))
    print(f"wrote {args.images} images of {args.size}x{args.size} to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
