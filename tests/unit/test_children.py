"""tests/children.py: a run the suites wait for fails when it hangs, never because it is slow."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import children

REPO = Path(__file__).resolve().parents[2]

CHATTY = "import sys, time\nfor i in range({n}):\n    print(i, end='\\r', flush=True); time.sleep({pause})\n" \
         "print('done', file=sys.stderr)"


def test_a_slow_run_that_keeps_talking_ends_normally(monkeypatch, tmp_path):
    monkeypatch.setattr(children, "STALL_S", 1.0)
    # 3 s in all, three times the stall limit, but never silent for more than 0.3 s
    done = children.run_child([sys.executable, "-c", CHATTY.format(n=10, pause=0.3)], cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout.split("\n") == [str(i) for i in range(10)] + [""]  # a carriage return ends a line
    assert done.stderr == "done\n"


def test_a_silent_run_is_ended_with_what_it_started_and_the_test_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(children, "STALL_S", 1.0)
    marker = tmp_path / "grandchild"
    script = (f"import subprocess, time\nsubprocess.Popen(['sleep', '60'])\nopen({str(marker)!r}, 'w').close()\n"
              "print('started', flush=True)\ntime.sleep(60)")
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match=r"said nothing for 1.0 s:\nstarted"):
        children.run_child([sys.executable, "-c", script], cwd=tmp_path)
    assert time.monotonic() - started < 30  # not the child's 60 s: the pipes closed, so its sleep was killed too
    assert marker.exists()


def test_a_run_past_the_limit_fails_however_much_it_says(monkeypatch, tmp_path):
    monkeypatch.setattr(children, "LIMIT_S", 1.0)
    with pytest.raises(pytest.fail.Exception, match="did not end within 1.0 s"):
        children.run_child([sys.executable, "-c", CHATTY.format(n=100, pause=0.1)], cwd=tmp_path)


def test_a_run_that_fails_returns_its_status_and_words(tmp_path):
    done = children.run_child([sys.executable, "-c", "import sys; sys.exit('no data')"], cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", "no data\n")


def test_a_run_started_by_a_niced_process_has_its_session_at_that_niceness(tmp_path):
    """Each session is a scheduling group of its own (autogroups): the run's group takes the starter's niceness,
    which the run's own processes only inherit (a niced worker's training took CPU as if at niceness 0)."""
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("this kernel has no autogroups (kernel.sched_autogroup_enabled): the niceness a run inherits "
                    "is what counts there, and nothing is set")
    # Read from outside while it runs: `cat /proc/self/autogroup` as the run once read it before it was set.
    starter = ("import os\nos.nice(7)\nfrom tests import children\nchild = children.Child(['sleep', '60'], cwd='.')\n"
               "print(os.getpriority(os.PRIO_PROCESS, 0), open(f'/proc/{child.process.pid}/autogroup').read(), end='')"
               "\nchild.kill()")
    done = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, cwd=REPO, check=True)
    niceness, group = done.stdout.split(" ", 1)
    assert int(niceness) >= 7 and group.endswith(f" nice {niceness}\n"), done.stdout
    assert Path("/proc/self/autogroup").read_text() != group  # a group of its own, not the tests'
