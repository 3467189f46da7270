"""Train CheXNet with Horovod: `python -m chexnet.train --data-dir D --logdir L --checkpoint-dir C ...`.

The command line of `chexnet.train` (the line above is its --help's description): its flags (TrainConfig,
parse_args) and a sweep trial's parameters over them (with_trial). No TensorFlow here: a bad flag is reported at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from programkit.cli import PROGRESS, InputFlags, OneLineParser, UsageError, require_choice, require_positive
from programkit.trials import trial_params

PROG = "chexnet.train"
GRAPH_OPTIMIZER = ("on", "off")


@dataclass(frozen=True, kw_only=True)
class TrainConfig(InputFlags):
    logdir: Path
    checkpoint_dir: Path
    epochs: int = 10
    fp16: bool = False
    xla: bool = False
    resume: bool = False
    weights: Path | None = None
    lr: float = 1e-3
    warmup_epochs: int = 1
    skip_bad: bool = False
    threads: int | None = None
    seed: int = 0
    progress: str = "auto"
    trial: Path | None = None  # a sweep's trial file (programkit.sweep): its parameters; rank 0 reports to its study
    max_skipped_fraction: float = 0.1  # chexnet.data.integrity.DEFAULT_MAX_SKIPPED_FRACTION, without importing TF
    graph_optimizer: str = "on"  # "off": no Grappler passes (a CPU run starts ~25 s sooner; a GPU run is slower)

    def validate(self) -> None:
        """Raise UsageError naming the flag and what it allows, for the first bad value."""
        require_positive({"--epochs": self.epochs, "--batch-size": self.batch_size, "--image-size": self.image_size})
        self.check_inputs()
        require_choice("--progress", self.progress, PROGRESS)
        require_choice("--graph-optimizer", self.graph_optimizer, GRAPH_OPTIMIZER)
        if not self.lr > 0:
            raise UsageError(f"--lr must be a positive number; got {self.lr}")
        if self.warmup_epochs < 0:
            raise UsageError(f"--warmup-epochs must be >= 0; got {self.warmup_epochs}")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads must be a positive integer (>= 1); got {self.threads}")
        if not 0 <= self.max_skipped_fraction <= 1:
            raise UsageError(f"--max-skipped-fraction must be a number from 0 to 1; got {self.max_skipped_fraction}")
        if self.weights is not None and not self.weights.is_file():
            raise UsageError(f"--weights must name an existing weights file; {self.weights} is not")


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    p = OneLineParser(prog=f"python -m {PROG}", description=__doc__.splitlines()[0])
    TrainConfig.add_input_arguments(p)
    p.add_argument("--logdir", type=Path, required=True, help="TensorBoard event files (rank 0 writes)")
    p.add_argument("--checkpoint-dir", type=Path, required=True, help="checkpoints (rank 0 writes, every epoch)")
    p.add_argument("--epochs", type=int, default=TrainConfig.epochs, help="total epochs, counting resumed ones")
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size, help="images per step per worker")
    p.add_argument("--fp16", action="store_true", help="mixed precision (mixed_float16 policy)")
    p.add_argument("--xla", action="store_true",
                   help="XLA: auto-clustering for the train step (on CPU it also needs "
                        "TF_XLA_FLAGS=--tf_xla_cpu_global_jit), a compiled predict step")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --checkpoint-dir")
    p.add_argument("--weights", type=Path, help="local initial weights (.h5: ImageNet notop or a whole model)")
    p.add_argument("--lr", type=float, default=TrainConfig.lr, help="learning rate of ONE worker (x workers)")
    p.add_argument("--warmup-epochs", type=int, default=TrainConfig.warmup_epochs,
                   help="epochs over which the rate ramps from --lr to --lr x workers")
    p.add_argument("--skip-bad", action="store_true", help="skip corrupt records instead of failing")
    p.add_argument("--threads", type=int, help="input pipeline threads (default: tf.data's choice)")
    p.add_argument("--seed", type=int, default=TrainConfig.seed, help="initial weights and shuffling")
    p.add_argument("--progress", default=TrainConfig.progress,
                   help="bar: Keras' step-by-step bar; epoch: one line per epoch (for log files); "
                        "auto: bar on a terminal")
    p.add_argument("--trial", type=Path,
                   help="a sweep's trial.json (python -m programkit.sweep_cli attach): its hyperparameters replace the "
                        "flags', and rank 0 reports each epoch's AUROC to the sweep's study, which may prune it")
    p.add_argument("--graph-optimizer", default=TrainConfig.graph_optimizer,
                   help="on: TensorFlow's graph optimizations (Grappler), for speed on a GPU; off: none, so a run "
                        "on a few CPU cores starts about 25 s sooner (the tests' setting: jobs_trainer_args)")
    p.add_argument("--max-skipped-fraction", type=float, default=TrainConfig.max_skipped_fraction,
                   help="stop when more than this share of a split's records is unreadable in an epoch (0..1)")
    a = p.parse_args(argv)
    return TrainConfig(
        data_dir=a.data_dir, logdir=a.logdir, checkpoint_dir=a.checkpoint_dir, epochs=a.epochs,
        batch_size=a.batch_size, image_size=a.image_size, model=a.model, pipeline=a.pipeline, fp16=a.fp16,
        xla=a.xla, resume=a.resume, weights=a.weights, lr=a.lr, warmup_epochs=a.warmup_epochs,
        skip_bad=a.skip_bad, threads=a.threads, seed=a.seed,
        progress=a.progress, max_skipped_fraction=a.max_skipped_fraction, trial=a.trial,
        graph_optimizer=a.graph_optimizer)


def with_trial(cfg: TrainConfig) -> TrainConfig:
    """`cfg` with the sweep trial's parameters (every rank reads the same file); UsageError when it is unreadable."""
    from chexnet.program import FIELDS

    return cfg if cfg.trial is None else replace(cfg, **trial_params(cfg.trial, FIELDS))
