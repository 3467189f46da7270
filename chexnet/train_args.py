"""Train CheXNet with Horovod: `python -m chexnet.train --data-dir D --logdir L --checkpoint-dir C ...`.

The command line of `chexnet.train` (the line above is its --help's description): its flags (TrainConfig,
parse_args) and a sweep trial's parameters over them (with_trial). No TensorFlow here: a bad flag is reported at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from programkit.cli import OneLineParser, TrainFlags, UsageError, require_choice
from programkit.trials import trial_params

PROG = "chexnet.train"
GRAPH_OPTIMIZER = ("on", "off")


@dataclass(frozen=True, kw_only=True)
class TrainConfig(TrainFlags):
    """The kit's training flags (programkit.cli.TrainFlags) and chexnet's own."""

    fp16: bool = False
    xla: bool = False
    weights: Path | None = None
    skip_bad: bool = False
    threads: int | None = None
    max_skipped_fraction: float = 0.1  # chexnet.data.integrity.DEFAULT_MAX_SKIPPED_FRACTION, without importing TF
    graph_optimizer: str = "on"  # "off": no Grappler passes (a CPU run starts ~25 s sooner; a GPU run is slower)

    def validate(self) -> None:
        """Raise UsageError naming the flag and what it allows, for the first bad value."""
        self.check_training()
        require_choice("--graph-optimizer", self.graph_optimizer, GRAPH_OPTIMIZER)
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads must be a positive integer (>= 1); got {self.threads}")
        if not 0 <= self.max_skipped_fraction <= 1:
            raise UsageError(f"--max-skipped-fraction must be a number from 0 to 1; got {self.max_skipped_fraction}")
        if self.weights is not None and not self.weights.is_file():
            raise UsageError(f"--weights must name an existing weights file; {self.weights} is not")


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    p = OneLineParser(prog=f"python -m {PROG}", description=__doc__.splitlines()[0])
    TrainConfig.add_train_arguments(p)
    p.add_argument("--fp16", action="store_true", help="mixed precision (mixed_float16 policy)")
    p.add_argument("--xla", action="store_true",
                   help="XLA: auto-clustering for the train step (on CPU it also needs "
                        "TF_XLA_FLAGS=--tf_xla_cpu_global_jit), a compiled predict step")
    p.add_argument("--weights", type=Path, help="local initial weights (.h5: ImageNet notop or a whole model)")
    p.add_argument("--skip-bad", action="store_true", help="skip corrupt records instead of failing")
    p.add_argument("--threads", type=int, help="input pipeline threads (default: tf.data's choice)")
    p.add_argument("--graph-optimizer", default=TrainConfig.graph_optimizer,
                   help="on: TensorFlow's graph optimizations (Grappler), for speed on a GPU; off: none, so a run "
                        "on a few CPU cores starts about 25 s sooner (the tests' setting: jobs_trainer_args)")
    p.add_argument("--max-skipped-fraction", type=float, default=TrainConfig.max_skipped_fraction,
                   help="stop when more than this share of a split's records is unreadable in an epoch (0..1)")
    a = p.parse_args(argv)
    return TrainConfig(**TrainFlags.train_values(a), fp16=a.fp16, xla=a.xla, weights=a.weights, skip_bad=a.skip_bad,
                       threads=a.threads, max_skipped_fraction=a.max_skipped_fraction,
                       graph_optimizer=a.graph_optimizer)


def with_trial(cfg: TrainConfig) -> TrainConfig:
    """`cfg` with the sweep trial's parameters (every rank reads the same file); UsageError when it is unreadable."""
    from chexnet.program import FIELDS

    return cfg if cfg.trial is None else replace(cfg, **trial_params(cfg.trial, FIELDS))
