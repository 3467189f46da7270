"""What a training run has reached, from its TensorBoard event files: latest images/sec, best mean AUROC, the
last epochs' values of both (the dashboard's sparklines) and how long an epoch takes (its time left).

Shared by the notebooks and the dashboard. The tags are the training's (chexnet writes them, rank 0 only):
`throughput/images_per_sec`, `auroc/mean` and `auroc/<Class>` once per epoch. TF2's `tf.summary.scalar` stores
them as tensors, TF1-style writers as scalars: both are read. A logdir that is missing or still empty gives
empty metrics, not an error: a job that has not started yet has none.

    python -m portal.metrics LOGDIR      # the same as JSON (how the jobs API reads a run as its user)

That JSON comes from a process of the user's, reading files of the user's: the dashboard (root) checks it like
any input (`RunMetrics.from_json`: types, finite numbers, bounded sizes) and shows a bad answer as unreadable.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import stat
import statistics
import sys
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path

from portal.errors import BadAnswer
from portal.first_import import loaded
from portal.inputs import finite_json

TAG_THROUGHPUT = "throughput/images_per_sec"
TAG_AUROC_MEAN = "auroc/mean"
TAG_LOSS_VAL = "loss/val"  # written every epoch, even when no class has a defined AUROC
AUROC_PREFIX = "auroc/"
# Bounds on what a run can report: 14 classes (and room for other datasets), names as short as tags are.
MAX_OUTPUT_BYTES = 64 * 1024
MAX_CLASSES = 256
MAX_CLASS_NAME = 128
MAX_EPOCHS = 1_000_000
MAX_NOTE = 500
MAX_SERIES = 200  # epochs of history kept for a sparkline: the latest ones
MAX_EPOCH_SECONDS = 366 * 24 * 3600.0
MAX_EVENT_BYTES = 128 * 2**20  # a run's event files, all together: a CheXNet run of 1,000 epochs writes ~20 MB


class MetricsError(BadAnswer, ValueError):
    """What `python -m portal.metrics` answered is not metrics (the message says what is wrong)."""


@dataclass(frozen=True)
class RunMetrics:
    images_per_sec: float | None = None  # the latest value, all workers together
    best_mean_auroc: float | None = None
    best_epoch: int | None = None  # 1-based; the epoch of best_mean_auroc
    per_class_auroc: dict[str, float] = field(default_factory=dict)  # at best_epoch
    epochs_done: int = 0
    unreadable: str = ""  # why the metrics could not be read; the fields above are then empty
    # Per epoch, oldest first, the last MAX_SERIES epochs that have a value (a sparkline's points).
    images_per_sec_series: tuple[float, ...] = ()
    mean_auroc_series: tuple[float, ...] = ()
    epoch_seconds: float | None = None  # median wall time between two epochs' ends; None before the second

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object) -> RunMetrics:
        """Checked field by field; MetricsError for anything that is not what `to_dict` writes."""
        if not isinstance(data, dict):
            raise MetricsError(f"a JSON {type(data).__name__}, not an object")
        unknown = sorted(str(k)[:40] for k in set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise MetricsError(f"unknown field {unknown[0]!r}")
        note = data.get("unreadable", "")
        if not isinstance(note, str) or len(note) > MAX_NOTE:
            raise MetricsError(f"unreadable: not a string of at most {MAX_NOTE} characters")
        return cls(images_per_sec=_number(data, "images_per_sec", 0.0, math.inf),
                   best_mean_auroc=_number(data, "best_mean_auroc", 0.0, 1.0),
                   best_epoch=_whole(data, "best_epoch", optional=True),
                   per_class_auroc=_per_class(data.get("per_class_auroc", {})),
                   epochs_done=_whole(data, "epochs_done", optional=True) or 0, unreadable=note,
                   images_per_sec_series=_numbers(data, "images_per_sec_series", 0.0, math.inf),
                   mean_auroc_series=_numbers(data, "mean_auroc_series", 0.0, 1.0),
                   epoch_seconds=_number(data, "epoch_seconds", 0.0, MAX_EPOCH_SECONDS))

    @classmethod
    def from_json(cls, text: str) -> RunMetrics:
        return cls.from_dict(finite_json(text, MAX_OUTPUT_BYTES, MetricsError))


def _number(data: dict, name: str, low: float, high: float) -> float | None:
    """A finite number in [low, high], or None (absent or null: not reached yet)."""
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MetricsError(f"{name}: a {type(value).__name__}, not a number")
    if not math.isfinite(value) or not low <= value <= high:
        raise MetricsError(f"{name}: {str(value)[:20]} is not a finite number in [{low}, {high}]")
    return float(value)


def _numbers(data: dict, name: str, low: float, high: float) -> tuple[float, ...]:
    """A list of at most MAX_SERIES finite numbers in [low, high] (absent: none; null is not a value here)."""
    raw = data.get(name, [])
    if not isinstance(raw, list) or len(raw) > MAX_SERIES:
        raise MetricsError(f"{name}: not a list of at most {MAX_SERIES} numbers")
    found = []
    for value in raw:
        number = _number({name: value}, name, low, high)
        if number is None:
            raise MetricsError(f"{name}: null in the list; allowed: finite numbers in [{low}, {high}]")
        found.append(number)
    return tuple(found)


def _whole(data: dict, name: str, optional: bool = False) -> int | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if type(value) is not int or not 0 <= value <= MAX_EPOCHS:
        raise MetricsError(f"{name}: {str(value)[:20]!r} is not a whole number in 0-{MAX_EPOCHS}")
    return value


def _per_class(raw: object) -> dict[str, float]:
    if not isinstance(raw, dict) or len(raw) > MAX_CLASSES:
        raise MetricsError(f"per_class_auroc: not an object of at most {MAX_CLASSES} classes")
    found = {}
    for name in raw:
        if len(name) > MAX_CLASS_NAME or not name.isprintable():
            raise MetricsError(f"per_class_auroc: class name {name[:20]!r}... is not a short printable name")
        found[name] = _number(raw, name, 0.0, 1.0)
    if None in found.values():
        raise MetricsError("per_class_auroc: a class without a value")
    return found


def _points(accumulator, tag: str) -> dict[int, tuple[float, float]]:
    """step -> (value, wall time) of one tag, scalar or tensor (a resumed run may repeat a step: the last wins).
    A class without positives in the validation set has no AUROC: such a point (NaN) is not a value."""
    loaded("tensorboard.util.tensor_util")
    from tensorboard.util import tensor_util

    tags = accumulator.Tags()
    if tag in tags.get("scalars", []):
        points = [(e.step, float(e.value), e.wall_time) for e in accumulator.Scalars(tag)]
    elif tag in tags.get("tensors", []):
        points = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto).item()), e.wall_time)
                  for e in accumulator.Tensors(tag)]
    else:
        return {}
    return {step: (value, wall) for step, value, wall in points if math.isfinite(value)}


def _series(accumulator, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one tag in step order."""
    return sorted((step, value) for step, (value, _) in _points(accumulator, tag).items())


