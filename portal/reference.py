"""Published numbers the notebooks compare against, copied here so that nothing reads files outside the package.

- `CHEXNET_PAPER_AUROC`: test-set AUROC per class of CheXNet (Rajpurkar et al. 2017, DenseNet-121), defined once in
  `programkit.reference` (which the trainer's evaluation uses too) and re-exported here, with the earlier results it
  was compared to, Wang et al. 2017 and Yao et al. 2017.
- `V100_IMAGES_PER_SEC`: CheXNet training throughput on NVIDIA V100 GPUs with Horovod, 1 to 16 GPUs, as Dell
  EMC published it (the scaling study's reference line).
- `AurocTable`: a run's per-class AUROC beside the paper's, as a notebook shows it and the job page does.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass

from programkit.reference import CHEXNET_PAPER_AUROC, chexnet_paper_mean

# class -> AUROC, in the dataset's label order (programkit.labels.CLASSES).
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


# --- a run's AUROC beside the paper's (a notebook's table and the job page's) ---


@dataclass(frozen=True)
class AurocRow:
    name: str
    ours: float | None
    paper: float

    @property
    def difference(self) -> float | None:
        return None if self.ours is None else self.ours - self.paper


class AurocTable:
    """Per-class AUROC of a run beside CheXNet's published test-set AUROC; HTML in a notebook, text elsewhere."""

    def __init__(self, per_class: Mapping[str, float], title: str = "AUROC vs the CheXNet paper"):
        self.title = title
        self.rows = [AurocRow(name, per_class.get(name), paper) for name, paper in CHEXNET_PAPER_AUROC.items()]
        defined = [row.ours for row in self.rows if row.ours is not None]
        self.mean = AurocRow("mean", sum(defined) / len(defined) if defined else None, chexnet_paper_mean())

    @staticmethod
    def _cell(value: float | None, signed: bool = False) -> str:
        if value is None:
            return "undefined"
        return f"{value:+.4f}" if signed else f"{value:.4f}"

    def __str__(self) -> str:
        lines = [self.title, f"{'class':<18}  {'ours':>9}  {'paper':>7}  {'difference':>10}"]
        for row in [*self.rows, self.mean]:
            lines.append(f"{row.name:<18}  {self._cell(row.ours):>9}  {row.paper:>7.4f}  "
                         f"{self._cell(row.difference, signed=True) if row.ours is not None else '':>10}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><td>{html.escape(row.name)}</td><td>{self._cell(row.ours)}</td><td>{row.paper:.4f}</td>"
            f"<td>{self._cell(row.difference, signed=True) if row.ours is not None else ''}</td></tr>"
            for row in [*self.rows, self.mean])
        return (f'<table class="dsportal-auroc"><caption>{html.escape(self.title)}</caption>'
                "<thead><tr><th>class</th><th>ours</th><th>paper</th><th>difference</th></tr></thead>"
                f"<tbody>{body}</tbody></table>")

    def __repr__(self) -> str:
        return str(self)
