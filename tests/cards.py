"""Model cards checked against the files themselves, computed here with hashlib: never with programkit.model_card's
own functions, which wrote the card (a check that recomputes with the writer's code agrees with any bug in it).

The data's fingerprints are, per split, the SHA-256 of its image ids (and of its patient ids) sorted and joined by
newlines, and one hash of every patient's "<patient>\\t<split>" line (docs/training.md, the model card). The splits
come from the data set's reader (programkit.data.chestxray14.load_index) for an image directory, from its converter's
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
    from programkit.data.chestxray14 import SPLITS, load_index

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


# --- cards as the dashboard reads them: one whole card, and every way of giving one field the wrong type ---------

SHA = "ab" * 32
# One of each JSON type, as a wrong value for a field of any other. The list and the object are not empty, and the
# object's key holds an object, so no list-of or object-of field takes them as an empty (or all-scalar) one.
JSON_VALUES = {"null": None, "true/false": True, "a number": 5, "a string": "text", "a list": [5],
               "an object": {"x": {"y": 1}}}


def a_card() -> dict[str, Any]:
    """A whole model card of format dsportal-model-card-1, as programkit.model_card.build_card writes one."""
    return {
        "format": "dsportal-model-card-1",
        "spec": {"model": "densenet121", "batch_size": 16, "fp16": False, "lr": 0.001, "weights": None},
        "epochs_done": 3,
        "code": {"dsportal": "0.1.0", "git_commit": "0123456789abcdef0123", "git_dirty": False},
        "environment": {"python": "3.11.9", "numpy": "1.26.4",
                        "frameworks": {"TensorFlow": "2.15.1", "Horovod": "0.28.1"}, "image_digest": "sha256:" + SHA},
        "data": {"dir": "/data/chestxray14", "kind": "images", "counts": {"train": 30, "val": 5, "test": 5},
                 "splits": {"train": {"images": 30, "image_list_sha256": SHA, "patients": 12,
                                      "patients_sha256": SHA}},
                 "patient_split_sha256": SHA, "note": "a note"},
        "auroc": {"per_class": [{"class": "Atelectasis", "auroc": 0.8, "paper": 0.8094}], "mean": 0.8,
                  "paper_mean": 0.841},
        "checkpoint": {"prefix": "ckpt-3", "files": [{"file": "ckpt-3.index", "bytes": 120, "sha256": SHA}]},
    }


def json_kind(value: Any) -> str:
    """The JSON type of a value, named as JSON_VALUES names it."""
    for name, example in JSON_VALUES.items():
        if type(value) is type(example) or (name == "a number" and type(value) is float):
            return name
    raise TypeError(value)


def fields_of(value: Any, path: str = ""):
    """(dotted path, value) of every field inside `value`, depth first: "data", "data.counts", "data.counts.val",
    "checkpoint.files[0].sha256", ..."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        where = f"{path}[{key}]" if isinstance(value, list) else f"{path}.{key}" if path else key
        yield where, inner
        yield from fields_of(inner, where)


def replaced(card: dict[str, Any], path: str, new: Any) -> dict[str, Any]:
    """A copy of `card` with the field at `path` (as fields_of names it) set to `new`."""
    copy = json.loads(json.dumps(card))
    parts = [int(p) if p.isdigit() else p for p in path.replace("[", ".").replace("]", "").split(".")]
    parent = copy
    for part in parts[:-1]:
        parent = parent[part]
    parent[parts[-1]] = new
    return copy


def wrong_type_cards(card: dict[str, Any]):
    """(path, the JSON type given, the card with that field so) for every field of `card` and every JSON type but
    its own."""
    for path, value in fields_of(card):
        for kind, example in JSON_VALUES.items():
            if kind != json_kind(value):
                yield path, kind, replaced(card, path, example)
