"""bench.programs' figures, targets and table (pure): the PyTorch program against the TensorFlow one, and PyTorch's
scaling from one host to two, each a median of ratios of jobs run one after the other.

Targets (issue 50), CPU figures of the Slurm box:
  images/s, PyTorch / TensorFlow (2 hosts)      >= 0.8   PyTorch's CPU kernels may trail TensorFlow's oneDNN ones
                                                          on DenseNet's many small convolutions, by at most a fifth
  first point, PyTorch / TensorFlow (2 hosts)   <= 1.0   torchrun and `import torch` start no slower than mpirun,
                                                          TensorFlow, Horovod and a traced graph
  images/s, PyTorch 2 hosts / 1 host            >= 0.75  at least as well as Horovod scales on this box: bench.nodes
                                                          measured 2 nodes x 1 worker at 0.75x 1 node x 1 worker
                                                          (31.4 / 42.1 images/s, docs/results/nodes.json, 2026-11-23)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from bench.results import Target

# kind -> (template, nodes); one worker per node (gpus_per_node 1: one process per node on the box's CPUs)
RUNS = {"tf x2": ("chexnet", 2), "torch x2": ("chexnet-torch", 2), "torch x1": ("chexnet-torch", 1)}
ORDER = ("tf x2", "torch x2", "torch x1")  # torch x2 in the middle: each pair compared runs one after the other
# (name, numerator run, denominator run): the ratios each round gives
RATIOS = (("torch / tf, 2 hosts", "torch x2", "tf x2"), ("torch, 2 hosts / 1 host", "torch x2", "torch x1"))
FIGURES = ("images_per_sec", "first_point_s", "epoch_s")
RATE_OVER_TF, FIRST_POINT_OVER_TF, TWO_HOSTS_OVER_ONE = 0.8, 1.0, 0.75


def order(index: int) -> tuple[str, ...]:
    """Round `index`'s runs: ORDER, reversed every other round (each pair's first side alternates)."""
    return ORDER if index % 2 == 0 else ORDER[::-1]


def job_figures(submitted: float, rates: Sequence[tuple[float, int, float]],
                epochs: Sequence[tuple[float, int, float]]) -> dict[str, Any]:
    """One job's figures from its TensorBoard points, (wall time, step, value) in wall-time order: `rates` its
    images/s points, `epochs` its once-an-epoch points (loss/val). images/s: the median of the points written
    after the first epoch's (None when there are none); first point: submit -> the first images/s point; epoch:
    the median interval between epochs (None with fewer than 2)."""
    first_epoch = epochs[0][0] if epochs else None
    after = [value for wall, _, value in rates if first_epoch is not None and wall > first_epoch]
    walls = [wall for wall, _, _ in epochs]
    intervals = [later - earlier for earlier, later in zip(walls, walls[1:], strict=False)]
    return {"images_per_sec": statistics.median(after) if after else None,
            "first_point_s": rates[0][0] - submitted if rates else None,
            "epoch_s": statistics.median(intervals) if intervals else None,
            "images_per_sec_all": [value for _, _, value in rates], "epoch_s_all": intervals}


def ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def median_of(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def figures(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What is saved: every round (its order and each run's figures), each round's ratios, their medians (the
    targets' figures), and per run the medians of its figures over the rounds."""
    each = [{name: {key: ratio(done[top][key], done[bottom][key]) for key in FIGURES}
             for name, top, bottom in RATIOS} for done in rounds]
    medians = {name: {key: median_of([r[name][key] for r in each]) for key in FIGURES} for name, _, _ in RATIOS}
    runs: dict[str, dict[str, Any]] = {kind: {key: median_of([done[kind][key] for done in rounds]) for key in FIGURES}
                                       for kind in ORDER}
    for kind in ORDER:
        rates = [done[kind]["images_per_sec"] for done in rounds if done[kind]["images_per_sec"] is not None]
        runs[kind].update(template=RUNS[kind][0], nodes=RUNS[kind][1],
                          min=min(rates) if rates else None, max=max(rates) if rates else None)
    return {"rounds": list(rounds), "round_ratios": each, "ratios": medians, "runs": runs}


def targets(data: dict[str, Any]) -> list[Target]:
    ratios = data["ratios"]
    versus, scaling = ratios["torch / tf, 2 hosts"], ratios["torch, 2 hosts / 1 host"]
    checks = (("images/s, PyTorch / TensorFlow, 2 hosts", versus["images_per_sec"], ">=", RATE_OVER_TF),
              ("first point, PyTorch / TensorFlow, 2 hosts", versus["first_point_s"], "<=", FIRST_POINT_OVER_TF),
              ("images/s, PyTorch 2 hosts / 1 host", scaling["images_per_sec"], ">=", TWO_HOSTS_OVER_ONE))
    found = []
    for name, measured, sense, goal in checks:
        met = measured is not None and (measured >= goal if sense == ">=" else measured <= goal)
        found.append(Target(name, measured, f"{sense} {goal}", met, "" if met else where(data, name)))
    return found


def where(data: dict[str, Any], name: str) -> str:
    """Where a target not met goes: each run's medians, the time per epoch (training) against the first point."""
    runs = data["runs"]
    kinds = ("torch x2", "torch x1") if "1 host" in name else ("torch x2", "tf x2")
    return "; ".join(f"{kind}: {_number(runs[kind]['images_per_sec'])} images/s, epoch "
                     f"{_number(runs[kind]['epoch_s'])} s, first point {_number(runs[kind]['first_point_s'])} s"
                     for kind in kinds)


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def verdicts(found: Sequence[Target]) -> list[str]:
    return [f"{t.name}: " + ("none" if t.measured is None else f"{t.measured:.2f}") + f" {t.target}: "
            + ("met" if t.met else "NOT met") + (f"; {t.where}" if t.where else "") for t in found]


def table(data: dict[str, Any]) -> str:
    rounds, runs = data["rounds"], data["runs"]
    lines = [f"The same job on the Slurm box, {len(rounds)} round(s) (CPU figures): medians over the rounds",
             f"{'run':<10}{'template':<15}{'nodes':>6}{'images/s':>10}{'range':>14}{'first point s':>15}"
             f"{'s/epoch':>9}"]
    for kind in ORDER:
        run = runs[kind]
        span = f"{_number(run['min'])}-{_number(run['max'])}"
        lines.append(f"{kind:<10}{run['template']:<15}{run['nodes']:>6}{_number(run['images_per_sec']):>10}"
                     f"{span:>14}{_number(run['first_point_s']):>15}{_number(run['epoch_s']):>9}")
    lines.append("")
    for index, each in enumerate(data["round_ratios"]):
        lines.append(f"round {index + 1} ({', '.join(rounds[index]['order'])}): " + "; ".join(
            f"{name} images/s {_ratio(found['images_per_sec'])}, first point {_ratio(found['first_point_s'])}"
            for name, found in each.items()))
    lines.append("median of the rounds: " + "; ".join(
        f"{name} images/s {_ratio(found['images_per_sec'])}, first point {_ratio(found['first_point_s'])}"
        for name, found in data["ratios"].items()))
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"
