"""Exactly-once TensorBoard scalars for a training job that is killed at any moment and re-run with `--resume`.

Slurm's `--requeue` SIGKILLs every process of a job whose node died and later re-runs the same command, with
`--resume`, in the same logdir and checkpoint directory. Two things could then be logged twice or not at all:

- An epoch's scalars (`loss/train`, `lr`, `auroc/...`, step = epoch). Rank 0 appends them to a small record,
  `<checkpoint-dir>/epochs.jsonl`, and fsyncs it BEFORE it saves the epoch's checkpoint; it writes them to
  TensorBoard only AFTER the save. A kill before the save re-trains the epoch, which then has no scalars in
  TensorBoard yet and appends a new line (the last line for an epoch wins: it is the one its checkpoint holds).
  A kill after the save may leave the epoch out of TensorBoard, in whole or in part: the resumed run reads the
  event files the logdir holds (`read_logdir`) and writes, from the record, every (tag, epoch) still missing for
  the epochs its checkpoint has finished (`epochs_to_rewrite`), before it trains on.
- Throughput points (step = global training step) of an epoch that a kill cut short: the resumed run re-trains
  that epoch and skips the points at or below the largest step the logdir already holds.

Each record line names the logdir it was logged to, so a run that continues a copy of the checkpoints in a new
logdir does not copy the epochs of another run into it. A checkpoint directory from before the record existed
simply has none, and nothing is re-written. Reading never fails on what a kill leaves behind: a record line or
an event record cut short is skipped, as TensorBoard itself skips it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from programkit.userfiles import NotARegularFile, read_bytes

RECORD_FILE = "epochs.jsonl"
# Rank 0 also prints each line on its standard output after this prefix: where the portal can read only a job's log
# (a pod's, on Kubernetes), it reads the record there, checked against programkit.schemas.EPOCH_RECORD.
RECORD_LINE_PREFIX = "dsportal.epoch "
MAX_RECORD_BYTES = 256 * 1024 * 1024  # a line per epoch, about 1 KB: far more epochs than a run has
EVENT_FILE_MARK = "tfevents"  # TensorBoard's own test for an event file name


@dataclass(frozen=True)
class EpochScalars:
    """One finished epoch as rank 0 records it (the per-epoch record every training program writes): its scalars
    by TensorBoard tag (loss/*, lr, auroc/mean, auroc/<Class>; an undefined AUROC is null), and, from programs that
    say them, its images/sec (all workers), the checkpoint saved for it, its wall time and the program's name."""

    epoch: int
    scalars: dict[str, float | None]
    logdir: str
    images_per_sec: float | None = None
    checkpoint: str | None = None
    seconds: float | None = None
    program: str | None = None

    def to_dict(self) -> dict:
        extra = {name: getattr(self, name) for name in ("images_per_sec", "checkpoint", "seconds", "program")
                 if getattr(self, name) is not None}
        return {"epoch": self.epoch, "logdir": self.logdir, "scalars": self.scalars, **extra}

    def to_line(self) -> bytes:
        return (json.dumps(self.to_dict()) + "\n").encode()

    def print_line(self) -> None:
        """The record's line on standard output (RECORD_LINE_PREFIX), for the readers of the job's log."""
        print(f"{RECORD_LINE_PREFIX}{json.dumps(self.to_dict())}", flush=True)


@dataclass
class LoggedSteps:
    """The steps that each tag holds in a logdir's event files."""

    steps: dict[str, set[int]] = field(default_factory=dict)

    def has(self, tag: str, step: int) -> bool:
        return step in self.steps.get(tag, ())

    def add(self, tag: str, step: int) -> None:
        self.steps.setdefault(tag, set()).add(step)

    def last_step(self, tag: str) -> int:
        """The largest step of `tag`, 0 when it has none."""
        return max(self.steps.get(tag, ()), default=0)


def logdir_key(logdir: Path) -> str:
    """How a record line names its logdir: absolute, so that the re-run command (same working directory) matches."""
    return os.path.abspath(logdir)


def run_name(logdir: Path) -> str:
    """The run's name in TensorBoard's HPARAMS tab, the same from every program: its logdir below ~/jobs
    ("dsportal/42/tensorboard", "dsportal/57/tensorboard/trial-3": the cluster's directory, then the job's), one
    per run, so that runs are rows of their own."""
    parts = logdir.resolve().parts
    below = parts[len(parts) - parts[::-1].index("jobs"):] if "jobs" in parts else parts[-2:]
    return "/".join(below) or logdir.name


def record_path(checkpoint_dir: Path) -> Path:
    return checkpoint_dir / RECORD_FILE


def append_record(path: Path, entry: EpochScalars) -> None:
    """Appends one epoch and fsyncs it: the line must be on disk before the checkpoint it describes is saved."""
    created = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as out:
        size = out.seek(0, os.SEEK_END)
        if size:
            out.seek(size - 1)
            # A kill in the middle of the last append left half a line: end it, or this line would join it.
            if out.read(1) != b"\n":
                out.write(b"\n")
        out.write(entry.to_line())
        out.flush()
        os.fsync(out.fileno())
    if created:
        _fsync_directory(path.parent)  # a new file's name is only durable once its directory is


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_record(path: Path) -> dict[int, EpochScalars]:
    """{epoch: its last readable line}; lines cut short by a kill (or otherwise unreadable) are skipped."""
    try:
        data = read_bytes(path, MAX_RECORD_BYTES)
    except (FileNotFoundError, NotARegularFile):  # none yet; or no record of the run's (a FIFO, a link)
        return {}
    epochs: dict[int, EpochScalars] = {}
    for line in data.splitlines():
        entry = parse_line(line)
        if entry is not None:
            epochs[entry.epoch] = entry
    return epochs


def parse_line(line: bytes) -> EpochScalars | None:
    """One record line, or None when it is not a whole, well-formed one."""
    try:
        data = json.loads(line)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        return None
    if not isinstance(data, dict):
        return None
    epoch, logdir, scalars = data.get("epoch"), data.get("logdir"), data.get("scalars")
    if not (isinstance(epoch, int) and epoch >= 1 and isinstance(logdir, str) and isinstance(scalars, dict)):
        return None
    if not all(value is None or isinstance(value, int | float) for value in scalars.values()):
        return None
    extra = {name: data.get(name) for name in ("images_per_sec", "seconds")
             if isinstance(data.get(name), int | float) and not isinstance(data.get(name), bool)}
    extra.update({name: data.get(name) for name in ("checkpoint", "program") if isinstance(data.get(name), str)})
    return EpochScalars(epoch=epoch, scalars={str(tag): value for tag, value in scalars.items()}, logdir=logdir,
                        **extra)


def reset_record(path: Path) -> None:
    """A fresh start: the record's epochs describe checkpoints that are about to be replaced."""
    path.unlink(missing_ok=True)


def read_logdir(logdir: Path) -> LoggedSteps:
    """Every (tag, step) in the event files directly in `logdir` (where the run's writer puts them)."""
    logged = LoggedSteps()
    if not logdir.is_dir():
        return logged
    for path in sorted(logdir.iterdir()):
        if EVENT_FILE_MARK in path.name and path.is_file():
            for step, tag in _tags_and_steps(path):
                logged.add(tag, step)
    return logged


def _tags_and_steps(path: Path) -> Iterator[tuple[int, str]]:
    # TensorBoard's own reader: it stops at a record cut short (or garbled) by a kill, as TensorBoard does, so
    # what counts as logged here is exactly what TensorBoard shows.
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    for event in EventFileLoader(str(path)).Load():
        for value in event.summary.value:
            yield event.step, value.tag


def missing_tags(entry: EpochScalars, logged: LoggedSteps) -> list[str]:
    """The epoch's defined scalars that the logdir does not hold yet, in the record's order."""
    return [tag for tag, value in entry.scalars.items() if value is not None and not logged.has(tag, entry.epoch)]


def epochs_to_rewrite(records: Mapping[int, EpochScalars], logged: LoggedSteps, checkpoint_epoch: int,
                      logdir: str) -> list[EpochScalars]:
    """The epochs to write from the record, oldest first: finished by the checkpoint (a later one is re-trained,
    and logged then), logged to this logdir, and not wholly in it."""
    return [records[epoch] for epoch in sorted(records)
            if epoch <= checkpoint_epoch and records[epoch].logdir == logdir and missing_tags(records[epoch], logged)]
