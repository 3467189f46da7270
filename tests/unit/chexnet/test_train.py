"""What model.fit reports: a step-by-step bar on a terminal, one line per epoch in a job's log file."""

import pytest

from chexnet import train
from programkit.cli import PROGRESS


@pytest.mark.parametrize(("progress", "tty", "verbose"), [
    ("bar", False, 1), ("epoch", True, 2), ("auto", True, 1), ("auto", False, 2)])
def test_the_chief_reports_as_asked(progress, tty, verbose, monkeypatch):
    monkeypatch.setattr(train.sys.stdout, "isatty", lambda: tty)
    assert train._keras_verbosity(progress, chief=True) == verbose


def test_other_ranks_stay_quiet():
    assert all(train._keras_verbosity(progress, chief=False) == 0 for progress in PROGRESS)
