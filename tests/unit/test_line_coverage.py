"""tests/line_coverage.py, which `make coverage` runs: the .pth line it puts in the venv starts coverage.py in a
Python process only while the switch file exists, the process's data lands in the shared directory (also when it
ends by SIGTERM), and the report combines what the checkout's copy and an installed copy of a module ran into one
file's figures. Run here on a directory of the test's own; the venv's site-packages is never touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PORTAL_CODE = "from portal import inputs; inputs.whole_number(3, 'x', 1, 5)\n"  # a line of the product run


def measured(root: Path, code: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a new interpreter that runs `code` after the .pth line, as `site` would run
    it, with DSPORTAL_COVERAGE_DIR=root."""
    env = {**os.environ, "DSPORTAL_COVERAGE_DIR": str(root)}
    env.pop("COVERAGE_PROCESS_START", None)
    return [sys.executable, "-c", "from tests import line_coverage as lc; exec(lc.PTH_LINE)\n" + code], env


def in_a_process(root: Path, code: str) -> subprocess.CompletedProcess:
    argv, env = measured(root, code)
    return subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


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
    done = in_a_process(root, PORTAL_CODE)
    assert done.returncode == 0, done.stderr
    assert not list((root / "data").glob(".coverage.*"))  # off: nothing measured
    (root / "on").touch()
    done = in_a_process(root, PORTAL_CODE)
    assert done.returncode == 0, done.stderr
    assert len(list((root / "data").glob(".coverage.*"))) == 1


def test_a_process_given_its_own_directory_ignores_another_directorys_switch(root: Path, tmp_path: Path):
    """`make coverage` has the venv's line on, with its switch, while these tests run: a process given a directory of
    its own measures into that one, and only while that one's switch is on."""
    from tests import line_coverage

    elsewhere = tmp_path / "make-coverage"
    (elsewhere / "data").mkdir(parents=True)
    (elsewhere / "coveragerc").write_text(line_coverage.rc_text().replace(str(root), str(elsewhere)))
    (elsewhere / "on").touch()
    argv, env = measured(root, PORTAL_CODE)
    argv[-1] = f"from tests import line_coverage as lc; exec(lc.pth_line({str(elsewhere)!r}))\n" + PORTAL_CODE
    for switch in ("off", "on"):
        if switch == "on":
            (root / "on").touch()
        done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert len(list((root / "data").glob(".coverage.*"))) == (switch == "on"), switch
        assert not list((elsewhere / "data").glob(".coverage.*")), switch


def test_a_process_ended_by_sigterm_keeps_its_data_and_the_report_counts_it(root: Path, capsys):
    from tests import line_coverage

    (root / "on").touch()
    argv, env = measured(root, PORTAL_CODE + "print('ready', flush=True)\nimport time; time.sleep(60)\n")
    child = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)  # coverage's SIGTERM handler saves the data before the process ends
    finally:
        child.kill()
        child.wait()
    assert line_coverage.report() == 0
    summary = json.loads((root / "summary.json").read_text())
    assert summary["processes"] == 1 and summary["packages"]["portal"]["covered_lines"] > 0, summary
    assert "coverage:" in capsys.readouterr().out
