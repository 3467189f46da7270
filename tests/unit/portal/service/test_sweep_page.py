"""What a sweep's page and the API show of it beyond its trials (portal.service.sweep_page): progress in trials and
epochs, wall time from the study's times for a running and a finished sweep (and why, when it is not known), each
trial's parameters printed once for the summary, the table and the API."""

from __future__ import annotations

from portal.records.sweep import sweep_view
from portal.service.sweep_page import progress, sweep_summary, wall_time
from tests.unit.portal.sweeps import PLAN, START, finished_view, running_view, trial


def test_progress_counts_trials_finished_of_all_and_epochs_across_them():
    assert progress(finished_view().rows, 4, 4) == {"trials_done": 4, "trials": 4, "trials_running": 0,
                                                     "epochs_run": 14, "epochs_most": 16}
    assert progress(running_view().rows, 4, 4) == {"trials_done": 1, "trials": 4, "trials_running": 1,
                                                    "epochs_run": 6, "epochs_most": 16}


def test_a_finished_sweeps_elapsed_is_its_wall_time_from_the_first_start_to_the_last_end():
    found = wall_time(finished_view(), "COMPLETED", now=START + 99_999)  # now is after: not counted
    assert (found["elapsed"], found["elapsed_s"]) == ("2:03:04", 7384.0)
    assert (found["started_at"], found["ended_at"]) == (START, START + 7384)
    assert found["elapsed_note"] == "from the first trial's start to the last trial's end"


def test_a_running_sweeps_elapsed_runs_to_now():
    found = wall_time(running_view(), "RUNNING", now=START + 65)
    assert (found["elapsed"], found["elapsed_s"], found["ended_at"]) == ("1:05", 65.0, None)
    assert found["elapsed_note"] == "since the first trial started"


def test_where_the_wall_time_is_not_known_the_page_says_why():
    pending = sweep_view(PLAN, {}, {task: "PENDING" for task in range(4)})
    assert wall_time(pending, "PENDING", START)["elapsed_note"] == "not started yet"
    assert wall_time(pending, "CANCELLED", START)["elapsed_note"] == "no trial has run"
    untimed = sweep_view(PLAN, {0: trial(0, "COMPLETE", 0.9, [0.9])}, {})
    assert "no start time" in wall_time(untimed, "COMPLETED", START)["elapsed_note"]
    unread = sweep_view(PLAN, {}, {0: "COMPLETED"}, problem="the study could not be read: boom")
    assert wall_time(unread, "COMPLETED", START)["elapsed_note"] == "not known: the study could not be read: boom"
    never_ended = sweep_view(PLAN, {0: trial(0, "RUNNING", None, [0.5], START)}, {0: "CANCELLED"})
    assert wall_time(never_ended, "CANCELLED", START + 9)["elapsed_note"] == \
        "not known: the study recorded no trial's end"
    for view, state in ((pending, "PENDING"), (untimed, "COMPLETED"), (never_ended, "CANCELLED")):
        assert wall_time(view, state, START)["elapsed"] == ""


def test_the_summary_adds_printed_parameters_progress_and_wall_time_and_keeps_the_views_fields():
    shown = sweep_summary(finished_view(), "COMPLETED", START + 99_999)
    assert {"plan", "trials", "best", "counts", "problem", "objective", "best_by"} <= set(shown)
    assert shown["best"]["task"] == 0 and shown["best"]["params_text"] == {"lr": "0.000682"}
    assert [row["params_text"]["lr"] for row in shown["trials"]] == ["0.000682", "0.000123", "0.0062", "0.0021"]
    assert shown["progress"]["trials_done"] == 4 and shown["elapsed"] == "2:03:04"
