"""The fingerprint of the dsportal sources that users' processes run: what `deploy/local/install.sh` installs into
the shared venv (not editable), and what the box's check compares with the installed copy.

    /usr/bin/python3 deploy/source_hash.py [CHECKOUT]   # prints the fingerprint (16 hex digits)
    /usr/bin/python3 deploy/source_hash.py --sources    # prints SOURCES, one per line (what install-package stages)

Standard library only: install.sh runs it before the venv has anything in it.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

# What the distribution is built from (setup.py's packages, package_data and data_files): a change to any of these
# files is a change to what a job, a server or a notebook runs.
SOURCES = ("setup.py", "portal", "spawners", "programkit", "chexnet", "chexnet_torch", "notebooks",
           "deploy/jupyterlab")
SKIPPED_PARTS = {"__pycache__"}
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def source_files(checkout: Path) -> list[Path]:
    """Every file of SOURCES under `checkout`, sorted, without byte-code caches."""
    found = []
    for name in SOURCES:
        top = checkout / name
        paths = [top] if top.is_file() else top.rglob("*")
        found += [p for p in paths if p.is_file() and not SKIPPED_PARTS.intersection(p.relative_to(checkout).parts)
                  and not p.name.endswith(SKIPPED_SUFFIXES)]
    return sorted(found)


def source_hash(checkout: Path) -> str:
    """16 hex digits over each source file's path (relative to the checkout) and contents."""
    digest = hashlib.sha256()
    for path in source_files(checkout):
        digest.update(path.relative_to(checkout).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


if __name__ == "__main__":
    if sys.argv[1:] == ["--sources"]:
        print("\n".join(SOURCES))
    else:
        print(source_hash(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)))
