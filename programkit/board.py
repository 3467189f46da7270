"""A program's TensorBoard board for exactly-once epochs (programkit.tblog), the same for every program: each epoch's
durable record line before its checkpoint, its scalars to MLflow and to TensorBoard after it, the epochs a kill left
out written again from the record, and throughput points never twice. A program subclasses `EpochBoard` with its
framework's writer: `scalar`, `write_start` (the layout and HPARAMS, once per logdir), `flush` and `close`
(chexnet_torch.board: torch's SummaryWriter; the toy program in tests/: TensorBoard's own event writer)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from programkit import tblog
from programkit.tags import AUROC_TAG_PREFIX, TAG_AUROC_MEAN, TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_THROUGHPUT

if TYPE_CHECKING:
    from tensorboard.compat.proto.summary_pb2 import Summary

    from programkit.tracking import RunTracker

# The custom-scalars layout's charts, every program's (title -> the tags' patterns, drawn on one chart each).
CHARTS = {"images/sec, all workers": [f"^{TAG_THROUGHPUT}$"],
          "validation AUROC (mean and per class)": [f"^{AUROC_TAG_PREFIX}"],
          "loss": [f"^{TAG_LOSS_TRAIN}$", f"^{TAG_LOSS_VAL}$"]}


def hparams_summaries(hparams: Mapping[str, object], trial_id: str,
                      domains: Mapping[str, list[str]] = MappingProxyType({})) -> tuple[Summary, Summary]:
    """TensorBoard's HPARAMS experiment (the hyperparameters, with `domains`' choices, and the metrics every program
    charts) and this run's session, as summaries any writer adds at step 0 (TensorBoard's plugin: no framework)."""
    from tensorboard.plugins.hparams import summary_v2 as hp

    params = {name: hp.HParam(name, hp.Discrete(domains[name]) if name in domains else None) for name in hparams}
    metrics = [hp.Metric(TAG_AUROC_MEAN, display_name="mean AUROC (validation)"),
               hp.Metric(TAG_LOSS_VAL, display_name="validation loss"),
               hp.Metric(TAG_THROUGHPUT, display_name="images/sec (all workers)")]
    return (hp.hparams_config_pb(hparams=list(params.values()), metrics=metrics),
            hp.hparams_pb({params[name]: value for name, value in hparams.items()}, trial_id=trial_id))


class EpochBoard:
    """What the logdir held when the run started, the record, and rank 0's MLflow run (`tracker`, when the job has
    one: programkit.tracking)."""

    def __init__(self, logdir: Path, record: Path, resume: bool) -> None:
        self.logdir, self.record_file = logdir, record
        self.logged = tblog.read_logdir(logdir) if resume else tblog.LoggedSteps()
        if not resume:
            tblog.reset_record(record)  # a fresh start: the record describes checkpoints that will be replaced
        self.tracker: RunTracker | None = None

    # --- the framework's writer: each program's own ---

    def scalar(self, tag: str, value: float, step: int) -> None:
        raise NotImplementedError

    def write_start(self, hparams: Mapping[str, object], trial_id: str) -> None:
        """The custom-scalars layout and the HPARAMS summaries."""
        raise NotImplementedError

    def flush(self) -> None:
        """What was written, on disk."""

    def close(self) -> None:
        """The writer's end."""

    # --- exactly once ---

    def start(self, hparams: Mapping[str, object], trial_id: str) -> None:
        """The layout and the HPARAMS summaries, once per logdir."""
        if self.logged.steps:
            return
        self.write_start(hparams, trial_id)
        self.flush()

    def throughput(self, images_per_sec: float, step: int) -> None:
        if math.isfinite(images_per_sec) and step > self.logged.last_step(TAG_THROUGHPUT):
            self.scalar(TAG_THROUGHPUT, images_per_sec, step)

    def record(self, entry: tblog.EpochScalars) -> None:
        """Before the epoch's checkpoint: the durable line, and its copy on standard output."""
        tblog.append_record(self.record_file, entry)
        entry.print_line()

    def publish(self, entry: tblog.EpochScalars) -> None:
        """After the checkpoint: the epoch's scalars to MLflow, and those the logdir lacks to TensorBoard."""
        if self.tracker is not None:
            self.tracker.epoch(entry)
        self._write(entry)

    def _write(self, entry: tblog.EpochScalars) -> None:
        for tag in tblog.missing_tags(entry, self.logged):
            self.scalar(tag, entry.scalars[tag], entry.epoch)
            self.logged.add(tag, entry.epoch)
        self.flush()

    def catch_up(self, checkpoint_epoch: int) -> int:
        """Writes, from the record, the finished epochs that a kill left out of TensorBoard; how many."""
        entries = tblog.epochs_to_rewrite(tblog.read_record(self.record_file), self.logged, checkpoint_epoch,
                                          tblog.logdir_key(self.logdir))
        for entry in entries:
            self._write(entry)  # MLflow's own catch-up is the tracker's (programkit.tracking)
        return len(entries)
