"""Evaluate a CheXNet checkpoint on the test split: `python -m chexnet.evaluate --checkpoint C --data-dir D --out O`.

Prints per-class AUROC beside the CheXNet paper's, and writes O/auroc.json and O/roc.png (ROC curves).
Exit codes: 0 done, 2 bad arguments, data or checkpoint (one line on stderr, no traceback).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from programkit.cli import EXIT_USAGE, InputFlags, OneLineParser, UsageError, require_positive
from programkit.labels import CLASSES
from programkit.reference import CHEXNET_PAPER_AUROC, chexnet_paper_mean

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

PROG = "chexnet.evaluate"
SPLIT = "test"
FIGURE_INCHES = (8, 8)
FIGURE_DPI = 110


@dataclass(frozen=True, kw_only=True)
class EvalConfig(InputFlags):
    checkpoint: Path
    out: Path
    ten_crop: bool = False

    def validate(self) -> None:
        require_positive({"--image-size": self.image_size, "--batch-size": self.batch_size})
        self.check_inputs()
        if not self.checkpoint.exists() and not Path(f"{self.checkpoint}.index").is_file():
            raise UsageError(f"--checkpoint must be a checkpoint directory or prefix; {self.checkpoint} is neither")


def parse_args(argv: list[str] | None = None) -> EvalConfig:
    p = OneLineParser(prog=f"python -m {PROG}", description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, required=True, help="checkpoint directory (latest used) or prefix")
    EvalConfig.add_input_arguments(p)
    p.add_argument("--out", type=Path, required=True, help="where auroc.json and roc.png go")
    p.add_argument("--batch-size", type=int, default=EvalConfig.batch_size, help="images per prediction step")
    p.add_argument("--ten-crop", action="store_true",
                   help="average the predictions of 10 crops per image (corners, centre, mirrored), as CheXNet did; "
                        "needs resized records (python -m chexnet.data.tfrecords --encoding jpeg)")
    a = p.parse_args(argv)
    return EvalConfig(checkpoint=a.checkpoint, data_dir=a.data_dir, out=a.out, image_size=a.image_size,
                      model=a.model, batch_size=a.batch_size, pipeline=a.pipeline, ten_crop=a.ten_crop)


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_args(argv)
        cfg.validate()
        labels, scores, checkpoint = predict_test_split(cfg)
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    from programkit.metrics import auroc_per_class, mean_auroc

    per_class = auroc_per_class(labels, scores)
    report = {"checkpoint": checkpoint, "split": SPLIT, "images": int(len(labels)), "model": cfg.model,
              "image_size": cfg.image_size, "auroc": per_class, "mean_auroc": mean_auroc(per_class),
              "undefined": [name for name, value in per_class.items() if value is None],
              "chexnet_paper_auroc": CHEXNET_PAPER_AUROC, "chexnet_paper_mean_auroc": chexnet_paper_mean()}
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "auroc.json").write_text(json.dumps(report, indent=2) + "\n")
    plot_roc_curves(labels, scores, per_class, cfg.out / "roc.png")
    print(comparison_table(per_class, len(labels)))
    print(f"wrote {cfg.out / 'auroc.json'} and {cfg.out / 'roc.png'}")
    return 0


def predict_test_split(cfg: EvalConfig) -> tuple[np.ndarray, np.ndarray, str]:
    """(labels, scores, the checkpoint used) for every image of the test split."""
    import numpy as np
    import tensorflow as tf

    from chexnet.data.datasets import PipelineConfig, eval_dataset
    from chexnet.model import build_model
    from programkit.data.chestxray14 import DataError
    from programkit.data.sources import source_of

    try:
        source = source_of(cfg.data_dir)
        pipeline_cfg = PipelineConfig(pipeline=cfg.pipeline, batch_size=cfg.batch_size, image_size=cfg.image_size,
                                      ten_crop=cfg.ten_crop)
        model = build_model(cfg.model, cfg.image_size)
        batches = eval_dataset(source, SPLIT, pipeline_cfg, 0, 1)
    except (DataError, ValueError) as error:
        raise UsageError(str(error)) from None
    if source.count(SPLIT) < 1:
        raise UsageError(f"--data-dir {cfg.data_dir} has no {SPLIT} images")
    checkpoint = _restore(model, cfg)
    predict = tf.function(lambda images: model(images, training=False), reduce_retracing=True)
    labels, scores = [], []
    for images, batch_labels in batches:
        scores.append((average_over_crops(predict, images) if cfg.ten_crop else predict(images)).numpy())
        labels.append(batch_labels.numpy())
    return np.concatenate(labels), np.concatenate(scores), checkpoint


def average_over_crops(predict, images: tf.Tensor) -> tf.Tensor:
    """images [B, K, S, S, C] (K crops of each image) -> the mean of the K predictions of each image, [B, classes]."""
    import tensorflow as tf

    shape = tf.shape(images)
    scores = predict(tf.reshape(images, tf.concat([[shape[0] * shape[1]], shape[2:]], axis=0)))
    return tf.reduce_mean(tf.reshape(scores, [shape[0], shape[1], -1]), axis=1)


def _restore(model, cfg: EvalConfig) -> str:
    import tensorflow as tf

    path = tf.train.latest_checkpoint(str(cfg.checkpoint)) if cfg.checkpoint.is_dir() else str(cfg.checkpoint)
    if path is None:
        raise UsageError(f"--checkpoint {cfg.checkpoint} holds no checkpoint (no 'checkpoint' index file)")
    try:
        # Only the model is needed; the optimizer state and the training counters are left unread on purpose.
        tf.train.Checkpoint(model=model).restore(path).expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(f"--checkpoint {path} does not fit --model {cfg.model}: {first_line}") from None
    return path


def comparison_table(per_class: dict[str, float | None], n_images: int) -> str:
    """Our AUROC beside the CheXNet paper's, one row per class, then the means."""
    from programkit.metrics import mean_auroc

    def cell(value: float | None) -> str:
        return "undefined" if value is None or math.isnan(value) else f"{value:.4f}"

    width = max(len(name) for name in CLASSES)
    rows = [f"AUROC on the {SPLIT} split ({n_images} images) vs the CheXNet paper (Rajpurkar et al. 2017)",
            f"{'class':<{width}}  {'ours':>9}  {'paper':>9}  {'difference':>10}"]
    for name in CLASSES:
        ours, paper = per_class[name], CHEXNET_PAPER_AUROC[name]
        difference = "" if ours is None else f"{ours - paper:+.4f}"
        rows.append(f"{name:<{width}}  {cell(ours):>9}  {paper:>9.4f}  {difference:>10}")
    ours_mean = mean_auroc(per_class)
    difference = "" if ours_mean is None else f"{ours_mean - chexnet_paper_mean():+.4f}"
    rows.append(f"{'mean':<{width}}  {cell(ours_mean):>9}  {chexnet_paper_mean():>9.4f}  {difference:>10}")
    return "\n".join(rows)


def plot_roc_curves(labels: np.ndarray, scores: np.ndarray, per_class: dict[str, float | None], path: Path) -> None:
    """One ROC curve per defined class, on one figure, written as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display on compute nodes
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    figure, axes = plt.subplots(figsize=FIGURE_INCHES)
    for index, name in enumerate(CLASSES):
        if per_class[name] is None:
            continue
        false_positive, true_positive, _ = roc_curve(labels[:, index] > 0.5, scores[:, index])
        axes.plot(false_positive, true_positive, linewidth=1, label=f"{name} ({per_class[name]:.3f})")
    axes.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=0.8, label="chance")
    axes.set(xlabel="false positive rate", ylabel="true positive rate", xlim=(0, 1), ylim=(0, 1),
             title=f"CheXNet ROC curves, {SPLIT} split")
    axes.legend(loc="lower right", fontsize="small")
    figure.savefig(path, dpi=FIGURE_DPI, bbox_inches="tight")
    plt.close(figure)


if __name__ == "__main__":
    sys.exit(main())
