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


@dataclass(frozen=True, kw_only=True)
class TrainFlags(InputFlags):
    """The flags every training program takes (issue 64: their checks once, in the kit): where it writes, how long,
    its rate, its resume and its sweep's trial. A program's config extends it with its own flags."""

    logdir: Path
    checkpoint_dir: Path
    epochs: int = 10
    resume: bool = False
    lr: float = 1e-3
    warmup_epochs: int = 1
    seed: int = 0
    progress: str = "auto"
    trial: Path | None = None  # a sweep's trial file (programkit.sweep): its parameters; rank 0 reports to its study

    @classmethod
    def add_train_arguments(cls, parser: argparse.ArgumentParser, worker: str = "worker") -> None:
        """The input flags (`add_input_arguments`) and the training's; `worker`: what the program calls one of its
        processes, in the help of --batch-size and --lr."""
        cls.add_input_arguments(parser)
        parser.add_argument("--logdir", type=Path, required=True, help="TensorBoard event files (rank 0 writes)")
        parser.add_argument("--checkpoint-dir", type=Path, required=True,
                            help="checkpoints (rank 0 writes, every epoch)")
        parser.add_argument("--epochs", type=int, default=cls.epochs, help="total epochs, counting resumed ones")
        parser.add_argument("--batch-size", type=int, default=cls.batch_size, help=f"images per step per {worker}")
        parser.add_argument("--resume", action="store_true",
                            help="continue from the latest checkpoint in --checkpoint-dir")
        parser.add_argument("--lr", type=float, default=cls.lr, help=f"learning rate of ONE {worker} (x {worker}s)")
        parser.add_argument("--warmup-epochs", type=int, default=cls.warmup_epochs,
                            help=f"epochs over which the rate ramps from --lr to --lr x {worker}s")
        parser.add_argument("--seed", type=int, default=cls.seed, help="initial weights and shuffling")
        parser.add_argument("--progress", default=cls.progress,
                            help="epoch: one line per epoch (for log files); bar: a step-by-step bar where the "
                                 "program has one; auto: bar on a terminal")
        parser.add_argument("--trial", type=Path,
                            help="a sweep's trial.json (python -m programkit.sweep_cli attach): its hyperparameters "
                                 "replace the flags', and rank 0 reports each epoch's AUROC to the sweep's study, "
                                 "which may prune it")

    @staticmethod
    def train_values(args: argparse.Namespace) -> dict[str, object]:
        """The parsed flags of `add_train_arguments`, as this class's fields."""
        names = ("data_dir", "image_size", "model", "pipeline", "logdir", "checkpoint_dir", "epochs", "batch_size",
                 "resume", "lr", "warmup_epochs", "seed", "progress", "trial")
        return {name: getattr(args, name) for name in names}

    def check_training(self) -> None:
        """Raise UsageError naming the first of these flags whose value is not allowed."""
        require_positive({"--epochs": self.epochs, "--batch-size": self.batch_size, "--image-size": self.image_size})
        self.check_inputs()
        require_choice("--progress", self.progress, PROGRESS)
        if not self.lr > 0:
            raise UsageError(f"--lr must be a positive number; got {self.lr}")
        if self.warmup_epochs < 0:
            raise UsageError(f"--warmup-epochs must be >= 0; got {self.warmup_epochs}")
