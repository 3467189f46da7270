"""The weekly GPU-hours budget (portal.records.budget): what a request can cost, what is left, and the refusal's
arithmetic with the longest time limit that fits."""

from __future__ import annotations

import pytest

from portal.records.budget import GpuBudget, gpu_hours, hours_words

WEEK = "Sunday 29 November 00:00"

@pytest.mark.parametrize(("gpu_minutes", "words"), [(480, "8"), (20, "0.33"), (30, "0.5"), (1, "0.02"),
                                                     (3, "0.05"), (59, "0.98"), (90, "1.5"), (0, "0"),
                                                     (6_000_007, "100000.12")])
def test_gpu_hours_are_to_the_hundredth_rounded_half_up_without_trailing_zeros(gpu_minutes, words):
    assert gpu_hours(gpu_minutes) == words


@pytest.mark.parametrize(("minutes", "words"), [(250, "4 h 10 min"), (60, "1 h"), (5, "5 min"), (0, "0 min")])
def test_a_time_limit_is_said_in_hours_and_minutes(minutes, words):
    assert hours_words(minutes) == words


def test_what_is_left_is_the_budget_less_this_weeks_use_and_said_with_it():
    budget = GpuBudget(40, 34.5, WEEK)
    assert budget.left_minutes == 330
    assert budget.words() == f"5.5 of your weekly 40 GPU-hours left (34.5 used since {WEEK})"
    assert GpuBudget(4, 9.25, WEEK).left_minutes == 0  # overspent (a job ran past it): nothing left, never less
    assert GpuBudget(4, None, WEEK, "sacct: no answer").words() == \
        "your weekly 4 GPU-hours (this week's use unknown: sacct: no answer)"


def test_a_request_that_fits_passes_and_one_that_does_not_is_refused_with_the_arithmetic():
    budget = GpuBudget(40, 34.5, WEEK)  # 330 GPU-minutes left
    assert budget.refusal(1, 1, 330) == ""  # exactly what is left
    assert budget.refusal(2, 0, 10_000) == ""  # no GPUs: no GPU-hours
    assert budget.refusal(2, 2, 240) == (
        "this job can cost up to 16 GPU-hours (2 nodes x 2 GPUs x 4 h), more than 5.5 of your weekly 40 GPU-hours left "
        f"(34.5 used since {WEEK}); a time limit of at most 01:22:00 (1 h 22 min) fits, or fewer GPUs")
    assert budget.refusal(1, 1, 60, trials=8) == (
        "this sweep can cost up to 8 GPU-hours (1 node x 1 GPU x 1 h x 8 trials), more than 5.5 of your weekly 40 "
        f"GPU-hours left (34.5 used since {WEEK}); a time limit of at most 00:41:00 (41 min a trial) fits, or fewer "
        "GPUs")


def test_with_nothing_left_nothing_with_gpus_fits_and_an_unknown_use_weighs_the_whole_budget():
    spent = GpuBudget(4, 4.0, WEEK)
    assert spent.refusal(1, 1, 1).endswith("nothing with GPUs fits until the week ends: ask for no GPUs, or ask an "
                                           "admin for more")
    unknown = GpuBudget(4, None, WEEK, "slurmdbd does not answer")
    assert unknown.refusal(1, 4, 60) == ""  # 4 GPU-hours: the whole budget
    assert "(this week's use unknown: slurmdbd does not answer)" in unknown.refusal(1, 4, 61)


def test_what_queued_and_running_jobs_may_still_hold_is_charged_ahead_and_said():
    """Two requests that each fit alone cannot together cost more than is left: the first, queued, is held ahead."""
    budget = GpuBudget(40, 30.5, WEEK, ahead_minutes=240)  # 9.5 h left, a queued 4-GPU-hour job ahead
    assert budget.left_minutes == 330
    assert budget.words() == (f"5.5 of your weekly 40 GPU-hours left (30.5 used since {WEEK}, 4 held for your queued "
                              "and running jobs and servers)")
    assert budget.refusal(1, 1, 331).startswith("this job can cost up to 5.52 GPU-hours (1 node x 1 GPU x 5 h 31 "
                                                "min), more than 5.5 of your weekly 40 GPU-hours left")
    unknown = GpuBudget(4, None, WEEK, "slurmdbd does not answer", ahead_minutes=60)
    assert unknown.left_minutes == 180 and unknown.words() == (
        "your weekly 4 GPU-hours, less 1 held for your queued and running jobs and servers (this week's use "
        "unknown: slurmdbd does not answer)")
    assert GpuBudget(4, 3.5, WEEK, ahead_minutes=60).left_minutes == 0  # never less than nothing