def epoch_seconds(epoch_ends: list[float]) -> float | None:
    """The median wall time between consecutive epochs' ends (in epoch order); None before the second epoch. The
    median, so the hours a requeued job waited between two epochs do not count."""
    gaps = [later - earlier for earlier, later in itertools.pairwise(epoch_ends) if later > earlier]
    return statistics.median(gaps) if gaps else None


def per_epoch(samples: list[tuple[float, float]], epoch_ends: list[float]) -> list[float]:
    """One value per epoch from samples taken during training ((wall time, value): chexnet writes images/sec
    every few steps, at global steps, not epochs): the median of those written after the previous epoch's end
    and up to its own. An epoch without samples (or whose end was re-written later, by a resumed run) has none."""
    ordered = sorted(samples)
    walls = [wall for wall, _ in ordered]
    found, start = [], -math.inf
    for end in epoch_ends:
        inside = ordered[bisect.bisect_right(walls, start):bisect.bisect_right(walls, end)]
        if inside:
            found.append(statistics.median(value for _, value in inside))
        start = max(start, end)
    return found


def _history(accumulator, mean: list[tuple[int, float]]) -> dict:
    """The fields of RunMetrics that follow the run epoch by epoch: the last images/sec, the series, the pace
    (`mean`: the run's mean AUROC points, which the caller has read already)."""
    throughput = _points(accumulator, TAG_THROUGHPUT)
    loss_val = _points(accumulator, TAG_LOSS_VAL)
    epoch_ends = [loss_val[step][1] for step in sorted(loss_val)]
    rates = per_epoch([(wall, value) for value, wall in throughput.values()], epoch_ends)
    seconds = epoch_seconds(epoch_ends)
    return {"images_per_sec": throughput[max(throughput)][0] if throughput else None,
            "images_per_sec_series": tuple(rates[-MAX_SERIES:]),
            "mean_auroc_series": tuple(value for _, value in mean[-MAX_SERIES:]),
            "epochs_done": max(len(loss_val), len(mean)),
            "epoch_seconds": seconds if seconds is None or seconds <= MAX_EPOCH_SECONDS else None}


def checked_event_files(logdir: Path) -> list[Path]:
    """The run's event files, each a regular file (not a link, FIFO or device: the logdir is the user's to fill)
    and all together at most MAX_EVENT_BYTES; MetricsError naming the first that is not."""
    files, total = sorted(logdir.glob("events.out.tfevents.*")), 0
    for path in files:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):
            raise MetricsError(f"{path.name} is not a regular file: not read")
        total += info.st_size
        if total > MAX_EVENT_BYTES:
            raise MetricsError(f"the event files hold more than {MAX_EVENT_BYTES // 2**20} MB: not read")
    return files


