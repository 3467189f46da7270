"""The one way the training side reads a file that a user could have put in place of the one it expects (a sweep's
plan and trial files, a run's claims and epoch records): a regular file, never through a link, never more than a
limit, and never a wait (a FIFO, a device). `programkit.sweep status`, which the dashboard runs as the user under a
time cap, reads the user's job directory with it, so a FIFO in place of sweep.json costs nobody a thing.

The dashboard's own reads of a user's files go through `portal.records.account.JobUser.read_text` (as the user, with
the same rules and a time cap); tests/unit/test_user_file_reads.py finds any read that goes around either.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["NotARegularFile", "private_directory_problem", "read_bytes", "read_text"]


class NotARegularFile(OSError):
    """The path is a link, a FIFO, a device, a directory or a socket: not the file a run writes."""


def read_bytes(path: str | Path, limit: int) -> bytes:
    """The file's first `limit` bytes; ValueError when it holds more. NotARegularFile (an OSError) for anything but
    a regular file reached without a link at its last component; the open never waits (O_NONBLOCK)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == getattr(os, "ELOOP", 40):
            raise NotARegularFile(err.errno, "a link, not a regular file", str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(0, "not a regular file", str(path))
        if info.st_size > limit:
            raise ValueError(f"{path}: {info.st_size} bytes, more than {limit}")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:  # grew since fstat
        raise ValueError(f"{path}: more than {limit} bytes")
    return data


def read_text(path: str | Path, limit: int) -> str:
    """read_bytes as text (UTF-8, undecodable bytes replaced)."""
    return read_bytes(path, limit).decode("utf-8", errors="replace")


def private_directory_problem(path: str | Path) -> str | None:
    """What keeps `path` from being a directory only this process's user can enter, said after its name ("is a
    symlink; ..."); None when it is one: a real directory (not a link), owned by the user, no group or other
    permission. A place where other users' processes must not meet the user's (a rendezvous, a socket) is checked
    with it before it is used."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as err:
        return f"cannot be read: {err.strerror}"
    if stat.S_ISLNK(found.st_mode):
        return "is a symlink; it must be a real directory"
    if not stat.S_ISDIR(found.st_mode):
        return "is not a directory"
    if found.st_uid != os.geteuid():
        return f"is owned by uid {found.st_uid}, not by you (uid {os.geteuid()})"
    if found.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(found.st_mode):04o}; it must be 0700 (no group or other permission)"
    return None
