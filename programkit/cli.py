"""What the chexnet programs share on their command lines: the input flags, one-line usage errors and exit code 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from programkit.reference import MODELS, PIPELINE_OLD_NAMES, PIPELINES

EXIT_USAGE = 2
PROGRESS = ("auto", "bar", "epoch")  # --progress: every program's (a bar, a line per epoch, or by the terminal)


class UsageError(Exception):
    """A bad argument or unusable data: reported as one line and exit code 2, never a traceback."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints the whole usage block on an error; one line that names the flag is enough."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def require_positive(flags: Mapping[str, int]) -> None:
    for flag, value in flags.items():
        if value < 1:
            raise UsageError(f"{flag} must be a positive integer (>= 1); got {value}")


def require_choice(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UsageError(f"{flag} must be one of {', '.join(allowed)}; got {value!r}")


def pipeline_name(value: str) -> str:
    """--pipeline's value; an old name (new, old) is taken as its new one, with a warning on stderr."""
    if value in PIPELINE_OLD_NAMES:
        print(f"warning: --pipeline {value} is deprecated; it is now called --pipeline {PIPELINE_OLD_NAMES[value]}",
              file=sys.stderr)
        return PIPELINE_OLD_NAMES[value]
    return value


def require_data_dir(data_dir: Path) -> None:
    if not data_dir.is_dir():
        raise UsageError(f"--data-dir must be an existing directory with the dataset; {data_dir} is not")


@dataclass(frozen=True, kw_only=True)
class InputFlags:
    """The flags chexnet.train and chexnet.evaluate share: which data, read how, in what batches, at what size,
    into which model. Each program's config extends it (keyword-only, so the fields of both can have defaults)."""

    data_dir: Path
    image_size: int = 224
    model: str = "densenet121"
    batch_size: int = 32
    pipeline: str = "parallel"

    @classmethod
    def add_input_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """All but --batch-size, whose help each program words for itself."""
        parser.add_argument("--data-dir", type=Path, required=True, help="ChestX-ray14 layout or TFRecords directory")
        parser.add_argument("--image-size", type=int, default=cls.image_size, help="square input side, pixels")
        parser.add_argument("--model", default=cls.model, help=f"one of {', '.join(MODELS)}")
        parser.add_argument("--pipeline", type=pipeline_name, default=cls.pipeline,
                            help=f"input pipeline: {' or '.join(PIPELINES)} (parallel: reads, decode and batches in "
                                 "parallel and prefetched; sequential: one at a time, for comparison)")

    def check_inputs(self) -> None:
        """Raise UsageError naming the first input flag whose value is not allowed (sizes: `require_positive`)."""
        require_choice("--model", self.model, MODELS)
        require_choice("--pipeline", self.pipeline, PIPELINES)
        require_data_dir(self.data_dir)
