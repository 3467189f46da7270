"""The sweep journal's lock: Optuna's O_EXCL lock file, with a grace period for a writer killed holding it.

Every task of a sweep appends to `study.journal` on the shared home under `study.journal.lock`, a file made with
O_EXCL (Optuna's JournalFileOpenLock, which NFSv3 and later honour) and removed when the write is done, milliseconds
later. A writer that dies holding it (its node lost, SIGKILL at the end of Slurm's KillWait) leaves the file behind,
and Optuna 4.1's lock waits for it forever: every other task of the sweep stops at its next report, and the task
Slurm runs again stops at its first. StudyLock waits like Optuna's, and once the file it waits on is older than
STALE_LOCK_S, removes it and takes the lock. Optuna 4.2 gave its own lock a `grace_period` (5.0, pinned here: 30 s by
default), which StudyLock's `acquire` replaces: it is counted from when a waiter first sees the lock rather than from
the lock's age, its forced release renames whatever lock is there by then (a fresh one another waiter just took,
too), and a task still on Optuna 4.1 (an image not yet rebuilt) has none: every task takes the same lock the same way.

The age is the lock file's mtime on the shared file system: a lock that old cannot be a live write, unless its
writer was stopped in it (a suspended job), which then finds its lock gone when it releases (Optuna raises).
"""

from __future__ import annotations

import errno
import os
import sys
import time
import uuid
from pathlib import Path

from optuna.storages.journal import JournalFileOpenLock

STALE_LOCK_S = 60.0  # a journal write holds the lock for milliseconds: older than this, its writer was killed
MAX_WAIT_STEP_S = 1.0  # Optuna's own back-off: 1 ms, doubled up to a second


def clear_stale_lock(journal: Path, now: float | None = None) -> bool:
    """Remove the journal's lock file when its writer was killed holding it. True if removed.

    Two waiters may find the same stale lock. Each renames it aside first (atomic: one of them gets it) and checks
    that what it moved is still the file it judged stale (the same inode and mtime): if another waiter broke it
    and a writer took a fresh lock between the look and the rename, the fresh one is put back."""
    lock = Path(f"{journal}.lock")
    try:
        seen = lock.lstat()
    except FileNotFoundError:
        return False
    age = (time.time() if now is None else now) - seen.st_mtime
    if age < STALE_LOCK_S:
        return False
    aside = lock.with_name(f"{lock.name}.{uuid.uuid4().hex}.stale")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return False  # another waiter broke it first
    moved = os.lstat(aside)
    if (moved.st_ino, moved.st_mtime_ns) != (seen.st_ino, seen.st_mtime_ns):
        try:
            os.link(aside, lock)  # a writer's fresh lock: back where its release looks for it
        except FileExistsError:
            pass  # yet another lock was taken meanwhile: the fresh one's writer finds it gone at its release
        os.unlink(aside)
        return False
    os.unlink(aside)
    print(f"programkit.sweep: removed {lock}, left {age:.0f} s ago by a writer that was killed", file=sys.stderr)
    return True


class StudyLock(JournalFileOpenLock):
    """Optuna's O_EXCL lock file, broken once older than STALE_LOCK_S instead of waited on forever."""

    def __init__(self, journal: Path) -> None:
        super().__init__(str(journal))
        self._journal = journal

    def acquire(self) -> bool:
        wait = 0.001
        while True:
            try:
                os.close(os.open(self._lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                return True
            except OSError as err:
                if err.errno != errno.EEXIST:
                    raise
            if clear_stale_lock(self._journal):
                continue
            time.sleep(wait)
            wait = min(wait * 2, MAX_WAIT_STEP_S)
