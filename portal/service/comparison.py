"""Runs side by side (the experiments page's comparison and `GET api/experiments/compare`): the hyperparameters
that differ (or all), each metric's best value with its epoch and its final value, images/sec, wall time and
GPU-hours, per-class AUROC beside the CheXNet paper's, and each run's lineage with what differs in it.

Pure: runs whose per-epoch record and model card were read (portal.service.experiment_reads) in, one dict out, the
same for the page and the API. Whatever is missing is said in words ("no model card yet"), never left blank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from portal.reference import CHEXNET_PAPER_AUROC, chexnet_paper_mean
from portal.scheduler.cluster import duration_text
from portal.service.experiments import Run
from portal.service.sparkline import significant

__all__ = ["METRICS", "compare", "lineage", "metric_summary", "per_class", "series", "wall_time"]

# (key in the per-epoch record, what the page calls it, unit, whether more is better, log scale on a chart)
METRICS: tuple[tuple[str, str, str, bool, bool], ...] = (
    ("auroc/mean", "Mean AUROC", "", True, False),
    ("loss/val", "Validation loss", "", False, True),
    ("loss/train", "Training loss", "", False, True),
    ("images_per_sec", "Images/sec", "images/s", True, False),
)
NO_EPOCHS = "no epoch recorded yet"
NO_CARD = "no model card yet (a run writes one when training ends)"


def value_of(entry: Mapping[str, Any], key: str) -> float | None:
    """A metric of one epoch's line: images/sec is the line's own, the rest its scalars by tag."""
    value = entry.get(key) if key == "images_per_sec" else (entry.get("scalars") or {}).get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def series(run: Run, key: str) -> list[tuple[int, float]]:
    """(epoch, value) of each epoch that has one, in order."""
    points = ((epoch, value_of(run.epochs[epoch], key)) for epoch in sorted(run.epochs))
    return [(epoch, value) for epoch, value in points if value is not None]


def metric_summary(run: Run, key: str, more_is_better: bool) -> dict[str, Any]:
    """The best value and its epoch (the first epoch that reached it), and the final value and its epoch; `note`
    says why there is none."""
    points = series(run, key)
    if not points:
        return {"best": None, "best_epoch": None, "final": None, "final_epoch": None,
                "note": run.epochs_problem or (NO_EPOCHS if not run.epochs else "not recorded by this run")}
    if more_is_better:  # ties: the first epoch that reached it
        best_epoch, best = max(points, key=lambda p: (p[1], -p[0]))
    else:
        best_epoch, best = min(points, key=lambda p: (p[1], p[0]))
    final_epoch, final = points[-1]
    return {"best": best, "best_epoch": best_epoch, "final": final, "final_epoch": final_epoch, "note": ""}


def wall_time(run: Run) -> dict[str, Any]:
    """How long the run trained: a trial's from the study's start and end; a single job's as its per-epoch record
    adds up its epochs' wall times. GPU-hours: its GPUs x that time (what it held; the usage page's are Slurm's
    accounting of the week)."""
    seconds, how = None, ""
    if run.started_at is not None and run.ended_at is not None:
        seconds, how = max(0.0, run.ended_at - run.started_at), "from the study's start and end of the trial"
    else:
        spent = [entry.get("seconds") for entry in run.epochs.values()]
        known = [s for s in spent if isinstance(s, int | float) and not isinstance(s, bool) and s >= 0]
        if known and len(known) == len(spent):
            seconds, how = float(sum(known)), ("its one epoch's time" if len(known) == 1 else
                                               f"the sum of its {len(known)} epochs' times")
    if seconds is None:
        why = run.epochs_problem or ("not started yet" if run.state == "PENDING" else
                                     NO_EPOCHS if not run.epochs else "its epochs' times are not recorded")
        return {"seconds": None, "text": "", "gpu_hours": None, "note": f"not known: {why}"}
    return {"seconds": round(seconds, 1), "text": duration_text(seconds),
            "gpu_hours": round(run.gpus * seconds / 3600, 3), "note": how}


def _card_value(card: Mapping[str, Any], path: str) -> Any:
    value: Any = card
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


LINEAGE_FIELDS = (("data set", "data.dir"), ("data kind", "data.kind"),
                  ("patient split (sha256)", "data.patient_split_sha256"),
                  ("code version", "code.dsportal"), ("git commit", "code.git_commit"),
                  ("image digest", "environment.image_digest"))


def lineage(run: Run) -> dict[str, Any]:
    """What produced the run, from its model card: data set and split hashes, code and image, its settings and its
    checkpoint's hashes; each missing field said in words."""
    card = run.card
    if card is None:
        why = f"its model card is unreadable: {run.card_problem}" if run.card_problem else NO_CARD
        return {"card": False, "note": why, "fields": {}}
    fields: dict[str, str] = {}
    for label, path in LINEAGE_FIELDS:
        value = _card_value(card, path)
        fields[label] = "not recorded" if value in (None, "") else str(value)
    for split, prints in sorted((_card_value(card, "data.splits") or {}).items()):
        fields[f"{split} images (sha256)"] = str(prints.get("image_list_sha256"))
        fields[f"{split} patients (sha256)"] = str(prints.get("patients_sha256"))
    for name, value in sorted((card.get("spec") or {}).items()):
        fields[f"setting {name}"] = significant(value) if value is not None else "not set"
    for item in _card_value(card, "checkpoint.files") or []:
        fields[f"checkpoint {item['file']}"] = str(item["sha256"])
    return {"card": True, "note": "", "fields": fields}


