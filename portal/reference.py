"""Published numbers the notebooks compare against, copied here so that nothing reads files outside the package.

- `CHEXNET_PAPER_AUROC`: test-set AUROC per class of CheXNet (Rajpurkar et al. 2017, DenseNet-121), defined once in
  `chexnet.reference` (which the trainer's evaluation uses too) and re-exported here, with the earlier results it
  was compared to, Wang et al. 2017 and Yao et al. 2017.
- `V100_IMAGES_PER_SEC`: CheXNet training throughput on NVIDIA V100 GPUs with Horovod, 1 to 16 GPUs, as Dell
  EMC published it (the scaling study's reference line).
"""

from __future__ import annotations

from chexnet.reference import CHEXNET_PAPER_AUROC, chexnet_paper_mean

# class -> AUROC, in the dataset's label order (chexnet.labels.CLASSES).
WANG_2017_AUROC: dict[str, float] = {
    "Atelectasis": 0.716, "Cardiomegaly": 0.807, "Effusion": 0.784, "Infiltration": 0.609, "Mass": 0.706,
    "Nodule": 0.671, "Pneumonia": 0.633, "Pneumothorax": 0.806, "Consolidation": 0.708, "Edema": 0.835,
    "Emphysema": 0.815, "Fibrosis": 0.769, "Pleural_Thickening": 0.708, "Hernia": 0.767,
}
YAO_2017_AUROC: dict[str, float] = {
    "Atelectasis": 0.772, "Cardiomegaly": 0.904, "Effusion": 0.859, "Infiltration": 0.695, "Mass": 0.792,
    "Nodule": 0.717, "Pneumonia": 0.713, "Pneumothorax": 0.841, "Consolidation": 0.788, "Edema": 0.882,
    "Emphysema": 0.829, "Fibrosis": 0.767, "Pleural_Thickening": 0.765, "Hernia": 0.914,
}

# GPUs -> images/sec, all GPUs together (Dell EMC, CheXNet on V100 with Horovod).
V100_IMAGES_PER_SEC: dict[int, float] = {
    1: 185.12, 2: 315.26, 4: 589.36, 8: 1116.99, 12: 1527.60, 16: 1912.82,
}


def scaling_efficiency(throughput: dict[int, float]) -> dict[int, float]:
    """Images/sec at N GPUs over N times the smallest run's per-GPU rate (1.0 is linear scaling)."""
    if not throughput:
        return {}
    base_gpus = min(throughput)
    per_gpu = throughput[base_gpus] / base_gpus
    return {gpus: rate / (gpus * per_gpu) for gpus, rate in sorted(throughput.items())}


__all__ = ["CHEXNET_PAPER_AUROC", "V100_IMAGES_PER_SEC", "WANG_2017_AUROC", "YAO_2017_AUROC", "chexnet_paper_mean",
           "scaling_efficiency"]
