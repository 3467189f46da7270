"""Files a user can put where the portal or the training reads one of theirs, in place of a regular file: a FIFO (a
read waits for a writer, for ever), a link to an endless device, a link to a file that is not theirs, a directory, and
a huge sparse file (its size alone is too much). One set for the unit tests and for the suites against the test box
(tests/integration/test_hostile_files.py, test_untrusted.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

KINDS = ("fifo", "link to a device", "link to another file", "directory", "huge sparse file")
HUGE_BYTES = 1 << 40  # 1 TiB of nothing: no room taken on disk, and its size alone refuses it


def fifo(path: Path) -> None:
    """A FIFO: a read of it waits for a writer, for ever."""
    os.mkfifo(path)


def device_link(path: Path, device: str = "/dev/zero") -> None:
    """A link to an endless device (/dev/zero, /dev/urandom)."""
    path.symlink_to(device)


def link_to(path: Path, target: Path | str) -> None:
    """A link to a file the reader should not read through it: another user's, or the system's (/etc/passwd)."""
    path.symlink_to(target)


def directory(path: Path) -> None:
    path.mkdir()


def huge_sparse_file(path: Path, size: int = HUGE_BYTES) -> None:
    """A file of `size` zero bytes that takes no room on disk."""
    with open(path, "wb") as file:
        file.truncate(size)


def cleared(path: Path) -> Path:
    """`path` with nothing at it (a directory there removed whole, a link itself not followed), its parent made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    return path


def put_special(path: Path, kind: str, other: Path | None = None) -> None:
    """One of KINDS at `path`, where nothing is yet; "link to another file" links to `other`."""
    if kind == "fifo":
        fifo(path)
    elif kind == "link to a device":
        device_link(path)
    elif kind == "link to another file":
        if other is None:
            raise ValueError("a link to another file needs the other file")
        link_to(path, other)
    elif kind == "directory":
        directory(path)
    elif kind == "huge sparse file":
        huge_sparse_file(path)
    else:
        raise ValueError(kind)
