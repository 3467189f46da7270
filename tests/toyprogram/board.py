"""The toy program's TensorBoard writer, with TensorBoard's own event writer and protos (no TensorFlow, no PyTorch):
the kit's exactly-once record (programkit.tblog) around it, as chexnet_torch.board does with torch's writer."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tensorboard.compat.proto import summary_pb2, tensor_pb2, types_pb2
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import metadata as layout_metadata
from tensorboard.plugins.hparams import summary_v2 as hp
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from programkit import tblog
from programkit.tags import AUROC_TAG_PREFIX, TAG_AUROC_MEAN, TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_THROUGHPUT

if TYPE_CHECKING:
    from programkit.tracking import RunTracker


def _layout() -> summary_pb2.Summary:
    """The custom-scalars layout: the three charts every program shows."""
    charts = {"images/sec, all workers": [f"^{TAG_THROUGHPUT}$"],
              "validation AUROC (mean and per class)": [f"^{AUROC_TAG_PREFIX}"],
              "loss": [f"^{TAG_LOSS_TRAIN}$", f"^{TAG_LOSS_VAL}$"]}
    layout = layout_pb2.Layout(category=[layout_pb2.Category(title="toy training", chart=[
        layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=tags))
        for title, tags in charts.items()])])
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[layout.SerializeToString()],
                                    tensor_shape={})
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(
        tag=layout_metadata.CONFIG_SUMMARY_TAG, tensor=tensor, metadata=layout_metadata.create_summary_metadata())])


class Board:
    """The run's writer (made on first use), what the logdir held when the run started, and the record."""

    def __init__(self, logdir: Path, record: Path, resume: bool) -> None:
        self.logdir, self.record_file = logdir, record
        self.logged = tblog.read_logdir(logdir) if resume else tblog.LoggedSteps()
        if not resume:
            tblog.reset_record(record)
        self._writer: EventFileWriter | None = None
        self.tracker: RunTracker | None = None

    @property
    def writer(self) -> EventFileWriter:
        if self._writer is None:
            self.logdir.mkdir(parents=True, exist_ok=True)
            self._writer = EventFileWriter(str(self.logdir))
        return self._writer

    def _summary(self, summary: summary_pb2.Summary, step: int) -> None:
        self.writer.add_event(Event(summary=summary, step=step))

    def _scalar(self, tag: str, value: float, step: int) -> None:
        self._summary(summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]), step)

    def start(self, hparams: Mapping[str, object], trial_id: str) -> None:
        """The layout and the HPARAMS summaries, once per logdir."""
        if self.logged.steps:
            return
        self._summary(_layout(), 0)
        params = {name: hp.HParam(name) for name in hparams}
        metrics = [hp.Metric(TAG_AUROC_MEAN, display_name="mean AUROC (validation)"),
                   hp.Metric(TAG_LOSS_VAL, display_name="validation loss"),
                   hp.Metric(TAG_THROUGHPUT, display_name="images/sec")]
        self._summary(hp.hparams_config_pb(hparams=list(params.values()), metrics=metrics), 0)
        self._summary(hp.hparams_pb({params[name]: value for name, value in hparams.items()}, trial_id=trial_id), 0)
        self.writer.flush()

    def throughput(self, images_per_sec: float, step: int) -> None:
        if math.isfinite(images_per_sec) and step > self.logged.last_step(TAG_THROUGHPUT):
            self._scalar(TAG_THROUGHPUT, images_per_sec, step)

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
            self._scalar(tag, entry.scalars[tag], entry.epoch)
            self.logged.add(tag, entry.epoch)
        self.writer.flush()

    def catch_up(self, checkpoint_epoch: int) -> int:
        """Writes, from the record, the finished epochs that a kill left out of TensorBoard; how many."""
        entries = tblog.epochs_to_rewrite(tblog.read_record(self.record_file), self.logged, checkpoint_epoch,
                                          tblog.logdir_key(self.logdir))
        for entry in entries:
            self._write(entry)
        return len(entries)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
