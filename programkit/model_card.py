"""A model card for every training run: what produced the checkpoint beside it (issue 29, item 3).

The chief (rank 0) writes `model_card.json` into the run's checkpoint directory when training ends:

    spec         the run's settings (model, image size, batch, workers, learning rate, epochs, seed, ...)
    code         the portal's version and, from a git checkout, its commit
    environment  Python's and NumPy's versions and the program's frameworks' (`frameworks`: each program names its
                 own); the image's digest when it ran in one and knew it (DSPORTAL_IMAGE_DIGEST; a pod cannot see
                 its own, so on Kubernetes the dashboard adds the one its kubelet reports:
                 portal.scheduler.kubernetes.records.card_from_log)
    data         the directory, its kind (TFRecords or images), and per split the number of images, a SHA-256 of
                 its sorted image list and of its sorted patient list, and one SHA-256 of the whole patient split
                 (patient -> split): two runs on "the same" data compare by these
    auroc        the last validation's per-class AUROC beside the CheXNet paper's, and their means
    checkpoint   the checkpoint's files (the one `--resume` and the evaluate notebook load) with their SHA-256

The data hashes of a TFRecord directory are the ones its converter recorded in manifest.json (the records hold
no patient): a directory converted before that has none, and the card says so instead of guessing.

The card's shape is `programkit.schemas.MODEL_CARD`: `write_card` checks what it writes against it, and the dashboard
checks what it reads (`check_card`), so a card is either one the job page can show or unreadable, saying why.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from programkit.schemas import CARD_FORMAT, MODEL_CARD, check

CARD_FILE = "model_card.json"
HASH_CHUNK = 1 << 20


def sha256_text(lines: Iterable[str]) -> str:
    """The SHA-256 of these lines, sorted and joined by newlines (the order they were read in does not count)."""
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def split_fingerprints(splits: Mapping[str, Iterable[tuple[str, str]]]) -> dict[str, Any]:
    """Per split {images, image_list_sha256, patients_sha256}, and the patient split's own hash, from each split's
    (image id, patient id) pairs. Pure: the converter records it, the card computes it for an image directory."""
    found: dict[str, Any] = {"splits": {}}
    assignment = []
    for split, pairs in splits.items():
        pairs = list(pairs)
        patients = {patient for _, patient in pairs}
        found["splits"][split] = {"images": len(pairs), "image_list_sha256": sha256_text(i for i, _ in pairs),
                                  "patients": len(patients), "patients_sha256": sha256_text(patients)}
        assignment += [f"{patient}\t{split}" for patient in patients]
    found["patient_split_sha256"] = sha256_text(assignment)
    return found


def data_section(source: Any) -> dict[str, Any]:
    """The card's `data`: a programkit.data.sources.DataSource's directory, kind and fingerprints."""
    from programkit.data.chestxray14 import SPLITS
    from programkit.data.sources import IMAGES

    section: dict[str, Any] = {"dir": str(source.root), "kind": source.kind,
                               "counts": {split: source.count(split) for split in SPLITS}}
    if source.kind == IMAGES:
        section.update(split_fingerprints({split: [(r.image_id, r.patient_id) for r in source.index.split(split)]
                                           for split in SPLITS}))
    elif source.fingerprints:
        section.update(source.fingerprints)
    else:
        section["note"] = ("its manifest.json records no image or patient lists (converted before they were "
                           "recorded): convert the data again (python -m chexnet.data.tfrecords) to compare runs")
    return section


def compare_data(trained: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    """What differs between the data a model was trained on (its card's `data`) and the data here (`data_section`),
    in words; [] when they are the same images in the same patient split, wherever they are stored."""
    if "splits" not in trained or "splits" not in here:
        why = trained.get("note") if "splits" not in trained else here.get("note")
        return [f"the data cannot be compared: {why}"]
    found = []
    if trained.get("patient_split_sha256") != here.get("patient_split_sha256"):
        found.append("the patient split differs from the one the model was trained with: a patient of this test "
                     "split may have been in its training split, and its AUROC here may be too high")
    for split, then in trained["splits"].items():
        now = here["splits"].get(split)
        if now is not None and then["image_list_sha256"] != now["image_list_sha256"]:
            found.append(f"the {split} split holds other images ({now['images']} here, {then['images']} when it "
                         "was trained)")
    return found


def checkpoint_section(prefix: str | None) -> dict[str, Any]:
    """The checkpoint `prefix` names (CheckpointManager.latest_checkpoint: ckpt-5 -> ckpt-5.index, ckpt-5.data-*)
    with each file's size and SHA-256."""
    if not prefix:
        return {"prefix": None, "files": []}
    path = Path(prefix)
    files = sorted(p for p in path.parent.glob(f"{path.name}.*") if p.is_file())
    return {"prefix": path.name, "files": [{"file": p.name, "bytes": p.stat().st_size, "sha256": sha256_file(p)}
                                           for p in files]}


def code_version() -> dict[str, Any]:
    """The portal's distribution version, and its git commit: the checkout's when it runs from one, else the one
    its installed copy was made from."""
    from importlib import metadata

    try:
        version = metadata.version("dsportal")
    except metadata.PackageNotFoundError:
        version = None
    here = Path(__file__).resolve().parent
    commit = dirty = None
    try:
        found = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                               timeout=10)
        if found.returncode == 0:
            commit = found.stdout.strip()
            status = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10)
            dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    if commit is None:
        commit, dirty = installed_commit()
    return {"dsportal": version, "git_commit": commit, "git_dirty": dirty}