def read_run_metrics(logdir: str | Path) -> RunMetrics:
    logdir = Path(logdir)
    try:
        if not logdir.is_dir() or not checked_event_files(logdir):
            return RunMetrics()
    except MetricsError as err:
        return RunMetrics(unreadable=str(err))
    loaded("tensorboard.backend.event_processing.event_accumulator")
    from tensorboard.backend.event_processing import event_accumulator

    # size_guidance 0: keep every point (the default samples 10,000 scalars, which would drop epochs of a long run).
    accumulator = event_accumulator.EventAccumulator(
        str(logdir), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    accumulator.Reload()
    mean = _series(accumulator, TAG_AUROC_MEAN)
    history = _history(accumulator, mean)
    if not mean:
        return RunMetrics(**history)
    best_step, best = max(mean, key=lambda point: point[1])
    per_class = {}
    for tag in accumulator.Tags().get("tensors", []) + accumulator.Tags().get("scalars", []):
        if tag.startswith(AUROC_PREFIX) and tag != TAG_AUROC_MEAN:
            values = dict(_series(accumulator, tag))
            if best_step in values:
                per_class[tag[len(AUROC_PREFIX):]] = values[best_step]
    return RunMetrics(best_mean_auroc=best, best_epoch=best_step, per_class_auroc=dict(sorted(per_class.items())),
                      **history)


def record_lines(text: str, prefix: str | None = None) -> dict[int, dict]:
    """The per-epoch record's lines in a job's log (`dsportal.epoch <json>`, programkit.tblog.RECORD_LINE_PREFIX,
    every program's rank 0), or with `prefix=""` in the record's own file (checkpoints/epochs.jsonl), each checked
    against programkit.schemas.EPOCH_RECORD before it counts (both are the user's to write); {epoch: its last line},
    since a resumed run records an epoch again."""
    from programkit.schemas import EPOCH_RECORD, SchemaError, check
    from programkit.tblog import RECORD_LINE_PREFIX

    prefix = RECORD_LINE_PREFIX if prefix is None else prefix
    found: dict[int, dict] = {}
    for line in text.splitlines():
        if not line.startswith(prefix) or len(line) > MAX_OUTPUT_BYTES:
            continue
        try:
            entry = finite_json(line[len(prefix):], MAX_OUTPUT_BYTES, MetricsError)
            check(EPOCH_RECORD, entry, "epoch record")
        except (MetricsError, SchemaError):
            continue
        found[entry["epoch"]] = entry
    return found


def metrics_of_records(records: dict[int, dict]) -> RunMetrics:
    """What the job page shows, from the per-epoch record's lines: the latest images/sec, the best epoch's mean and
    per-class AUROC, the epochs done and the series of both (their last MAX_SERIES epochs)."""
    epochs = sorted(records)[-MAX_EPOCHS:]
    means = {e: records[e]["scalars"].get("auroc/mean") for e in epochs}
    means = {e: v for e, v in means.items() if v is not None}
    rates = [records[e].get("images_per_sec") for e in epochs]
    rates = [r for r in rates if r is not None][-MAX_SERIES:]
    best = max(means, key=lambda e: (means[e], -e)) if means else None
    per_class = {} if best is None else {tag[len(AUROC_PREFIX):]: value for tag, value in records[best]["scalars"]
                                         .items() if tag.startswith(AUROC_PREFIX) and tag != TAG_AUROC_MEAN
                                         and value is not None}
    return RunMetrics(images_per_sec=rates[-1] if rates else None,
                      best_mean_auroc=None if best is None else means[best], best_epoch=best,
                      per_class_auroc=dict(list(per_class.items())[:MAX_CLASSES]),
                      epochs_done=max(epochs, default=0), images_per_sec_series=tuple(rates),
                      mean_auroc_series=tuple(means[e] for e in sorted(means))[-MAX_SERIES:])


def without_tensorflow() -> None:
    """TensorBoard's event reader on its own stub of TensorFlow (its `no_tensorflow` build's switch, a module named
    tensorboard.compat.notf), as TensorBoard runs where TensorFlow is not installed. The helper the dashboard runs as
    a user then reads a run's figures in a fraction of a second instead of importing TensorFlow (1.7 s here), and
    TensorFlow's import writes nothing into the user's home (~/.keras/keras.json): reading is only reading."""
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m portal.metrics LOGDIR", file=sys.stderr)
        return 2
    without_tensorflow()
    print(json.dumps(read_run_metrics(args[0]).to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
