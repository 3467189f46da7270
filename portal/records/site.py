"""The site's own registrations (portal.config_programs): the declaration modules a setting names, importable once
this process has the site's directory on its Python path (after the portal's own, which a site's package never
shadows).

What is imported from there runs in the dashboard (as root) and in every user's jobs and notebooks, so the directory
is trusted only as sshd trusts a user's keys: the tree itself writable by no one but root (or the user this process
runs as), and every directory above it the same, or sticky (/tmp, /var/tmp). Anything else is refused with one line
naming the path, before anything of it is imported."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from portal.config import load
from portal.errors import Misconfigured

MAX_ENTRIES = 10_000  # a site's packages are a few hundred files; a tree larger than this is not walked


class SiteError(Misconfigured, ValueError):
    """site_python_path is not a directory only root (or this process's user) can write; names the path."""


def _untrusted(place: Path, info: os.stat_result, above: bool) -> str:
    """Why `place` could let another user change what is imported ("" when it cannot)."""
    if info.st_uid not in (0, os.geteuid()):
        return f"owned by uid {info.st_uid}"
    if info.st_mode & 0o022 and not (above and info.st_mode & stat.S_ISVTX):
        return f"writable by its group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return ""


def check_site_tree(root: str) -> None:
    """SiteError unless `root`, everything below it and every directory above it are as the module says."""
    top = Path(root)
    try:
        info = os.stat(top)
        if not stat.S_ISDIR(info.st_mode):
            raise SiteError(f"site_python_path {root} is not a directory")
        checked = [(top, info, False), *((above, os.stat(above), True) for above in top.parents)]
        for count, (place, dirs, files) in enumerate(os.walk(top, followlinks=True)):  # bounded: MAX_ENTRIES
            if count > MAX_ENTRIES:
                raise SiteError(f"site_python_path {root} holds more than {MAX_ENTRIES} directories")
            # a link is what it leads to (Python imports through it); one that leads nowhere is refused
            checked += [(Path(place) / name, os.stat(Path(place) / name), False) for name in (*dirs, *files)]
    except OSError as err:
        raise SiteError(f"site_python_path {root}: {err.filename or root} cannot be read ({err.strerror})") from None
    for place, info, above in checked:
        why = _untrusted(place, info, above)
        if why:
            raise SiteError(f"site_python_path {root}: {place} is {why}; what is there runs in the dashboard and in "
                            "every user's jobs, so allowed: a tree only root (or this process's user) can write")


def site_modules(setting: str) -> tuple[str, ...]:
    """The modules that `setting` (site_programs or site_launchers) names, with site_python_path on sys.path once
    its tree is checked (SiteError otherwise)."""
    cfg = load()
    if cfg.site_python_path and cfg.site_python_path not in sys.path:
        check_site_tree(cfg.site_python_path)
        sys.path.append(cfg.site_python_path)
    return tuple(getattr(cfg, setting))
