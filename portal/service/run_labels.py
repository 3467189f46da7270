"""Runs' names and tags, set by their owners on the experiments page or through the API.

Kept by the dashboard itself, in a small SQLite file of its own (`<state_dir>/portal/run-labels.sqlite3`): it
cannot write into the users' homes on every scheduler (a Kubernetes user's home is a volume of their pods), and a
label is the dashboard's, not the run's. A run is keyed by its owner, job id, submit time (a job id may be reused
after the scheduler's state is reset) and task. Every name and tag is checked before it is kept (`checked_label`),
and every one read back is checked again (a file the dashboard did not write is read as hostile: a bad row is
skipped); each owner keeps at most MAX_LABELLED runs.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from portal.errors import Unavailable
from portal.inputs import InputError, shown

__all__ = ["LabelsNotSaved", "RunLabels", "checked_label"]

MAX_NAME = 80
MAX_TAGS = 8
MAX_TAG = 24
MAX_LABELLED = 5000  # runs one owner may name or tag
TAG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
SCHEMA = ("CREATE TABLE IF NOT EXISTS labels (owner TEXT NOT NULL, job TEXT NOT NULL, submitted TEXT NOT NULL, "
          "task INTEGER NOT NULL, name TEXT NOT NULL, tags TEXT NOT NULL, PRIMARY KEY (owner, job, submitted, task))")
Key = tuple[str, str, int]  # job id, submitted at, task (-1: a single job)


class LabelsNotSaved(Unavailable):
    """The dashboard's label store could not be written (its state directory, its disk): a 503."""


def checked_name(value: object) -> str:
    if not isinstance(value, str) or len(value) > MAX_NAME or any(not ch.isprintable() for ch in value):
        raise InputError("name", f"{shown(value)} is not allowed; allowed: one line of printable text, at most "
                                 f"{MAX_NAME} characters (empty: no name)")
    return value.strip()


def checked_tag(value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TAG or not set(value) <= TAG_CHARS \
            or value.startswith("-"):
        raise InputError("tags", f"{shown(value)} is not a tag; allowed: lower-case letters, digits and -, "
                                 f"1-{MAX_TAG} characters, not starting with -")
    return value


def checked_label(name: object, tags: object) -> tuple[str, tuple[str, ...]]:
    """A name and tags as they will be kept; InputError naming `name` or `tags` otherwise. `tags`: a list of tags, or
    one text of them separated by commas or spaces (the page's field)."""
    if isinstance(tags, str):
        tags = [t for t in tags.replace(",", " ").split() if t]
    if not isinstance(tags, list | tuple) or len(tags) > MAX_TAGS:
        raise InputError("tags", f"allowed: at most {MAX_TAGS} tags, as a list (the API) or separated by commas")
    return checked_name(name), tuple(dict.fromkeys(checked_tag(t) for t in tags))


class RunLabels:
    """The store: `of(owner)` reads one owner's labels, `set` changes one run's (an empty name and no tags: removed)."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()  # one writer at a time in this process

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=5)
        connection.execute(SCHEMA)
        return connection

    def of(self, owner: str) -> dict[Key, tuple[str, tuple[str, ...]]]:
        """The owner's labels by run; {} when the store is not there or cannot be read (the page shows no names)."""
        if not self.path.is_file():
            return {}
        try:
            with self._lock, self._connect() as db:
                rows = db.execute("SELECT job, submitted, task, name, tags FROM labels WHERE owner = ? LIMIT ?",
                                  (owner, MAX_LABELLED)).fetchall()
        except sqlite3.Error:
            return {}
        found = {}
        for job, submitted, task, name, tags in rows:
            try:
                found[(str(job), str(submitted), int(task))] = checked_label(name, json.loads(tags))
            except (InputError, ValueError, TypeError):
                continue
        return found

    def set(self, owner: str, key: Key, name: object, tags: object) -> dict[str, Any]:
        """Keep the run's name and tags (checked: InputError); LabelsNotSaved when the store cannot be written."""
        kept_name, kept_tags = checked_label(name, tags)
        try:
            with self._lock, self._connect() as db:
                if not kept_name and not kept_tags:
                    db.execute("DELETE FROM labels WHERE owner = ? AND job = ? AND submitted = ? AND task = ?",
                               (owner, *key))
                else:
                    known = db.execute("SELECT COUNT(*) FROM labels WHERE owner = ?", (owner,)).fetchone()[0]
                    exists = db.execute("SELECT 1 FROM labels WHERE owner = ? AND job = ? AND submitted = ? AND "
                                        "task = ?", (owner, *key)).fetchone()
                    if not exists and known >= MAX_LABELLED:
                        raise InputError("name", f"{owner} has named or tagged {known} runs; allowed: at most "
                                                 f"{MAX_LABELLED} (clear some first)")
                    db.execute("INSERT OR REPLACE INTO labels VALUES (?, ?, ?, ?, ?, ?)",
                               (owner, *key, kept_name, json.dumps(list(kept_tags))))
        except (sqlite3.Error, OSError) as err:
            raise LabelsNotSaved(f"names and tags cannot be saved now: {str(err)[:200]}") from None
        return {"name": kept_name, "tags": list(kept_tags)}

    @staticmethod
    def key(job_id: str, submitted_at: str, task: int | None) -> Key:
        return job_id, submitted_at, -1 if task is None else task

    def apply(self, owner: str, runs: list, labels: Mapping[Key, tuple[str, tuple[str, ...]]] | None = None) -> list:
        """The owner's runs (portal.service.experiments.Run) with their names and tags."""
        labels = self.of(owner) if labels is None else labels
        named = []
        for run in runs:
            found = labels.get(self.key(run.id.job, run.submitted_at, run.id.task))
            named.append(run.labelled(*found) if found else run)
        return named
