"""What bench.pipeline prints and saves, from the rates its workers measured: pure functions, no TensorFlow.

- per core: images/s divided by the cores the process was pinned to;
- the per-image cost breakdown: CPU microseconds per image (cores x 1 / images/s) of each cumulative stage, and what
  each stage adds to the one before;
- cores per GPU: how many of this machine's cores feed one H100 (bench/data/h100_training_throughput.csv) at the
  per-core rate of the JPEG-records pipeline, and what an 8-GPU node needs.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from bench.common import Measurement
from bench.results import Target

H100_CSV = Path(__file__).resolve().parent / "data" / "h100_training_throughput.csv"
H100_SOURCE = "measured with PyTorch on an H100 by the project, input already on the GPU"
NODE_GPUS = 8
MODEL = "densenet121"
TARGET_RATE, TARGET_CORES, TARGET_RATIO = 2000.0, 2, 0.85

Samples = dict[int, dict[str, list[float]]]  # cores -> row name -> one figure per round (images/s, or CPU us)


def measurements(samples: Samples, cores: int, names: tuple[str, ...] | list[str]) -> list[Measurement]:
    return [Measurement(name, tuple(samples[cores][name])) for name in names]


def median_of(samples: Samples, cores: int, name: str) -> float:
    return Measurement(name, tuple(samples[cores][name])).median


# --- per core ---------------------------------------------------------------------------------------------------

def per_core_table(samples: Samples, names: tuple[str, ...]) -> str:
    """images/s per core (median / cores) of each row at each core count, side by side."""
    counts = sorted(samples)
    width = max(len(name) for name in names) + 2
    header = "".join(f"{f'{c} core' + ('s' if c > 1 else ''):>12}" for c in counts)
    lines = ["images/s per core (median images/s / cores the process was pinned to)", f"{'':{width}}{header}"]
    for name in names:
        lines.append(f"{name:{width}}" + "".join(f"{median_of(samples, c, name) / c:>12,.0f}" for c in counts))
    return "\n".join(lines)


# --- the per-image cost breakdown ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class StageCost:
    stage: str
    images_per_sec: float  # median
    spread: str
    cpu_us: float  # cores x 1 / images/s: CPU microseconds per image of the pipeline up to and including this stage
    added_us: float  # what this stage adds to the one before (the first: all of it)
    used_us: float  # CPU microseconds per image the measuring process used (median), all threads
    used_added_us: float


def cpu_us_per_image(images_per_sec: float, cores: int) -> float:
    """cores x 1 / rate: the CPU time one image costs when the pipeline keeps all its cores busy."""
    return cores * 1e6 / images_per_sec if images_per_sec > 0 else math.inf


def breakdown(stages: list[Measurement], used: list[float], cores: int) -> list[StageCost]:
    """Cumulative stages, in pipeline order, and the CPU each used per image -> each one's CPU cost per image and
    its increment over the previous stage."""
    costs, before, used_before = [], 0.0, 0.0
    for stage, used_us in zip(stages, used, strict=True):
        cost = cpu_us_per_image(stage.median, cores)
        costs.append(StageCost(stage.name, stage.median, stage.spread, cost, cost - before, used_us,
                               used_us - used_before))
        before, used_before = cost, used_us
    return costs


def breakdown_table(costs: list[StageCost], cores: int) -> str:
    width = max(len(c.stage) for c in costs) + 2
    lines = [f"Per-image cost of the JPEG-records training pipeline, {cores} core{'s' if cores > 1 else ''}, each "
             "stage added to the ones above. CPU us per image: cores x 1 / images/s; measured: the CPU time the "
             "process used (lower when a stage leaves cores idle)",
             f"{'stage':{width}}{'images/s':>10}{'spread':>16}{'CPU us/image':>14}{'this stage':>12}"
             f"{'measured':>10}{'this stage':>12}"]
    for c in costs:
        lines.append(f"{c.stage:{width}}{c.images_per_sec:>10,.0f}{c.spread:>16}{c.cpu_us:>14,.1f}{c.added_us:>+12,.1f}"
                     f"{c.used_us:>10,.1f}{c.used_added_us:>+12,.1f}")
    return "\n".join(lines)


# --- ablations ---------------------------------------------------------------------------------------------------

def ablation_rows(rows: list[Measurement], limit: Measurement, reference: Measurement) -> list[dict]:
    """Each variant's median, spread, ratio to the decode limit and change against `reference`, same rounds."""
    return [{"name": row.name, "median": row.median, "spread": [min(row.samples), max(row.samples)],
             "ratio_to_limit": row.median / limit.median if limit.median else math.nan,
             "change_vs_reference": row.median / reference.median - 1 if reference.median else math.nan,
             "limit": limit.name, "reference": reference.name} for row in rows]


