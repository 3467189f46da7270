"""What the trainer and the hub must agree on, defined once: the models and input pipelines `chexnet.train` accepts,
and the CheXNet paper's AUROC that `chexnet.evaluate` and the notebooks compare against.

Imports nothing at all (no TensorFlow, no numpy): the hub's processes import it to validate a job before anything
is submitted, and they must stay quick to start.
"""

from __future__ import annotations

# tinycnn: three convolutions, for checking a pipeline and a cluster in seconds (chexnet.model.tiny_cnn).
MODELS = ("densenet121", "resnet50", "tinycnn")
# "parallel": reads, decode and batching in parallel, prefetched so input overlaps training (what training uses);
# "sequential": one element at a time, nothing prefetched (the pipeline as first written, for the benchmark).
PIPELINES = ("parallel", "sequential")
PIPELINE_OLD_NAMES = {"new": "parallel", "old": "sequential"}  # named by age: still taken, with a warning

# Test-set AUROC per class published by Rajpurkar et al. 2017 (CheXNet, DenseNet-121), in the dataset's label
# order (programkit.labels.CLASSES); copied here so that nothing reads files outside the package at run time.
CHEXNET_PAPER_AUROC: dict[str, float] = {
    "Atelectasis": 0.8094, "Cardiomegaly": 0.9248, "Effusion": 0.8638, "Infiltration": 0.7345, "Mass": 0.8676,
    "Nodule": 0.7802, "Pneumonia": 0.7680, "Pneumothorax": 0.8887, "Consolidation": 0.7901, "Edema": 0.8878,
    "Emphysema": 0.9371, "Fibrosis": 0.8047, "Pleural_Thickening": 0.8062, "Hernia": 0.9164,
}


def chexnet_paper_mean() -> float:
    """The paper's mean AUROC over the 14 classes."""
    return sum(CHEXNET_PAPER_AUROC.values()) / len(CHEXNET_PAPER_AUROC)
