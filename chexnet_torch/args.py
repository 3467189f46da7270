"""Train CheXNet with PyTorch DDP: `python -m chexnet_torch.train --data-dir D --logdir L --checkpoint-dir C ...`.

The command line of `chexnet_torch.train`, chexnet.train's where a flag means the same (the data and model flags,
--epochs, --batch-size, --lr, --warmup-epochs, --resume, --seed, --trial, --progress), with PyTorch's own:
--amp and --channels-last (on a GPU), --loader-workers. No torch here: a bad flag is reported at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from programkit.cli import OneLineParser, TrainFlags, UsageError, require_choice
from programkit.trials import trial_params

PROG = "chexnet_torch.train"
AMP = ("auto", "off", "bf16", "fp16")
CHANNELS_LAST = ("auto", "on", "off")


@dataclass(frozen=True, kw_only=True)
class TorchConfig(TrainFlags):
    """The kit's training flags (programkit.cli.TrainFlags) and PyTorch's own."""

    amp: str = "auto"
    channels_last: str = "auto"
    loader_workers: int | None = None  # None: the CPUs this process was given (programkit.cpus), less one

    def validate(self) -> None:
        """Raise UsageError naming the flag and what it allows, for the first bad value."""
        self.check_training()
        require_choice("--amp", self.amp, AMP)
        require_choice("--channels-last", self.channels_last, CHANNELS_LAST)
        if self.loader_workers is not None and self.loader_workers < 0:
            raise UsageError(f"--loader-workers must be 0 or more; got {self.loader_workers}")


def parse_args(argv: list[str] | None = None) -> TorchConfig:
    p = OneLineParser(prog=f"python -m {PROG}", description=__doc__.splitlines()[0])
    TorchConfig.add_train_arguments(p, worker="process")
    p.add_argument("--amp", default=TorchConfig.amp,
                   help="autocast on a GPU: bf16, fp16 (with a gradient scaler) or off; auto: bf16 where the GPU has "
                        "it, else off (always off on CPUs)")
    p.add_argument("--channels-last", default=TorchConfig.channels_last,
                   help="channels-last memory layout on a GPU: on, off; auto: on with a GPU (always off on CPUs)")
    p.add_argument("--loader-workers", type=int,
                   help="DataLoader worker processes per process (default: its share of the CPUs given, less one)")
    a = p.parse_args(argv)
    return TorchConfig(**TrainFlags.train_values(a), amp=a.amp, channels_last=a.channels_last,
                       loader_workers=a.loader_workers)


def with_trial(cfg: TorchConfig) -> TorchConfig:
    """`cfg` with the sweep trial's parameters (those its sweep may search: programkit.trials, its declared fields);
    UsageError when the file is unreadable."""
    from chexnet_torch.program import FIELDS

    return cfg if cfg.trial is None else replace(cfg, **trial_params(cfg.trial, FIELDS))
