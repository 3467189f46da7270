"""Rank 0's TensorBoard for the PyTorch program: the kit's exactly-once board (programkit.board: the per-epoch record
before each checkpoint, TensorBoard and MLflow after, what a kill left out written again) with torch's writer, and
the kit's custom-scalars layout and HPARAMS experiment, so every program's runs chart and compare alike."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

from programkit.board import CHARTS, EpochBoard, hparams_summaries
from programkit.reference import MODELS


class Board(EpochBoard):
    """The kit's exactly-once board (programkit.board) with torch's writer, made on first use."""

    def __init__(self, logdir: Path, record: Path, resume: bool) -> None:
        super().__init__(logdir, record, resume)
        self._writer: SummaryWriter | None = None

    @property
    def writer(self) -> SummaryWriter:
        if self._writer is None:
            self._writer = SummaryWriter(str(self.logdir))
        return self._writer

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.writer.add_scalar(tag, value, step)

    def write_start(self, hparams: Mapping[str, object], trial_id: str) -> None:
        # torch's own writer of the custom-scalars layout (tensorboard's needs TensorFlow): the kit's three charts.
        self.writer.add_custom_scalars({"CheXNet training": {
            title: ["Multiline", patterns] for title, patterns in CHARTS.items()}})
        writer = self.writer._get_file_writer()
        for summary in hparams_summaries(hparams, trial_id, {"model": list(MODELS)}):
            writer.add_summary(summary, 0)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
