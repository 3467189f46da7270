"""The toy program's board: the kit's exactly-once board (programkit.board) with TensorBoard's own event writer and
protos (no TensorFlow, no PyTorch)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tensorboard.compat.proto import summary_pb2, tensor_pb2, types_pb2
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import metadata as layout_metadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from programkit.board import CHARTS, EpochBoard, hparams_summaries


def _layout() -> summary_pb2.Summary:
    """The custom-scalars layout of the kit's charts."""
    layout = layout_pb2.Layout(category=[layout_pb2.Category(title="toy training", chart=[
        layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=patterns))
        for title, patterns in CHARTS.items()])])
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[layout.SerializeToString()],
                                    tensor_shape={})
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(
        tag=layout_metadata.CONFIG_SUMMARY_TAG, tensor=tensor, metadata=layout_metadata.create_summary_metadata())])


class Board(EpochBoard):
    """TensorBoard's event writer, made on first use."""

    def __init__(self, logdir: Path, record: Path, resume: bool) -> None:
        super().__init__(logdir, record, resume)
        self._writer: EventFileWriter | None = None

    @property
    def writer(self) -> EventFileWriter:
        if self._writer is None:
            self.logdir.mkdir(parents=True, exist_ok=True)
            self._writer = EventFileWriter(str(self.logdir))
        return self._writer

    def _summary(self, summary: summary_pb2.Summary, step: int) -> None:
        self.writer.add_event(Event(summary=summary, step=step))

    def scalar(self, tag: str, value: float, step: int) -> None:
        self._summary(summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]), step)

    def write_start(self, hparams: Mapping[str, object], trial_id: str) -> None:
        self._summary(_layout(), 0)
        for summary in hparams_summaries(hparams, trial_id):
            self._summary(summary, 0)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
