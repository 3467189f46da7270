"""deploy/build-for-tests.sh's LOWEST: a build left to run beside the suites runs in a session whose scheduling group
is at niceness 19, not only its processes (with autogroups, a session's group at niceness 0 took a core from the
builds the suites wait for, however niced the build's own processes were)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "deploy" / "build-for-tests.sh"


def lowest() -> str:
    """The script's LOWEST, as bash reads its assignment."""
    line = re.search(r"^LOWEST=.*$", SCRIPT.read_text(), re.MULTILINE)
    assert line, f"{SCRIPT} has no LOWEST= line"
    return subprocess.run(["bash", "-c", f'{line.group(0)}\nprintf %s "$LOWEST"'], capture_output=True, text=True,
                          check=True).stdout


def test_a_build_beside_the_suites_runs_at_the_lowest_priority_in_a_group_of_its_own():
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("this kernel has no autogroups (kernel.sched_autogroup_enabled): the build's own niceness is "
                    "what counts there")
    shown = subprocess.run(["setsid", "-w", "bash", "-c", lowest(), "lowest", "sh", "-c",
                            "cat /proc/self/autogroup; nice; ionice"],
                           capture_output=True, text=True, check=True, timeout=30).stdout.splitlines()
    group, niceness, io_class = shown
    assert group.endswith(" nice 19") and group != Path("/proc/self/autogroup").read_text().strip(), shown
    assert (niceness, io_class) == ("19", "idle"), shown
    assert '"$LOWEST"' in re.search(r'start "slurm-\$release" setsid.*', SCRIPT.read_text()).group(0)
