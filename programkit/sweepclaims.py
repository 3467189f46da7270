"""Kubernetes: which task of a sweep (programkit.sweep) each pod of its Job runs, by claims on the shared home.

On Kubernetes (v1.20 has no Indexed Jobs) a sweep is one Job of TRIALS completions, PARALLEL at a time, whose
pods carry no index: each pod `claim`s a task. Under a lock on the shared home it takes the lowest task whose
trial has not finished and that no live pod holds. A holder's script touches `claims/<task>` every HEARTBEAT_S
(while the claim still names it); a claim not touched for STALE_CLAIM_S was its pod's, lost with its node. The
Job controller replaces that pod; the replacement finds the stale claim, takes the task over and resumes its
trial from the checkpoint, as a requeued Slurm task does. A pod that finds every unfinished task held waits (the
holder's node may be on its way out); one that finds every trial finished exits EXIT_FINISHED.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

from programkit.sweep import JOURNAL_FILE, TASK_ATTR, Plan, SweepError, open_study
from programkit.userfiles import read_text

CLAIMS_DIR = "claims"  # Kubernetes: claims/<task> names the pod that runs it; its mtime is the pod's heartbeat
HEARTBEAT_S = 10  # how often a holder touches its claim
STALE_CLAIM_S = 45.0  # a claim untouched this long (4 heartbeats missed) was a lost pod's
CLAIM_WAIT_S = 5  # how often a pod that found every task held asks again
MAX_CLAIM_BYTES = 4096  # a pod's name and a newline


def _finished_tasks(job_dir: Path) -> set[int]:
    if not (job_dir / JOURNAL_FILE).exists():
        return set()
    study = open_study(job_dir, Plan.read(job_dir))
    return {frozen.user_attrs.get(TASK_ATTR) for frozen in study.get_trials(deepcopy=False)
            if frozen.state.is_finished()}


def _read_head(path: Path) -> str:
    """A claim's holder (a claim is a name and a newline); "" for a file that is none (too large, no longer a
    regular file)."""
    try:
        return read_text(path, MAX_CLAIM_BYTES)[:200].strip()
    except (OSError, ValueError):
        return ""


def claim(job_dir: Path, holder: str, trials: int, now: float | None = None) -> tuple[int | None, bool]:
    """(the task `holder` now holds, or None; whether a live holder keeps one that is not finished). Under an
    exclusive lock on `claims/.lock`: the lowest task whose trial has not finished, unclaimed, or claimed by
    `holder` already, or by a holder silent for STALE_CLAIM_S."""
    import fcntl

    claims = job_dir / CLAIMS_DIR
    claims.mkdir(exist_ok=True)
    with open(claims / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        finished = _finished_tasks(job_dir)
        now = time.time() if now is None else now
        held = False
        for task in range(trials):
            if task in finished:
                continue
            path = claims / str(task)
            try:
                info = path.lstat()
            except FileNotFoundError:
                info = None
            if info is not None:  # a regular file of a holder's; anything else (a link, a FIFO) is no claim
                regular = stat.S_ISREG(info.st_mode)
                owner = _read_head(path) if regular else ""
                if regular and owner != holder and now - info.st_mtime < STALE_CLAIM_S:
                    held = True
                    continue
                if regular and owner != holder:
                    print(f"programkit.sweep: task {task}'s holder {owner or '?'} has been silent for "
                          f"{now - info.st_mtime:.0f} s: {holder} takes it over", file=sys.stderr)
            if info is not None and stat.S_ISDIR(info.st_mode):
                raise SweepError(f"{path} is a directory, not a claim")
            partial = claims / f".{task}.{os.getpid()}"
            partial.write_text(holder + "\n")
            partial.replace(path)
            return task, held
        return None, held


def valid_holder(text: str) -> bool:
    """A pod's name as a claim may hold it: 1 to 200 characters of [A-Za-z0-9.-_]."""
    return 0 < len(text) <= 200 and text.isascii() and all(c.isalnum() or c in ".-_" for c in text)