def lineage_differences(lineages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The lineage fields whose values are not the same in every run that has a card."""
    carded = [entry["fields"] for entry in lineages if entry["card"]]
    names = sorted({name for fields in carded for name in fields})
    return [name for name in names if len({fields.get(name, "not recorded") for fields in carded}) > 1]


def per_class(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per class: the paper's AUROC and each run's at its best epoch (of mean AUROC), None where it has none."""
    best = [metric_summary(run, "auroc/mean", True)["best_epoch"] for run in runs]
    classes = list(CHEXNET_PAPER_AUROC)
    for run, epoch in zip(runs, best, strict=True):
        scalars = (run.epochs.get(epoch) or {}).get("scalars") or {} if epoch is not None else {}
        classes += [t[len("auroc/"):] for t in scalars if t.startswith("auroc/") and t != "auroc/mean"
                    and t[len("auroc/"):] not in classes]
    rows = []
    for name in classes:
        values = [value_of(run.epochs[epoch], f"auroc/{name}") if epoch is not None else None
                  for run, epoch in zip(runs, best, strict=True)]
        rows.append({"class": name, "paper": CHEXNET_PAPER_AUROC.get(name), "runs": values})
    return rows + [{"class": "Mean", "paper": round(chexnet_paper_mean(), 4),
                    "runs": [metric_summary(run, "auroc/mean", True)["best"] for run in runs]}]


def hyperparameters(runs: Sequence[Run], every: bool) -> list[dict[str, Any]]:
    """Each hyperparameter (those whose values differ among the runs, or `every` one): its value per run, printed
    as the sweep page prints them. A run that did not set one (a single job takes its program's default learning
    rate; a trial samples it) shows the value it ran with, from its model card's settings, marked "(default)";
    "not set" where neither says (another program's field, or no card yet)."""
    names = sorted({name for run in runs for name in run.params})
    rows = []
    for name in names:
        values, texts = [], []
        for run in runs:
            ran = ((run.card or {}).get("spec") or {}) if name not in run.params else {}
            value = run.params.get(name, ran.get(name))
            values.append(value)
            texts.append(significant(value) if name in run.params else
                         f"{significant(value)} (default)" if value is not None else "not set")
        differs = len({repr(v) for v in values}) > 1
        if every or differs:
            rows.append({"name": name, "values": values, "differs": differs, "text": texts})
    return rows


def compare(runs: Sequence[Run], every_param: bool = False) -> dict[str, Any]:
    """The comparison, as the page shows it and the API answers it."""
    lineages = [lineage(run) for run in runs]
    return {
        "runs": [{**run.to_dict(), "epochs_recorded": len(run.epochs), "epochs_problem": run.epochs_problem,
                  "wall_time": wall_time(run), "lineage": entry} for run, entry in zip(runs, lineages, strict=True)],
        "hyperparameters": hyperparameters(runs, every_param), "all_hyperparameters": every_param,
        "metrics": [{"key": key, "title": title, "unit": unit, "higher_is_better": better, "log_scale": log,
                     "runs": [metric_summary(run, key, better) for run in runs]}
                    for key, title, unit, better, log in METRICS],
        "series": {key: [{"run": str(run.id), "label": run.label, "points": series(run, key)} for run in runs]
                   for key, *_ in METRICS},
        "per_class_auroc": per_class(runs),
        "lineage_differences": lineage_differences(lineages),
        "lineage_fields": list(dict.fromkeys(name for entry in lineages for name in entry["fields"])),
    }
