"""Model cards checked against the files themselves, computed here with hashlib: never with chexnet.model_card's
own functions, which wrote the card (a check that recomputes with the writer's code agrees with any bug in it).

The data's fingerprints are, per split, the SHA-256 of its image ids (and of its patient ids) sorted and joined by
newlines, and one hash of every patient's "<patient>\\t<split>" line (docs/training.md, the model card). The splits
come from the data set's reader (chexnet.data.chestxray14.load_index) for an image directory, from its converter's
manifest.json (read here as JSON) for TFRecords.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def sha256_of_lines(lines) -> str:
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def checkpoint_files_hold(card: dict[str, Any], checkpoints: Path) -> None:
    """Every file the card lists is the checkpoint's file on disk now, byte for byte by SHA-256, and the card lists
    every file of its checkpoint (the prefix's index and data files)."""
    listed = {entry["file"]: entry["sha256"] for entry in card["checkpoint"]["files"]}
    assert listed, card["checkpoint"]
    on_disk = {path.name for path in checkpoints.glob(f"{card['checkpoint']['prefix']}.*")}
    assert set(listed) == on_disk, (sorted(listed), sorted(on_disk))
    for name, digest in listed.items():
        assert file_sha256(checkpoints / name) == digest, name


def image_dir_fingerprints(layout: Path) -> dict[str, Any]:
    """What the card's `data` must say of a ChestX-ray14 layout directory, hashed here."""
    from chexnet.data.chestxray14 import SPLITS, load_index

    index = load_index(layout)
    found: dict[str, Any] = {"splits": {}}
    assignment = []
    for split in SPLITS:
        records = index.split(split)
        patients = {r.patient_id for r in records}
        found["splits"][split] = {"images": len(records),
                                  "image_list_sha256": sha256_of_lines(r.image_id for r in records),
                                  "patients": len(patients), "patients_sha256": sha256_of_lines(patients)}
        assignment += [f"{patient}\t{split}" for patient in patients]
    found["patient_split_sha256"] = sha256_of_lines(assignment)
    return found


def data_holds(card: dict[str, Any], data_dir: Path, shown_as: str | None = None) -> None:
    """The card's `data` names this directory (or `shown_as`: where the job saw it, a pod's mount) and its
    fingerprints: an image directory's hashed here from its reader's splits, a TFRecord directory's as its
    manifest.json records them."""
    data = card["data"]
    assert data["dir"] == (shown_as or str(data_dir)), data["dir"]
    manifest = data_dir / "manifest.json"
    expected = json.loads(manifest.read_text())["fingerprints"] if manifest.exists() else \
        image_dir_fingerprints(data_dir)
    for key, value in expected.items():
        assert data[key] == value, (key, data[key], value)
    assert {split: counts["images"] for split, counts in expected["splits"].items()} == data["counts"]