def ablation_table(title: str, rows: list[Measurement], limit: Measurement, reference: Measurement) -> str:
    width = max(len(r.name) for r in rows) + 2
    lines = [title, f"{'':{width}}{'images/s':>10}{'spread':>16}{'ratio to limit':>16}  change vs {reference.name}"]
    for row, found in zip(rows, ablation_rows(rows, limit, reference), strict=True):
        lines.append(f"{row.name:{width}}{row.median:>10,.0f}{row.spread:>16}{found['ratio_to_limit']:>16.2f}"
                     f"  {found['change_vs_reference']:>+6.0%}")
    return "\n".join(lines)


# --- cores per GPU ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuNeed:
    precision: str
    gpu_images_per_sec: float  # what one GPU trains per second
    cores_per_gpu: float  # cores of this machine that deliver that rate
    node_images_per_sec: float  # NODE_GPUS of them
    node_cores: int  # cores the node needs, rounded up


def gpu_rates(path: Path = H100_CSV, model: str = MODEL) -> dict[str, float]:
    """Precision ('fp32', 'tf32', 'bf16', 'bf16+compile') -> the best images/s of `model` over the batch sizes
    measured, in the file's order."""
    with path.open() as file:
        rows = list(csv.DictReader(line for line in file if not line.startswith("#")))
    rates: dict[str, float] = {}
    for row in rows:
        if row["arch"] != model:
            continue
        precision = row["precision"] + ("+compile" if row["torch_compile"].strip().lower() == "true" else "")
        rates[precision] = max(rates.get(precision, 0.0), float(row["images_per_sec"]))
    if not rates:
        raise ValueError(f"{path}: no row with arch {model}")
    return rates


def cores_needed(per_core: float, rates: dict[str, float], gpus: int = NODE_GPUS) -> list[GpuNeed]:
    """How many cores at `per_core` images/s each feed one GPU, and `gpus` of them, at each precision."""
    if per_core <= 0:
        raise ValueError(f"per_core must be positive images/s; got {per_core}")
    return [GpuNeed(precision, rate, rate / per_core, rate * gpus, math.ceil(rate * gpus / per_core))
            for precision, rate in rates.items()]


def cores_needed_table(needs: list[GpuNeed], per_core: float, row: str, cores: int) -> str:
    lines = [f"Cores one H100 needs to train DenseNet-121 at 224 px, fed by `{row}` at {per_core:,.0f} images/s "
             f"per core (measured on {cores} of this machine's cores)",
             f"{'precision':14}{'H100 images/s':>14}{'cores per GPU':>15}{f'{NODE_GPUS}-GPU node images/s':>24}"
             f"{'node cores':>12}"]
    for need in needs:
        lines.append(f"{need.precision:14}{need.gpu_images_per_sec:>14,.0f}{need.cores_per_gpu:>15.1f}"
                     f"{need.node_images_per_sec:>24,.0f}{need.node_cores:>12}")
    lines.append(f"note: the per-core rate is measured on this machine's cores, which may be slower or faster than a "
                 f"GPU node's; the H100 rates are {H100_SOURCE} (bench/data/h100_training_throughput.csv).")
    return "\n".join(lines)


# --- targets ----------------------------------------------------------------------------------------------------

def target_cores(counts: list[int]) -> int:
    """The core count the targets are judged at: 2 when measured, else the nearest measured (named in the target)."""
    return min(counts, key=lambda c: (abs(c - TARGET_CORES), c))


def targets(samples: Samples, pipeline: str, limit: str) -> list[Target]:
    cores = target_cores(list(samples))
    rate, limit_rate = median_of(samples, cores, pipeline), median_of(samples, cores, limit)
    ratio = rate / limit_rate if limit_rate else math.nan
    on = f"on {cores} core{'s' if cores > 1 else ''}"
    return [Target(f"{pipeline}, images/s {on}", rate, f">= {TARGET_RATE:,.0f} on {TARGET_CORES} cores",
                   cores == TARGET_CORES and rate >= TARGET_RATE),
            Target(f"{pipeline} / {limit} {on}", ratio, f">= {TARGET_RATIO}", ratio >= TARGET_RATIO)]


def verdict(found: list[Target]) -> list[str]:
    return [f"target {t.name}: {t.measured:,.2f} ({t.target}): {'met' if t.met else 'NOT met'}" for t in found]
