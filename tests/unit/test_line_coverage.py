"""tests/line_coverage.py, which `make coverage` runs: the .pth line it puts in the venv starts coverage.py in a
Python process only while the switch file exists, the process's data lands in the shared directory (also when it
ends by SIGTERM), and the report combines what the checkout's copy and an installed copy of a module ran into one
file's figures. Run here on a directory of the test's own; the venv's site-packages is never touched."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def in_a_process(root: Path, code: str) -> subprocess.CompletedProcess:
    """`code` in a new interpreter, after the .pth line as `site` would run it, with DSPORTAL_COVERAGE_DIR=root."""
    env = {**os.environ, "DSPORTAL_COVERAGE_DIR": str(root)}
    env.pop("COVERAGE_PROCESS_START", None)
    prelude = "from tests import line_coverage as lc; exec(lc.PTH_LINE)\n"
    return subprocess.run([sys.executable, "-c", prelude + code], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from tests import line_coverage

    root = tmp_path / "coverage"
    for name, value in {"ROOT": root, "DATA": root / "data", "SWITCH": root / "on", "RC": root / "coveragerc",
                        "SUMMARY": root / "summary.json"}.items():
        monkeypatch.setattr(line_coverage, name, value)
    (root / "data").mkdir(parents=True)
    (root / "coveragerc").write_text(line_coverage.rc_text())
    return root


def test_a_process_measures_itself_only_while_the_switch_is_on(root: Path):
    done = in_a_process(root, "from portal import inputs; inputs.whole_number(3, 'x', 1, 5)")
    assert done.returncode == 0, done.stderr
    assert not list((root / "data").glob(".coverage.*"))  # off: nothing measured
    (root / "on").touch()
    done = in_a_process(root, "from portal import inputs; inputs.whole_number(3, 'x', 1, 5)")
    assert done.returncode == 0, done.stderr
    assert len(list((root / "data").glob(".coverage.*"))) == 1


def test_a_process_ended_by_sigterm_keeps_its_data_and_the_report_counts_it(root: Path, capsys):
    from tests import line_coverage

    (root / "on").touch()
    env = {**os.environ, "DSPORTAL_COVERAGE_DIR": str(root)}
    env.pop("COVERAGE_PROCESS_START", None)
    code = ("from tests import line_coverage as lc; exec(lc.PTH_LINE)\n"
            "from portal import inputs; inputs.whole_number(3, 'x', 1, 5); print('ready', flush=True)\n"
            "import time; time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 10
    while not list((root / "data").glob(".coverage.*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert line_coverage.report() == 0
    summary = json.loads((root / "summary.json").read_text())
    assert summary["processes"] == 1 and summary["packages"]["portal"]["covered_lines"] > 0, summary
    assert "coverage:" in capsys.readouterr().out
    shutil.rmtree(root)
