"""The box's line in Debian's /etc/exim4/trusted_configs, exim's TRUSTED_CONFIG_LIST.

Debian's exim4 drops root when it is started with `-C file`, unless the file's path is a line of that list (the list
root's and writable by root only); without root it cannot deliver as each user. Each box adds the path of its own
configuration when it starts exim4 and removes exactly that line when it stops it: the lines of other boxes and of
the site are left as they are. A list the box creates starts with MADE_BY, and is removed again once no other line
is left in it; a site's own list is never removed, even when it ends up empty.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Callable
from pathlib import Path

from deploy.supervise import BoxError

TRUSTED_CONFIGS = Path("/etc/exim4/trusted_configs")  # Debian's build: `strings /usr/sbin/exim4 | grep trusted`
MADE_BY = ("# Made by the Data Scientist Portal's box (deploy/local/parts/exim_trust.py): a line per running box's "
           "exim4 configuration. Removed with the last one.\n")


def with_line(text: str | None, conf: Path) -> str:
    """The list's text with conf's line in it once (added at the end); None is a list that is not there yet."""
    if text is None:
        return MADE_BY + f"{conf}\n"
    if str(conf) in text.splitlines():
        return text
    return text + ("" if text.endswith("\n") or not text else "\n") + f"{conf}\n"


def without_line(text: str, conf: Path) -> str | None:
    """The list's text without conf's line; None when the list was the box's and nothing else is left in it."""
    kept = [line for line in text.splitlines(keepends=True) if line.rstrip("\n") != str(conf)]
    if kept in ([MADE_BY], []) and text.startswith(MADE_BY):
        return None
    return "".join(kept)


def register(conf: Path, list_file: Path = TRUSTED_CONFIGS) -> None:
    """Trust the box's configuration (idempotent: an `up` after a crash finds its line there already)."""
    _edit(list_file, lambda text: with_line(text, conf))


def unregister(conf: Path, list_file: Path = TRUSTED_CONFIGS) -> None:
    """Remove the box's line, and the list with it when the box made it and no other line is left."""
    if list_file.parent.is_dir():  # no exim4 installed: nothing was ever listed (`down` on a new machine)
        _edit(list_file, lambda text: None if text is None else without_line(text, conf))


def _edit(list_file: Path, change: Callable[[str | None], str | None]) -> None:
    try:
        _edit_locked(list_file, change)
    except OSError as err:
        raise BoxError(f"exim4's list of trusted configurations {list_file}: {err}") from err


def _edit_locked(list_file: Path, change: Callable[[str | None], str | None]) -> None:
    # Two boxes may start or stop their exim4 at once: the directory's lock makes each edit whole, and the new list
    # replaces the old by rename, so exim never reads half of it.
    lock = os.open(list_file.parent, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = list_file.read_text() if list_file.exists() else None
        after = change(before)
        if after == before:
            return
        if after is None:
            list_file.unlink()
            return
        # A site's list keeps its mode; exim trusts a list only when no one but root can write it.
        mode = stat.S_IMODE(list_file.stat().st_mode) & ~0o022 if before is not None else 0o644
        tmp = list_file.with_name(f".{list_file.name}.{os.getpid()}.tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as new:  # no one else's, ever
            new.write(after)
        os.chmod(tmp, mode)
        tmp.replace(list_file)
    finally:
        os.close(lock)
