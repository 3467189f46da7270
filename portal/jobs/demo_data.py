"""The demo data set every job reads unless its spec names another: a small synthetic ChestX-ray14.

    python -m portal.jobs.demo_data      # make it once (what `make up` runs); prints where it is

Made under `<state_dir>/datasets/` by the training package's own command lines (the hub side never imports
`chexnet`): the ChestX-ray14 layout in `chestxray14-demo/` and its TFRecords in `chestxray14-demo-tfrecords/`,
readable by every user. Each is built in a temporary directory and renamed into place, so a set that exists is
complete, and a second call does nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from portal.cli import run_reporting
from portal.config import PortalConfig, load
from portal.errors import PortalError

DEMO_IMAGES = 240  # a minute of training on 2 CPU cores at 64 px
DEMO_SIZE = 64
DEMO_SHARDS = 2  # per split: one per worker of a 2-worker demo job
# The generator's seed: with it, the small validation split has positives of most classes, so AUROC is defined.
DEMO_SEED = 3
LAYOUT_NAME = "chestxray14-demo"
TFRECORDS_NAME = "chestxray14-demo-tfrecords"


class DemoDataError(PortalError, RuntimeError):
    pass


def _build(target: Path, command: list[str]) -> None:
    """Run `command` with {out} as a fresh temporary directory beside `target`, then rename it into place."""
    if target.exists():
        return
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        result = subprocess.run([part.replace("{out}", str(work)) for part in command], capture_output=True,
                                text=True, timeout=1800, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        if result.returncode != 0:
            raise DemoDataError(f"`{' '.join(command[1:])}` failed:\n{result.stderr.strip()[-2000:]}")
        _open_to_all(work)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _open_to_all(root: Path) -> None:
    # Jobs run as their users: every directory listable, every file readable, nothing writable by them.
    for directory, _, files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o644)


def ensure_demo_data(cfg: PortalConfig) -> Path:
    """Make the demo set if it is not there yet; return its TFRecords directory (the jobs' default data_dir)."""
    datasets = cfg.state_dir / "datasets"
    datasets.mkdir(parents=True, exist_ok=True)
    os.chmod(datasets, 0o755)
    python = str(cfg.venv / "bin" / "python")
    layout, tfrecords = datasets / LAYOUT_NAME, datasets / TFRECORDS_NAME
    _build(layout, [python, "-m", "programkit.data.synthetic", "--out", "{out}", "--images", str(DEMO_IMAGES),
                    "--size", str(DEMO_SIZE), "--seed", str(DEMO_SEED)])
    # The original PNGs, as ChestX-ray14 ships them: a job resizes them to any image_size it asks for (records
    # resized to a short side could only be cropped smaller, and the demo images are 64 px).
    stale = _without_fingerprints(tfrecords)
    _build(tfrecords, [python, "-m", "chexnet.data.tfrecords", "--source", str(layout), "--out", "{out}",
                       "--shards", str(DEMO_SHARDS), "--encoding", "png"])
    if stale is not None:
        shutil.rmtree(stale, ignore_errors=True)  # a job reading it keeps its open files
    return tfrecords


def _without_fingerprints(tfrecords: Path) -> Path | None:
    """TFRecords converted before their manifest recorded the image and patient lists' hashes (what a model card
    compares): moved aside, to be made again; where they went, or None when they are current or missing."""
    manifest = tfrecords / "manifest.json"
    try:
        current = '"fingerprints"' in manifest.read_text()
    except OSError:
        return None
    if current:
        return None
    old = tfrecords.with_name(f".{tfrecords.name}-before-fingerprints-{os.getpid()}")
    tfrecords.rename(old)
    return old


def main() -> int:
    return run_reporting("demo data", lambda: print(ensure_demo_data(load())), DemoDataError)


if __name__ == "__main__":
    sys.exit(main())
