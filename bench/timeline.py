"""Where a training job's first seconds go, on either scheduler: the job's log watched while it starts, and its
first TensorBoard points, cut into stages (pure but for LogWatcher, which polls).

Stages, each from the end of the one before it:
  queue       submit -> the job script's first line (the scheduler placed it; on Kubernetes the launcher pod runs)
  workers     -> every worker pod answers ssh (Kubernetes only: the launcher waits for them before mpirun)
  framework   -> rank 0 says hello: mpirun started the ranks, Python imported TensorFlow and Horovod, hvd.init()
  model       -> the run's plan is logged: data opened, DenseNet-121 built, checkpoint looked for, writer made
  first step  -> the first images/sec point's steps began: tf.function's trace, Grappler, the first batch
  timed steps -> the first images/sec point is written (the steps it measured, from its own rate)
  shown       -> TensorBoard serves it (the writer's flush and TensorBoard's reload; liveness only)

A line is stamped when a poll first sees it, so each boundary is late by at most one poll interval.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

# (key, the log line that ends the stage); in the order they appear.
LOG_MARKS = (
    ("queue", re.compile(r"^chexnet: (?:Slurm job|job) \S+.* launched by ", re.M)),
    ("workers", re.compile(r"^chexnet: \d+ worker pod\(s\) ready after ", re.M)),
    ("framework", re.compile(r"^chexnet\.train: rank 0 of \d+ ", re.M)),
    ("model", re.compile(r"^chexnet\.train: \S+ at \d+px: .* steps/epoch ", re.M)),
)
LABELS = {
    "queue": "submit -> the job's first line (scheduler, job start)",
    "workers": "-> every worker pod answers (Kubernetes)",
    "framework": "-> rank 0 up (mpirun, TensorFlow + Horovod import, hvd.init)",
    "model": "-> data, model built, checkpoint looked for",
    "first step": "-> first step done (trace, Grappler, first batch)",
    "timed steps": "-> first images/sec point written (the steps it timed)",
    "shown": "-> TensorBoard serves it (flush, reload, poll)",
}


class LogWatcher:
    """Polls `read()` (the job's log text) every `every_s` on a thread of its own, stamping each of LOG_MARKS
    with the wall time it was first seen; `stop()` ends it and returns the stamps."""

    def __init__(self, read: Callable[[], str], every_s: float = 0.5):
        self._read, self._every = read, every_s
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = LOG_MARKS[-1][0]  # the marks come in order: once the last is seen, nothing is left to look for
        while not self._stop.is_set() and last not in self.seen:
            try:
                text = self._read()
            except Exception:  # noqa: BLE001 - a log not there yet, or a request that failed: poll again
                text = ""
            now = time.time()
            for key, pattern in LOG_MARKS:
                if key not in self.seen and pattern.search(text):
                    self.seen[key] = now
            self._stop.wait(self._every)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(timeout=30)
        return dict(self.seen)


def stages(submitted: float, seen: Mapping[str, float], point: tuple[float, int, float] | None,
           images_per_step: int, shown: float | None = None) -> dict[str, float | None]:
    """Seconds of each stage (None where a boundary is missing). `point`: the first images/sec point's (wall time,
    step, images/s of all workers); a fresh run's first point at step n timed steps 2..n (the first step, with
    its trace, is not timed), so its rate and `images_per_step` (batch x workers) give how long they took; the
    rest before it is the first step. A boundary seen later than the next one (a late poll) gives the stage 0."""
    marks: list[tuple[str, float | None]] = [(key, seen.get(key)) for key, _ in LOG_MARKS if key != "workers"
                                             or "workers" in seen]
    point_wall = step_start = None
    if point is not None:
        point_wall, step, rate = point
        if rate > 0 and step > 1:
            step_start = point_wall - (step - 1) * images_per_step / rate
    marks += [("first step", step_start), ("timed steps", point_wall)]
    if shown is not None:
        marks.append(("shown", shown))
    return durations(submitted, marks)


def durations(start: float, marks: Sequence[tuple[str, float | None]]) -> dict[str, float | None]:
    """Each mark's stage, in order: the seconds from the mark before it (`start` for the first); None where either
    boundary is missing; 0 where a mark came before the one it follows (a late poll). Shared with
    bench.kube_timeline."""
    found: dict[str, float | None] = {}
    before: float | None = start
    for key, at in marks:
        found[key] = None if at is None or before is None else max(0.0, at - before)
        before = at
    return found


def medians(runs: Sequence[Mapping[str, float | None]], keys: Iterable[str]) -> dict[str, float | None]:
    """Each of `keys`' median over the runs that have it (None where none has)."""
    return {key: statistics.median(values) if (values := [run[key] for run in runs if run.get(key) is not None])
            else None for key in keys}


def median_stages(runs: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Each stage's median over the runs that have it."""
    return medians(runs, [key for key in LABELS if any(key in run for run in runs)])


def stage_table(columns: Mapping[str, Mapping[str, float | None]], labels: Iterable[tuple[str, str]], title: str,
                width: int, cell: int, digits: int) -> list[str]:
    """Lines of a stage table, one column per run or per box: '<stage label>  <s>  <s> ...'."""
    names = list(columns)
    lines = [f"{title:<{width}}" + "".join(f"{name:>{cell}}" for name in names)]
    for key, label in labels:
        cells = [columns[name].get(key) for name in names]
        lines.append(f"{label:<{width}}" + "".join(f"{c:{cell}.{digits}f}" if c is not None else f"{'-':>{cell}}"
                                                   for c in cells))
    return lines


def table(columns: Mapping[str, Mapping[str, float | None]]) -> list[str]:
    """The job's stages that any column has, in seconds to a tenth."""
    labels = [(key, label) for key, label in LABELS.items() if any(key in column for column in columns.values())]
    return stage_table(columns, labels, "stage (s)", 62, 11, 1)


def biggest(stage_seconds: Mapping[str, float | None], count: int = 3) -> str:
    """'first step 14.2 s, framework 3.1 s, ...': the largest stages, as the verdict of a target not met says."""
    known = sorted(((s, k) for k, s in stage_seconds.items() if s is not None), reverse=True)[:count]
    return ", ".join(f"{key} {seconds:.1f} s" for seconds, key in known)
