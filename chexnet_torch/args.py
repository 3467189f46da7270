"""Train CheXNet with PyTorch DDP: `python -m chexnet_torch.train --data-dir D --logdir L --checkpoint-dir C ...`.

The command line of `chexnet_torch.train`, chexnet.train's where a flag means the same (the data and model flags,
--epochs, --batch-size, --lr, --warmup-epochs, --resume, --seed, --trial, --progress), with PyTorch's own:
--amp and --channels-last (on a GPU), --loader-workers. No torch here: a bad flag is reported at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from programkit.cli import PROGRESS, InputFlags, OneLineParser, UsageError, require_choice, require_positive
from programkit.trials import trial_params

PROG = "chexnet_torch.train"
AMP = ("auto", "off", "bf16", "fp16")
CHANNELS_LAST = ("auto", "on", "off")


@dataclass(frozen=True, kw_only=True)
class TorchConfig(InputFlags):
    logdir: Path
    checkpoint_dir: Path
    epochs: int = 10
    resume: bool = False
    lr: float = 1e-3
    warmup_epochs: int = 1
    seed: int = 0
    progress: str = "auto"
    trial: Path | None = None
    amp: str = "auto"
    channels_last: str = "auto"
    loader_workers: int | None = None  # None: the CPUs this process was given (programkit.cpus), less one

    def validate(self) -> None:
        """Raise UsageError naming the flag and what it allows, for the first bad value."""
        require_positive({"--epochs": self.epochs, "--batch-size": self.batch_size, "--image-size": self.image_size})
        self.check_inputs()
        require_choice("--progress", self.progress, PROGRESS)
        require_choice("--amp", self.amp, AMP)
        require_choice("--channels-last", self.channels_last, CHANNELS_LAST)
        if not self.lr > 0:
            raise UsageError(f"--lr must be a positive number; got {self.lr}")
        if self.warmup_epochs < 0:
            raise UsageError(f"--warmup-epochs must be >= 0; got {self.warmup_epochs}")
        if self.loader_workers is not None and self.loader_workers < 0:
            raise UsageError(f"--loader-workers must be 0 or more; got {self.loader_workers}")


def parse_args(argv: list[str] | None = None) -> TorchConfig:
    p = OneLineParser(prog=f"python -m {PROG}", description=__doc__.splitlines()[0])
    TorchConfig.add_input_arguments(p)
    p.add_argument("--logdir", type=Path, required=True, help="TensorBoard event files (rank 0 writes)")
    p.add_argument("--checkpoint-dir", type=Path, required=True, help="checkpoints (rank 0 writes, every epoch)")
    p.add_argument("--epochs", type=int, default=TorchConfig.epochs, help="total epochs, counting resumed ones")
    p.add_argument("--batch-size", type=int, default=TorchConfig.batch_size, help="images per step per process")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --checkpoint-dir")
    p.add_argument("--lr", type=float, default=TorchConfig.lr, help="learning rate of ONE process (x processes)")
    p.add_argument("--warmup-epochs", type=int, default=TorchConfig.warmup_epochs,
                   help="epochs over which the rate ramps from --lr to --lr x processes")
    p.add_argument("--seed", type=int, default=TorchConfig.seed, help="initial weights and shuffling")
    p.add_argument("--progress", default=TorchConfig.progress, help="epoch: one line per epoch; bar and auto: the same")
    p.add_argument("--trial", type=Path, help="a sweep's trial.json (python -m programkit.sweep_cli attach)")
    p.add_argument("--amp", default=TorchConfig.amp,
                   help="autocast on a GPU: bf16, fp16 (with a gradient scaler) or off; auto: bf16 where the GPU has "
                        "it, else off (always off on CPUs)")
    p.add_argument("--channels-last", default=TorchConfig.channels_last,
                   help="channels-last memory layout on a GPU: on, off; auto: on with a GPU (always off on CPUs)")
    p.add_argument("--loader-workers", type=int,
                   help="DataLoader worker processes per process (default: its share of the CPUs given, less one)")
    a = p.parse_args(argv)
    return TorchConfig(
        data_dir=a.data_dir, logdir=a.logdir, checkpoint_dir=a.checkpoint_dir, epochs=a.epochs,
        batch_size=a.batch_size, image_size=a.image_size, model=a.model, pipeline=a.pipeline, resume=a.resume,
        lr=a.lr, warmup_epochs=a.warmup_epochs, seed=a.seed, progress=a.progress, trial=a.trial, amp=a.amp,
        channels_last=a.channels_last, loader_workers=a.loader_workers)


def with_trial(cfg: TorchConfig) -> TorchConfig:
    """`cfg` with the sweep trial's parameters (those its sweep may search: programkit.trials, its declared fields);
    UsageError when the file is unreadable."""
    from chexnet_torch.program import FIELDS

    return cfg if cfg.trial is None else replace(cfg, **trial_params(cfg.trial, FIELDS))
