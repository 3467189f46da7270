"""Rank 0's TensorBoard for the PyTorch program, with chexnet.train's tags (programkit.tags) and summaries written
by torch's writer and tensorboard's hparams plugin: the custom-scalars layout and the HPARAMS experiment, so both
programs' runs chart and compare alike. Each (tag, epoch) once across kills: the epoch's scalars go to the
per-epoch record (programkit.tblog) before its checkpoint and to TensorBoard after; a resumed run writes, from the
record, what a kill between the two left out, and no throughput point at or below the last step the logdir holds.
A published epoch also goes to the job's MLflow run when it has one (`tracker`, programkit.tracking)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tensorboard.plugins.hparams import summary_v2 as hp
from torch.utils.tensorboard import SummaryWriter

from programkit import tblog
from programkit.reference import MODELS
from programkit.tags import AUROC_TAG_PREFIX, TAG_AUROC_MEAN, TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_THROUGHPUT

if TYPE_CHECKING:
    from programkit.tracking import RunTracker


class Board:
    """The run's writer (made on first use), what the logdir held when the run started, and the record."""

    def __init__(self, logdir: Path, record: Path, resume: bool) -> None:
        self.logdir, self.record_file = logdir, record
        self.logged = tblog.read_logdir(logdir) if resume else tblog.LoggedSteps()
        if not resume:
            tblog.reset_record(record)  # a fresh start: the record describes checkpoints that will be replaced
        self._writer: SummaryWriter | None = None
        self.tracker: RunTracker | None = None  # rank 0's MLflow run, when the job has one (programkit.tracking)

    @property
    def writer(self) -> SummaryWriter:
        if self._writer is None:
            self._writer = SummaryWriter(str(self.logdir))
        return self._writer

    def start(self, hparams: Mapping[str, object], trial_id: str) -> None:
        """The layout and the HPARAMS summaries, once per logdir."""
        if self.logged.steps:
            return
        # torch's own writer of the custom-scalars layout (tensorboard's needs TensorFlow): chexnet's three charts.
        self.writer.add_custom_scalars({"CheXNet training": {
            "images/sec, all workers": ["Multiline", [f"^{TAG_THROUGHPUT}$"]],
            "validation AUROC (mean and per class)": ["Multiline", [f"^{AUROC_TAG_PREFIX}"]],
            "loss": ["Multiline", [f"^{TAG_LOSS_TRAIN}$", f"^{TAG_LOSS_VAL}$"]]}})
        writer = self.writer._get_file_writer()
        domains = {"model": hp.Discrete(list(MODELS))}
        params = {name: hp.HParam(name, domains.get(name)) for name in hparams}
        metrics = [hp.Metric(TAG_AUROC_MEAN, display_name="mean AUROC (validation)"),
                   hp.Metric(TAG_LOSS_VAL, display_name="validation loss"),
                   hp.Metric(TAG_THROUGHPUT, display_name="images/sec (all workers)")]
        writer.add_summary(hp.hparams_config_pb(hparams=list(params.values()), metrics=metrics), 0)
        writer.add_summary(hp.hparams_pb({params[name]: value for name, value in hparams.items()},
                                         trial_id=trial_id), 0)
        self.writer.flush()

    def throughput(self, images_per_sec: float, step: int) -> None:
        if math.isfinite(images_per_sec) and step > self.logged.last_step(TAG_THROUGHPUT):
            self.writer.add_scalar(TAG_THROUGHPUT, images_per_sec, step)

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
            self.writer.add_scalar(tag, entry.scalars[tag], entry.epoch)
            self.logged.add(tag, entry.epoch)
        self.writer.flush()

    def catch_up(self, checkpoint_epoch: int) -> int:
        """Writes, from the record, the finished epochs that a kill left out of TensorBoard; how many."""
        entries = tblog.epochs_to_rewrite(tblog.read_record(self.record_file), self.logged, checkpoint_epoch,
                                          tblog.logdir_key(self.logdir))
        for entry in entries:
            self._write(entry)  # MLflow's own catch-up is the tracker's (programkit.tracking)
        return len(entries)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
