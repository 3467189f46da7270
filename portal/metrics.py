"""What a training run has reached, from its TensorBoard event files: latest images/sec, best mean AUROC.

Shared by the notebooks and the dashboard. The tags are the training's (chexnet writes them, rank 0 only):
`throughput/images_per_sec`, `auroc/mean` and `auroc/<Class>` once per epoch. TF2's `tf.summary.scalar` stores
them as tensors, TF1-style writers as scalars: both are read. A logdir that is missing or still empty gives
empty metrics, not an error: a job that has not started yet has none.

    python -m portal.metrics LOGDIR      # the same as JSON (how the jobs API reads a run as its user)
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

TAG_THROUGHPUT = "throughput/images_per_sec"
TAG_AUROC_MEAN = "auroc/mean"
TAG_LOSS_VAL = "loss/val"  # written every epoch, even when no class has a defined AUROC
AUROC_PREFIX = "auroc/"


@dataclass(frozen=True)
class RunMetrics:
    images_per_sec: float | None = None  # the latest value, all workers together
    best_mean_auroc: float | None = None
    best_epoch: int | None = None  # 1-based; the epoch of best_mean_auroc
    per_class_auroc: dict[str, float] = field(default_factory=dict)  # at best_epoch
    epochs_done: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunMetrics:
        return cls(**data)


def _series(accumulator, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one tag, scalar or tensor, in step order (a resumed run may repeat a step: last wins)."""
    from tensorboard.util import tensor_util

    tags = accumulator.Tags()
    if tag in tags.get("scalars", []):
        points = [(e.step, float(e.value)) for e in accumulator.Scalars(tag)]
    elif tag in tags.get("tensors", []):
        points = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto).item())) for e in accumulator.Tensors(tag)]
    else:
        return []
    return sorted(dict(points).items())


def read_run_metrics(logdir: str | Path) -> RunMetrics:
    logdir = Path(logdir)
    if not logdir.is_dir() or not any(logdir.glob("events.out.tfevents.*")):
        return RunMetrics()
    from tensorboard.backend.event_processing import event_accumulator

    # size_guidance 0: keep every point (the default samples 10,000 scalars, which would drop epochs of a long run).
    accumulator = event_accumulator.EventAccumulator(
        str(logdir), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    accumulator.Reload()
    throughput = _series(accumulator, TAG_THROUGHPUT)
    mean = _series(accumulator, TAG_AUROC_MEAN)
    epochs_done = max(len(_series(accumulator, TAG_LOSS_VAL)), len(mean))
    if not mean:
        return RunMetrics(images_per_sec=throughput[-1][1] if throughput else None, epochs_done=epochs_done)
    best_step, best = max(mean, key=lambda point: point[1])
    per_class = {}
    for tag in accumulator.Tags().get("tensors", []) + accumulator.Tags().get("scalars", []):
        if tag.startswith(AUROC_PREFIX) and tag != TAG_AUROC_MEAN:
            values = dict(_series(accumulator, tag))
            if best_step in values:
                per_class[tag[len(AUROC_PREFIX):]] = values[best_step]
    return RunMetrics(images_per_sec=throughput[-1][1] if throughput else None, best_mean_auroc=best,
                      best_epoch=best_step, per_class_auroc=dict(sorted(per_class.items())), epochs_done=epochs_done)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m portal.metrics LOGDIR", file=sys.stderr)
        return 2
    print(json.dumps(read_run_metrics(args[0]).to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