def installed_commit() -> tuple[str | None, bool | None]:
    """The commit a non-editable install was made from (deploy/local/install-package.sh writes it beside the
    venv's copy): jobs run that copy, not the checkout."""
    try:
        record = json.loads((Path(sys.prefix) / "share" / "dsportal" / "source.json").read_text())
    except (OSError, ValueError):
        return None, None
    commit, dirty = record.get("git_commit"), record.get("git_dirty")
    return (commit if isinstance(commit, str) else None), (dirty if isinstance(dirty, bool) else None)


def installed(*distributions: str) -> str | None:
    """The version of the first of `distributions` installed here (tensorflow or tensorflow-cpu), None if none is."""
    from importlib import metadata

    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def environment(frameworks: Mapping[str, str | None]) -> dict[str, Any]:
    """Python's and NumPy's versions, the program's own `frameworks` (name -> version, as the program knows them:
    chexnet's TensorFlow and Horovod, chexnet_torch's PyTorch, torchvision, CUDA and cuDNN), and the image."""
    return {"python": platform.python_version(), "numpy": installed("numpy"), "frameworks": dict(frameworks),
            "image_digest": os.environ.get("DSPORTAL_IMAGE_DIGEST") or None}


# A card written before `frameworks` held its versions at the top of `environment`: their names in the page.
OLD_FRAMEWORK_KEYS = {"tensorflow": "TensorFlow", "horovod": "Horovod", "torch": "PyTorch",
                      "torchvision": "torchvision", "cuda": "CUDA", "cudnn": "cuDNN"}


def frameworks_of(environment: Mapping[str, Any]) -> dict[str, str]:
    """A checked card's frameworks, name -> version (the text ones only): its `frameworks`, or for a card written
    before them, the versions it held by name (OLD_FRAMEWORK_KEYS)."""
    given = environment.get("frameworks")
    if isinstance(given, Mapping):
        return {name: version for name, version in given.items() if isinstance(version, str)}
    return {label: environment[key] for key, label in OLD_FRAMEWORK_KEYS.items()
            if isinstance(environment.get(key), str)}


def auroc_section(per_class: Mapping[str, float | None]) -> dict[str, Any]:
    """This run's per-class AUROC beside the CheXNet paper's (Rajpurkar et al. 2017), and both means."""
    from programkit.labels import CLASSES
    from programkit.reference import CHEXNET_PAPER_AUROC, chexnet_paper_mean

    auroc = {name: _defined(per_class.get(name)) for name in CLASSES}
    rows = [{"class": name, "auroc": auroc[name], "paper": CHEXNET_PAPER_AUROC.get(name)} for name in CLASSES]
    defined = [value for value in auroc.values() if value is not None]
    return {"per_class": rows, "mean": sum(defined) / len(defined) if defined else None,
            "paper_mean": chexnet_paper_mean()}


def _defined(value: float | None) -> float | None:
    """An AUROC as the card holds it: a NaN (predictions that were NaN) is undefined, like a one-label class."""
    return None if value is None or not math.isfinite(value) else float(value)


def build_card(spec: Mapping[str, Any], data: Mapping[str, Any], per_class_auroc: Mapping[str, float | None],
               checkpoint: Mapping[str, Any], epochs_done: int,
               frameworks: Mapping[str, str | None]) -> dict[str, Any]:
    return {"format": CARD_FORMAT, "spec": dict(spec), "epochs_done": epochs_done, "code": code_version(),
            "environment": environment(frameworks), "data": dict(data), "auroc": auroc_section(per_class_auroc),
            "checkpoint": dict(checkpoint)}


def check_card(card: Any, record: str = "model card") -> None:
    """programkit.schemas.SchemaError (a ValueError) naming `record` and the first field of `card` that is not as
    `programkit.schemas.MODEL_CARD` says (a record of another format: its `format`); never another error."""
    check(MODEL_CARD, card, record)


def write_card(directory: str | Path, card: Mapping[str, Any]) -> Path:
    """model_card.json in `directory`, replaced whole (a reader never sees half of it); SchemaError, with nothing
    written, for a card the dashboard would not read (the text is checked as the reader will check it)."""
    path = Path(directory) / CARD_FILE
    text = json.dumps(card, indent=1, sort_keys=False) + "\n"
    check_card(json.loads(text), f"{CARD_FILE} to write")
    tmp = path.with_name(f".{CARD_FILE}.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)
    return path
