"""bench.gpu_torch's figures, targets and table (pure, no torch): medians of the blocks and of the pairs' ratios.

Targets (issue 50), on a GPU only (a CPU run is a smoke run):
  program step / plain torchvision                  >= 0.95  the program's step is the plain loop's kernels with
                                                              its loss weights and bookkeeping: at most 5 % slower
  program, fed / the slower of step and pipeline    >= 0.9   the DataLoader's workers overlap the GPU: a job
                                                              trains at the rate of its slower half, at most 10 %
                                                              lost to the hand-over
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from bench.results import Target

ROWS = ("program step", "plain torchvision", "program, fed", "input pipeline")
STEP_OVER_PLAIN, FED_OVER_LIMIT = 0.95, 0.9


def pair_order(index: int) -> tuple[str, ...]:
    """Pair `index`'s blocks: the program's step and the plain loop one after the other, the first alternating,
    then the fed and the pipeline blocks."""
    first = ROWS[:2] if index % 2 == 0 else ROWS[1::-1]
    return (*first, *ROWS[2:])


def figures(samples: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """Rows (median, min, max, every block) and the ratios: each pair's, and their medians."""
    rows = [{"name": name, "median": statistics.median(samples[name]), "min": min(samples[name]),
             "max": max(samples[name]), "samples": list(samples[name])} for name in ROWS]
    pairs = []
    for step, plain, fed, loader in zip(*(samples[name] for name in ROWS), strict=True):
        pairs.append({"program_over_plain": step / plain, "fed_over_limit": fed / min(step, loader),
                      "pipeline_over_step": loader / step})
    ratios = {key: statistics.median(pair[key] for pair in pairs) for key in pairs[0]}
    return {"unit": "images/s", "rows": rows, "pair_ratios": pairs, "ratios": ratios}


def targets(data: dict[str, Any]) -> list[Target]:
    ratios, rows = data["ratios"], {row["name"]: row["median"] for row in data["rows"]}
    step_met = ratios["program_over_plain"] >= STEP_OVER_PLAIN
    fed_met = ratios["fed_over_limit"] >= FED_OVER_LIMIT
    limit = "the input pipeline" if rows["input pipeline"] < rows["program step"] else "the step"
    return [Target("GPU, program step / plain torchvision", ratios["program_over_plain"], f">= {STEP_OVER_PLAIN}",
                   step_met, "" if step_met else f"program step {rows['program step']:,.0f} images/s, plain "
                   f"torchvision {rows['plain torchvision']:,.0f}"),
            Target("GPU, program fed by its DataLoader / its limit", ratios["fed_over_limit"], f">= {FED_OVER_LIMIT}",
                   fed_met, "" if fed_met else f"fed {rows['program, fed']:,.0f} images/s; its limit is {limit} "
                   f"(step {rows['program step']:,.0f}, pipeline {rows['input pipeline']:,.0f})")]


def verdicts(found: Sequence[Target]) -> list[str]:
    return [f"{t.name}: {t.measured:.2f} {t.target}: " + ("met" if t.met else "NOT met")
            + (f"; {t.where}" if t.where else "") for t in found]


def table(data: dict[str, Any]) -> str:
    settings, found = data.get("settings", {}), data.get("versions", {})
    where = found.get("gpu") or f"CPU ({found.get('cpu', '?')}, smoke run)"
    lines = [f"{settings.get('model', '?')} at {settings.get('image_size', '?')} px, batch "
             f"{settings.get('batch_size', '?')}, amp {settings.get('amp', '?')}, channels_last "
             f"{settings.get('channels_last', '?')} on {where}; torch {found.get('torch', '?')}",
             f"{'':<20}{'images/s (median)':>18}{'spread':>24}"]
    for row in data["rows"]:
        spread = f"{row['min']:,.1f}-{row['max']:,.1f}"
        lines.append(f"{row['name']:<20}{row['median']:>18,.1f}{spread:>24}")
    ratios = data["ratios"]
    lines += ["", f"program step / plain torchvision: {ratios['program_over_plain']:.2f}x; program fed / its limit: "
                  f"{ratios['fed_over_limit']:.2f}x; input pipeline / program step: "
                  f"{ratios['pipeline_over_step']:.2f}x (medians of {len(data['pair_ratios'])} pairs)"]
    return "\n".join(lines)
