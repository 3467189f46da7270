"""deploy/lib.sh's venv_reachable, install.sh's first check: a venv the users' jobs cannot reach (under a mode-700
directory) is refused at once, naming the directory; one still to be made (a new machine: nothing under /opt yet)
is not. The directories are made under /var/tmp (mode 1777): pytest's own tmp_path sits in a mode-700 directory,
which the check would rightly refuse."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.fixture
def open_dir():
    made = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="dsportal-unit-lib-"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made)


def reachable(venv: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f'. "{REPO}/deploy/lib.sh" && venv_reachable "$1"', "lib", str(venv)],
                          capture_output=True, text=True, timeout=30)


def test_a_venv_still_to_be_made_under_open_directories_is_reachable(open_dir):
    assert reachable(open_dir / "opt" / "dsportal" / "venv").returncode == 0  # none of it exists yet


def test_a_venv_under_a_closed_directory_is_refused_naming_it(open_dir):
    home = open_dir / "root"
    (home / "venv").mkdir(parents=True)
    home.chmod(0o700)
    for venv in (home / "venv", home / "new" / "venv"):  # made or still to be made: under a closed directory
        found = reachable(venv)
        assert found.returncode == 1
        assert f"install: {home} is mode drwx------: the users' jobs and servers could not reach" in found.stderr


def test_an_open_venv_is_reachable(open_dir):
    venv = open_dir / "venv"
    venv.mkdir(mode=0o755)
    open_dir.chmod(0o711)  # o+x alone lets them through
    assert reachable(venv).returncode == 0
