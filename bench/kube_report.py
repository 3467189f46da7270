"""bench.kube's figures, targets and table (pure): the spawn against stock KubeSpawner, the same job on both boxes.

Targets (issue 43), each from one run side by side:
  spawn, median ours / stock        <= 0.7      spawn, p90 ours / stock   <= 1.0
  first point, Kubernetes / Slurm   <= 1.1      images/s, Kubernetes / Slurm >= 0.95
One not met says where the seconds go: the stages of the spawn (bench.kube_timeline) where ours is slower than
stock, the stages of the job's first point (bench.timeline) where Kubernetes is slower than Slurm.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench import kube_timeline, timeline
from bench.results import Target
from bench.spawn import summary

USER = "alice"
SPAWN_MEDIAN, SPAWN_P90, FIRST_POINT, IMAGES_PER_SEC = 0.7, 1.0, 1.1, 0.95
RATIOS = ("first_point_s", "epoch_s", "images_per_sec")


def ratio(kube_value: float | None, slurm_value: float | None) -> float | None:
    return kube_value / slurm_value if kube_value is not None and slurm_value else None


def figures(spawn: dict[str, Any] | None, training: dict[str, Any] | None) -> dict[str, Any]:
    """What bench.kube saves of its two parts: every run, the medians, p90s, ratios and stage medians."""
    data: dict[str, Any] = {}
    if spawn:
        runs, stages = spawn["runs"], spawn.get("stages", {})
        ours, stock = summary(runs["portal"]), summary(runs["stock"])
        data["spawn"] = {"runs": runs, "portal": ours, "stock": stock, "ratio": ours["median"] / stock["median"],
                         "p90_ratio": ours["p90"] / stock["p90"], "stages": stages,
                         "stages_median": {name: kube_timeline.median_stages(found)
                                           for name, found in stages.items()}}
    if training:
        data["training"] = paired(training)
    return data


def paired(training: dict[str, Any]) -> dict[str, Any]:
    """The training part: each pair's ratios (Kubernetes / Slurm), their medians (the targets' figures), and as
    "slurm" and "kubernetes" the pair whose images/s ratio is the median (its stages explain a target not met).
    One job per box ({"slurm": ..., "kubernetes": ...}) is one pair."""
    pairs = training.get("pairs") or [{"slurm": training["slurm"], "kubernetes": training["kubernetes"]}]
    each = [{key: ratio(pair["kubernetes"][key], pair["slurm"][key]) for key in RATIOS} for pair in pairs]
    medians = {key: median_of([r[key] for r in each]) for key in RATIOS}
    by_rate = sorted(range(len(pairs)), key=lambda i: (each[i]["images_per_sec"] is None, each[i]["images_per_sec"]))
    middle = pairs[by_rate[(len(by_rate) - 1) // 2]]
    return {"pairs": pairs, "pair_ratios": each, "slurm": middle["slurm"], "kubernetes": middle["kubernetes"],
            "ratios_kubernetes_over_slurm": medians}


def median_of(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def targets(data: dict[str, Any]) -> list[Target]:
    """The four targets; one not met says where the seconds go, measured (`where`)."""
    found = []
    if spawn := data.get("spawn"):
        medians = spawn["stages_median"]
        where = (f"ours is slower in: {slower(medians['portal'], medians['stock'])}; its largest stages: "
                 f"{timeline.biggest(medians['portal'])}") if medians else ""
        for name, measured, goal in (("median", spawn["ratio"], SPAWN_MEDIAN), ("p90", spawn["p90_ratio"], SPAWN_P90)):
            met = measured <= goal
            found.append(Target(f"spawn on Kubernetes, {name} ours / stock KubeSpawner", measured, f"<= {goal}",
                                met, "" if met else where))
    if training := data.get("training"):
        ratios = training["ratios_kubernetes_over_slurm"]
        first, rate = ratios["first_point_s"], ratios["images_per_sec"]
        slurm, kube = training["slurm"].get("stages"), training["kubernetes"].get("stages")
        where = f"Kubernetes is slower in: {slower(kube, slurm)}" if slurm and kube else ""
        first_met, rate_met = first is not None and first <= FIRST_POINT, rate is not None and rate >= IMAGES_PER_SEC
        found += [Target("same job, first point Kubernetes / Slurm", first, f"<= {FIRST_POINT}", first_met,
                         "" if first_met else where),
                  Target("same job, images/s Kubernetes / Slurm", rate, f">= {IMAGES_PER_SEC}", rate_met,
                         "" if rate_met else epochs_where(training))]
    return found


def epochs_where(training: dict[str, Any]) -> str:
    """Where a lower images/s goes: the time per epoch after the first on each box (the training itself)."""
    kube, slurm = training["kubernetes"]["epoch_s"], training["slurm"]["epoch_s"]
    if kube is None or slurm is None:
        return "no epoch time on one box"
    return (f"each epoch after the first: Kubernetes {kube:.2f} s, Slurm {slurm:.2f} s "
            "(the training steps, not the start)")


def slower(ours: dict[str, float | None], theirs: dict[str, float | None], count: int = 3) -> str:
    """'running +0.80 s, listening +0.41 s': the stages where `ours` took longer, the most first."""
    gaps = sorted(((o - t, key) for key, o in ours.items() if o is not None and (t := theirs.get(key)) is not None
                   and o > t), reverse=True)[:count]
    return ", ".join(f"{key} +{gap:.2f} s" for gap, key in gaps) or "no stage (the gap is in the spread)"


def verdicts(found: list[Target]) -> list[str]:
    """A line per target; one not met says where the seconds go, measured."""
    return [f"{t.name}: " + (f"{t.measured:.2f}" if t.measured is not None else "none") + f" {t.target}: "
            + ("met" if t.met else "NOT met") + (f"; {t.where}" if t.where else "") for t in found]


def table(data: dict[str, Any]) -> str:
    lines = []
    if spawn := data.get("spawn"):
        ours, stock = spawn["portal"], spawn["stock"]
        lines += [f"(a) form -> /user/{USER}/lab 200 on the Kubernetes box, runs alternate, "
                  f"n={len(spawn['runs']['portal'])} each", f"{'seconds':<34}{'portal':>9}{'stock':>9}{'ratio':>8}"]
        for stat in ("median", "p90", "min", "max"):
            lines.append(f"{stat:<34}{ours[stat]:9.2f}{stock[stat]:9.2f}{ours[stat] / stock[stat]:8.2f}")
        if spawn["stages_median"]:
            lines += ["", *kube_timeline.table(spawn["stages_median"])]
    if training := data.get("training"):
        slurm, kube = training["slurm"], training["kubernetes"]
        count = len(training.get("pairs", [])) or 1
        lines += ["", f"(b) the same 2-worker job (2 nodes x 1 fake GPU, CPU figures), one box after the other, "
                      f"{count} pair(s); the pair with the median images/s ratio:",
                  f"{'':<34}{'Slurm':>9}{'Kube':>9}{'K/S':>8}"]
        for key, label in (("first_point_s", "submit -> first TensorBoard point, s"),
                           ("epoch_s", "time per epoch (after the first), s"), ("images_per_sec", "images/s")):
            value = ratio(kube[key], slurm[key])
            lines.append(f"{label:<34}{slurm[key]:9.2f}{kube[key]:9.2f}{value:8.2f}" if value is not None
                         else f"{label:<34}{'n/a':>9}{'n/a':>9}")
        for index, each in enumerate(training.get("pair_ratios", []) if count > 1 else []):
            lines.append(f"pair {index + 1} ({training['pairs'][index].get('first', 'slurm')} first): K/S "
                         + ", ".join(f"{key} {value:.2f}" if value is not None else f"{key} n/a"
                                     for key, value in each.items()))
        if count > 1:
            medians = training["ratios_kubernetes_over_slurm"]
            lines.append("median of the pairs: K/S " + ", ".join(
                f"{key} {value:.2f}" if value is not None else f"{key} n/a" for key, value in medians.items()))
        if "stages" in slurm and "stages" in kube:
            lines += ["", *timeline.table({"Slurm": slurm["stages"], "Kubernetes": kube["stages"]})]
    return "\n".join(lines)
