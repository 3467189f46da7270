"""How the GPU readers and the dashboard's watch write their files in the readings directory (root's, 0700): a
file whole by a rename, so that a reader sees the last one or the new one, never half of one; and a history of
lines, which keeps its newer half past a size."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def _part(path: Path) -> Path:
    return path.with_name(f".{path.name}.part")


def replace_text(path: Path, text: str) -> None:
    """`path` written whole, by a rename."""
    part = _part(path)
    part.write_text(text)
    os.replace(part, path)


def append_lines(path: Path, lines: Iterable[str], max_bytes: int) -> None:
    """Whole lines appended; past `max_bytes`, the newer half kept (whole lines, in a new file by a rename)."""
    with path.open("a") as out:
        out.writelines(lines)
    if path.stat().st_size > max_bytes:
        kept = path.read_bytes()[-max_bytes // 2:]
        part = _part(path)
        part.write_bytes(kept[kept.find(b"\n") + 1:])
        os.replace(part, path)
