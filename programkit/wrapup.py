"""Rank 0's end of a run, the same for every program (issue 64): the model card beside the checkpoint, the card and
the run's end in MLflow, and the trial's end in the sweep's study. A program calls `wrap_up` once, after its last
epoch, with what only it knows: its spec, its data source, its last validation, its checkpoint and its frameworks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from programkit import model_card, tblog, tracking
from programkit.labels import CLASSES
from programkit.tags import AUROC_TAG_PREFIX, TAG_AUROC_MEAN

if TYPE_CHECKING:
    from programkit.data.sources import DataSource
    from programkit.sweep import TrialReporter


def wrap_up(*, checkpoint_dir: Path, spec: Mapping[str, Any], source: DataSource,
            last: Mapping[str, float | None] | None,
            checkpoint: str | None, epochs_done: int, frameworks: Mapping[str, str | None],
            tracker: tracking.RunTracker | None, reporter: TrialReporter | None, pruned_at: int | None,
            say: Callable[[str], None]) -> Path | None:
    """Writes the model card (`checkpoint`: the prefix of the checkpoint's files, model_card.checkpoint_section)
    and says where; gives MLflow the card and FINISHED (a pruned trial tagged so), and the study the trial's end:
    pruned at `pruned_at`, or completed with the last mean AUROC. The card's path, None when it was not written
    (said why: a card the dashboard would not read is not written; the trained checkpoint still counts).

    `last` None: the run trained nothing (killed after its last checkpoint, before its card or its study's tell,
    and run again); the last epoch's figures are then the checkpoint's record's (programkit.tblog)."""
    if last is None:
        entry = tblog.read_record(tblog.record_path(checkpoint_dir)).get(epochs_done)
        last = dict(entry.scalars) if entry is not None else {}
    per_class = {name: last.get(f"{AUROC_TAG_PREFIX}{name}") for name in CLASSES}
    card = model_card.build_card(spec, model_card.data_section(source), per_class,
                                 model_card.checkpoint_section(checkpoint), epochs_done, frameworks)
    path: Path | None
    try:
        path = model_card.write_card(checkpoint_dir, card)
    except ValueError as err:  # programkit.schemas.SchemaError (say, from a hand-edited manifest.json)
        say(f"model card not written: {err}")
        path = None
    else:
        say(f"model card: {path}")
    if tracker is not None:
        if path is not None:
            tracker.card(path)
        tracker.finish(tracking.FINISHED, pruned_at=pruned_at)
    if reporter is not None and pruned_at is not None:
        reporter.pruned(pruned_at)  # the program said so when its pruner stopped it
    elif reporter is not None:
        reporter.complete(last.get(TAG_AUROC_MEAN))
        say(f"sweep: trial {reporter.number} completed: mean AUROC {last.get(TAG_AUROC_MEAN)}")
    return path
