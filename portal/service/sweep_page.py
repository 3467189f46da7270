"""What a sweep's page and the API show of it beyond its trials (portal.records.sweep.SweepView): how far it has got,
in trials and in epochs across them, how long it has run, and each trial's parameters as the pages print them.

A sweep is a job array, and none of a single job's figures fits it: its epochs are its trials', and the scheduler
keeps no one start and end for it (Slurm accounts each task apart; squeue's line for an array is one task's). Its
wall time is the study's instead: from the first trial's start to the last one's end (programkit.sweep status gives
Optuna's times of each trial), or to now while it runs.

Pure: the view, the sweep's state and the time now in, a dict out (the view's `to_dict` with these added).
"""

from __future__ import annotations

from typing import Any

from portal.records.states import ENDED_STATES, PENDING
from portal.records.sweep import RUNNING_STATES, SweepView, TrialRow
from portal.scheduler.cluster import duration_text
from portal.service.sparkline import significant

WAITING = (PENDING, *RUNNING_STATES)  # a task in one of these has not finished its trial


def progress(rows: tuple[TrialRow, ...], trials: int, epochs: int) -> dict[str, int]:
    """Trials finished (completed, pruned, failed or cancelled) and running, of all the sweep's; epochs run across
    its trials against the most they could (every trial to its last epoch: pruning makes it fewer)."""
    return {"trials_done": sum(row.state not in WAITING for row in rows), "trials": trials,
            "trials_running": sum(row.state in RUNNING_STATES for row in rows),
            "epochs_run": sum(row.epochs_run for row in rows), "epochs_most": trials * epochs}


def wall_time(view: SweepView, state: str, now: float) -> dict[str, Any]:
    """How long the sweep has run: from its first trial's start to its last trial's end once it has ended, to
    `now` while it runs. `elapsed` is "" when that is not known, and `elapsed_note` then says why."""
    starts = [row.started_at for row in view.rows if row.started_at is not None]
    ends = [row.ended_at for row in view.rows if row.ended_at is not None]
    ended = state in ENDED_STATES
    found: dict[str, Any] = {"started_at": min(starts, default=None),
                             "ended_at": max(ends, default=None) if ended else None, "elapsed_s": None,
                             "elapsed": "", "elapsed_note": ""}
    if not starts:
        started = any(row.number is not None for row in view.rows)
        found["elapsed_note"] = (
            f"not known: {view.problem}" if view.problem else
            "not known: the study has no start time for its trials (written by an older programkit.sweep)" if started
            else "no trial has run" if ended else "not started yet")
        return found
    if ended and not ends:
        found["elapsed_note"] = "not known: the study recorded no trial's end"
        return found
    seconds = (found["ended_at"] if ended else now) - found["started_at"]
    found.update(elapsed_s=round(max(0.0, seconds), 1), elapsed=duration_text(seconds),
                 elapsed_note="from the first trial's start to the last trial's end" if ended else
                 "since the first trial started")
    return found


def sweep_summary(view: SweepView, state: str, now: float) -> dict[str, Any]:
    """The view as the page and the API show it: its trials, best and counts (SweepView.to_dict), with `progress`,
    the wall time (`wall_time`) and each trial's parameters printed (`params_text`, by `significant`)."""
    shown = view.to_dict()
    for row in [*shown["trials"], *([shown["best"]] if shown["best"] else [])]:
        row["params_text"] = {name: significant(value) for name, value in row["params"].items()}
    return {**shown, "progress": progress(view.rows, view.plan.trials, view.plan.epochs),
            **wall_time(view, state, now)}
