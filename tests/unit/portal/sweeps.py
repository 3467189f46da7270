"""Sweeps as the pages and notebooks read them (portal.records.sweep.sweep_view), made of trials as the study
gives them: the reviewer's finished four-trial sweep and one still running."""

from __future__ import annotations

from portal.records.sweep import parse_sweep, sweep_view

START = 1_700_000_000.0
PLAN = parse_sweep({"trials": 4, "parallel": 2, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}}, 4,
                   None, 0)


def trial(number, state, value, epochs, started=None, ended=None, lr=0.0006824078427098838):
    return {"number": number, "state": state, "params": {"lr": lr}, "value": value,
            "epochs": dict(enumerate(epochs, start=1)), "started": started, "ended": ended}


def finished_view():
    """The reviewer's sweep: four trials done, the last ended 2 h 03 min 04 s after the first started."""
    return sweep_view(PLAN, {
        0: trial(0, "COMPLETE", 0.960, [0.95, 0.965, 0.96, 0.96], START, START + 3600),
        1: trial(1, "COMPLETE", 0.950, [0.94, 0.973, 0.95, 0.95], START + 5, START + 3700, lr=0.00012345),
        2: trial(2, "PRUNED", 0.930, [0.92, 0.93], START + 3601, START + 5000, lr=0.0062),
        3: trial(3, "COMPLETE", 0.955, [0.95, 0.95, 0.95, 0.955], START + 3701, START + 7384, lr=0.0021)}, {})


def running_view():
    return sweep_view(PLAN, {
        0: trial(0, "COMPLETE", 0.960, [0.95, 0.965, 0.96, 0.96], START, START + 3600),
        1: trial(1, "RUNNING", None, [0.94, 0.95], START + 5)}, {1: "RUNNING", 2: "PENDING", 3: "PENDING"})
