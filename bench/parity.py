"""AUROC parity: uint8 batches normalised by the model's first layer vs float32 batches normalised on the host.

    python -m bench.parity [--seeds 3] [--images 1200] [--epochs 2] [--image-size 64] [--batch-size 16]

Issue 13 moved the ImageNet normalisation from the input pipeline into the model. This trains the same small
DenseNet-121 both ways on the same synthetic ChestX-ray14 set (resized JPEG records, as `chexnet.data.tfrecords`
writes them; random crops of `--image-size`), one worker on the CPU, once per seed:
- "float32 on the host": the pipeline's uint8 batches mapped through `chexnet.data.decoding.normalised`, into the
  model as it was before (`float_model`: float32 [S, S, 3] straight into the backbone);
- "uint8 to the model": the pipeline's uint8 batches into `chexnet.model.build_model`.
Both arms of a seed start from the same weights and read the same shuffle order (the input pipeline's parallel
decode is not deterministic, so they still differ by as much as two runs of one arm do). Each run's score is the
mean AUROC over the classes of the test split after the last epoch. Target: the means of the two arms over the
seeds differ by at most 0.01. Saved to docs/results/parity.json (bench.results); exit 1 when the target is not met.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from bench.common import records_of, synthetic_set
from bench.results import Target, save

FLOAT, UINT8 = "float32 on the host", "uint8 to the model"
ARMS = (FLOAT, UINT8)
TARGET_DIFFERENCE = 0.01
SPLIT = "test"  # training never reads it; this loop has no validation-driven schedule either
SHARDS = 4


def float_model(image_size: int):
    """The model before issue 13 (chexnet.model at commit ddd8c0c): float32 [S, S, 3], already normalised, straight
    into DenseNet-121. Kept here, outside the product, for this comparison and for the checkpoint tests."""
    import tensorflow as tf

    from chexnet.model import BATCH_NORM_MOMENTUM
    from programkit.labels import NUM_CLASSES

    inputs = tf.keras.Input(shape=(image_size, image_size, 3), name="image")
    backbone = tf.keras.applications.DenseNet121(include_top=False, weights=None, input_tensor=inputs, pooling="avg")
    for layer in backbone.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            layer.momentum = BATCH_NORM_MOMENTUM
    outputs = tf.keras.layers.Dense(NUM_CLASSES, activation="sigmoid", dtype="float32", name="findings")(
        backbone.output)
    return tf.keras.Model(inputs, outputs, name="chexnet_densenet121")


def score(source, arm: str, seed: int, args: argparse.Namespace) -> float:
    """Train one arm from `seed` for `args.epochs`; the mean AUROC of the test split afterwards."""
    import numpy as np
    import tensorflow as tf

    from chexnet.data import decoding
    from chexnet.data.datasets import AUTOTUNE, PipelineConfig, eval_dataset, train_dataset, train_labels
    from chexnet.model import build_model, class_weights, weighted_bce
    from programkit.metrics import auroc_per_class, mean_auroc

    tf.keras.backend.clear_session()
    tf.keras.utils.set_random_seed(seed)  # the same initial weights in both arms: the normalisation has none
    cfg = PipelineConfig(batch_size=args.batch_size, image_size=args.image_size, seed=seed)
    train, test = train_dataset(source, cfg), eval_dataset(source, SPLIT, cfg)
    if arm == FLOAT:
        model = float_model(args.image_size)
        train = train.map(decoding.normalised, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)
        test = test.map(decoding.normalised, num_parallel_calls=AUTOTUNE)
    else:
        model = build_model("densenet121", args.image_size)
    model.compile(optimizer=tf.keras.optimizers.Adam(args.lr), loss=weighted_bce(*class_weights(train_labels(source))))
    model.fit(train, epochs=args.epochs, steps_per_epoch=source.count("train") // args.batch_size, verbose=0)
    predict = tf.function(lambda images: model(images, training=False))
    labels, scores = zip(*[(batch_labels.numpy(), predict(images).numpy()) for images, batch_labels in test],
                         strict=True)
    return mean_auroc(auroc_per_class(np.concatenate(labels), np.concatenate(scores)))


def summary(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def report(runs: list[dict], args: argparse.Namespace) -> tuple[str, dict]:
    """The table that is printed, and the figures that are saved."""
    by_arm = {arm: [run["mean_auroc"] for run in runs if run["arm"] == arm] for arm in ARMS}
    differences = [u - f for f, u in zip(by_arm[FLOAT], by_arm[UINT8], strict=True)]
    stats = {**{arm: summary(values) for arm, values in by_arm.items()}, "difference": summary(differences)}
    lines = [f"AUROC parity, DenseNet-121 at {args.image_size} px, {args.epochs} epochs on {args.images} synthetic "
             f"images (JPEG records), batch {args.batch_size}, 1 worker, CPU; mean test AUROC per run",
             f"{'seed':>6}{FLOAT:>22}{UINT8:>22}{'difference':>12}"]
    for index, seed in enumerate(args.seed_list):
        lines.append(f"{seed:>6}{by_arm[FLOAT][index]:>22.4f}{by_arm[UINT8][index]:>22.4f}{differences[index]:>+12.4f}")
    for what in ("mean", "sd", "min", "max"):
        lines.append(f"{what:>6}{stats[FLOAT][what]:>22.4f}{stats[UINT8][what]:>22.4f}"
                     f"{stats['difference'][what]:>+12.4f}")
    return "\n".join(lines), {"runs": runs, "summary": stats, "settings": {
        "seeds": args.seed_list, "images": args.images, "epochs": args.epochs, "image_size": args.image_size,
        "batch_size": args.batch_size, "lr": args.lr, "original_size": args.original_size,
        "short_side": args.short_side, "split": SPLIT}}


def command(args: argparse.Namespace) -> str:
    return (f"python -m bench.parity --seeds {args.seeds} --images {args.images} --epochs {args.epochs} "
            f"--image-size {args.image_size} --batch-size {args.batch_size} --lr {args.lr:g}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="runs per arm, seeds 0..N-1 (at least 2 for a spread)")
    parser.add_argument("--images", type=int, default=1200, help="synthetic images in the data set")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=64, help="the crop the model is fed")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args(argv)
    for flag, value, least in (("--seeds", args.seeds, 2), ("--images", args.images, 100), ("--epochs", args.epochs, 1),
                               ("--image-size", args.image_size, 32), ("--batch-size", args.batch_size, 1)):
        if value < least:
            parser.error(f"{flag} must be at least {least}; got {value}")
    # The originals are larger than the crop, as in ChestX-ray14 (1024 -> 256 -> 224): CheXNet's ratios.
    args.short_side = args.image_size * 9 // 8
    args.original_size = args.image_size * 3 // 2
    args.seed_list = list(range(args.seeds))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from chexnet.data.tfrecords import JPEG, Storage
    from programkit.data.sources import source_of

    source = source_of(records_of(synthetic_set(args.images, args.original_size), SHARDS,
                                  Storage.of(JPEG, args.short_side)))
    runs = []
    for seed in args.seed_list:
        for arm in ARMS:
            started = time.monotonic()
            runs.append({"seed": seed, "arm": arm, "mean_auroc": score(source, arm, seed, args),
                         "seconds": time.monotonic() - started})
            print(f"seed {seed}, {arm}: mean AUROC {runs[-1]['mean_auroc']:.4f} in {runs[-1]['seconds']:.0f} s",
                  file=sys.stderr, flush=True)
    text, data = report(runs, args)
    difference = data["summary"]["difference"]["mean"]
    target = Target("|mean AUROC difference|, uint8 - float32", abs(difference), f"<= {TARGET_DIFFERENCE}",
                    abs(difference) <= TARGET_DIFFERENCE)
    print(text)
    print(f"{target.name}: {target.measured:.4f} {target.target}: {'met' if target.met else 'NOT met'}")
    print(f"command: {command(args)}")
    print(f"results: {save('parity', command=command(args), targets=[target], data=data)}")
    return 0 if target.met else 1


if __name__ == "__main__":
    sys.exit(main())
