"""A user's weekly GPU-hours budget (gpu_hours_budget, docs/gpus.md) and its check at submit. Pure.

What a request can cost at most: nodes x GPUs per node x its time limit (a started minute counts whole) x its trials,
in GPU-minutes, shown as GPU-hours to the hundredth, rounded half up (`gpu_hours`; portal.js says the same). What is
left: the budget less what the user's servers and jobs held this week, as the scheduler's accounting counts it
(Slurm's sacct), less what their queued and running ones may still hold (charged ahead). A request that can cost
more than is left is refused, naming time_limit, with the arithmetic and the longest time limit that fits. Where the
week's use is unknown (accounting did not answer) a request is weighed against the whole budget less what is charged
ahead, and the words say so.
"""

from __future__ import annotations

from dataclasses import dataclass

from portal.inputs import format_minutes

__all__ = ["BUDGET_FIELD", "GpuBudget", "gpu_hours", "hours_words"]
BUDGET_FIELD = "time_limit"  # what a refusal names: the field that most often makes a request fit


def gpu_hours(gpu_minutes: float) -> str:
    """GPU-minutes as GPU-hours to the hundredth, rounded half up, without trailing zeros: 480 -> "8", 20 -> "0.33"."""
    hundredths = (int(gpu_minutes * 100) + 30) // 60
    whole, part = divmod(hundredths, 100)
    return f"{whole}.{part:02d}".rstrip("0") if part else str(whole)


def hours_words(minutes: int) -> str:
    """A time limit in words: 250 -> "4 h 10 min", 60 -> "1 h", 0 -> "0 min"."""
    hours, rest = divmod(minutes, 60)
    return " ".join(part for part in (f"{hours} h" if hours else "", f"{rest} min" if rest else "") if part) or "0 min"


@dataclass(frozen=True)
class GpuBudget:
    """A user's weekly GPU-hours and what they used of it this week."""

    limit: int  # GPU-hours a week (gpu_hours_budget); never 0 here: no budget is no GpuBudget
    used: float | None  # GPU-hours their servers and jobs held since `week_start`; None: unknown (`unknown_why`)
    week_start: str = ""  # when the week began, in words: "Sunday 29 November 00:00"
    unknown_why: str = ""
    # GPU-minutes their queued and running jobs and servers may still hold (what is left of their time limits):
    # charged ahead, so that two requests that each fit alone cannot together cost more than is left.
    ahead_minutes: int = 0

    @property
    def left_minutes(self) -> float:
        return max(0.0, self.limit * 60 - (self.used or 0.0) * 60 - self.ahead_minutes)

    def words(self) -> str:
        """ "5.5 of your weekly 40 GPU-hours left (30.5 used since Sunday 29 November 00:00, 4 held for your queued
        and running jobs and servers)" """
        ahead = f"{gpu_hours(self.ahead_minutes)} held for your queued and running jobs and servers"
        if self.used is None:
            less = f", less {ahead}" if self.ahead_minutes else ""
            return (f"your weekly {self.limit} GPU-hours{less} (this week's use unknown: "
                    f"{self.unknown_why.rstrip('.')})")
        since = f" since {self.week_start}" if self.week_start else " this week"
        return (f"{gpu_hours(self.left_minutes)} of your weekly {self.limit} GPU-hours left "
                f"({gpu_hours(self.used * 60)} used{since}{', ' + ahead if self.ahead_minutes else ''})")

    def fits_minutes(self, gpus: int) -> int:
        """The longest time limit, in whole minutes, of a request of `gpus` GPUs in all that fits what is left."""
        return int(self.left_minutes // gpus) if gpus else 0

    def refusal(self, nodes: int, gpus_per_node: int, minutes: int, trials: int | None = None,
                what: str = "") -> str:
        """Why a request that can cost more than is left is refused (its field: BUDGET_FIELD, a server's:
        `runtime`), with the arithmetic; empty when it fits. `trials`: a sweep's, each trial costing as much.
        `what` names the request ("server"; default: "sweep" with trials, else "job")."""
        per_minute = nodes * gpus_per_node * (trials or 1)
        cost = per_minute * minutes
        if cost <= self.left_minutes:
            return ""
        what = what or ("sweep" if trials is not None else "job")
        of_trials = f" x {trials} trial{'s' if trials != 1 else ''}" if trials is not None else ""
        arithmetic = (f"{nodes} node{'s' if nodes != 1 else ''} x {gpus_per_node} "
                      f"GPU{'s' if gpus_per_node != 1 else ''} x {hours_words(minutes)}{of_trials}")
        fits = self.fits_minutes(per_minute)
        advice = (f"a time limit of at most {format_minutes(fits)} ({hours_words(fits)}{' a trial' if trials else ''})"
                  " fits, or fewer GPUs" if fits else
                  "nothing with GPUs fits until the week ends: ask for no GPUs, or ask an admin for more")
        return (f"this {what} can cost up to {gpu_hours(cost)} GPU-hours ({arithmetic}), more than {self.words()}; "
                f"{advice}")
