"""The TensorBoard tags every training program writes (chexnet.train, chexnet_torch.train), defined once and
without TensorFlow: the portal (portal.metrics), the notebooks and the tests read the same names."""

from __future__ import annotations

from programkit.labels import CLASSES

TAG_THROUGHPUT = "throughput/images_per_sec"  # all workers together, every THROUGHPUT_EVERY_STEPS steps
TAG_LOSS_TRAIN = "loss/train"
TAG_LOSS_VAL = "loss/val"
TAG_LR = "lr"
TAG_AUROC_MEAN = "auroc/mean"
TAG_SKIPPED = "data/skipped_records"
AUROC_TAG_PREFIX = "auroc/"
AUROC_TAGS = tuple(f"{AUROC_TAG_PREFIX}{name}" for name in CLASSES)
EPOCH_TAGS = (TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_LR, TAG_AUROC_MEAN, *AUROC_TAGS, TAG_SKIPPED)
ALL_TAGS = (TAG_THROUGHPUT, *EPOCH_TAGS)
THROUGHPUT_EVERY_STEPS = 10
