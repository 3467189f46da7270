"""The local scheduler's word on a job's state, read from what its script writes (its PID, then its exit status)
and whether its session runs: a job that writes its status and ends while its state is being read is read as
ended with that status, never as killed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from portal.config import PortalConfig
from portal.records.states import COMPLETED, FAILED, RUNNING
from portal.scheduler import local
from portal.scheduler.local import EXIT_STATUS_FILE, PID_FILE, LocalScheduler


class Files:
    """The job directory as its user's reads see it."""

    def __init__(self, **files: str):
        self.files = {PID_FILE: "4242\n", **files}
        self.name = "alice"

    def read_text(self, path: Path, cap: int) -> str | None:
        return self.files.get(path.name)


@pytest.mark.parametrize(("written", "alive", "ended_meanwhile", "state"), [
    ({}, True, None, RUNNING),
    ({EXIT_STATUS_FILE: "0\n"}, False, None, COMPLETED),
    ({}, False, None, FAILED),  # ended without its status: killed
    ({}, False, "0\n", COMPLETED),  # wrote its status and ended while its state was read
    ({}, False, "1\n", FAILED),
])
def test_the_state_is_what_the_script_wrote_whenever_it_ended(monkeypatch, written, alive, ended_meanwhile, state):
    user = Files(**written)

    def session_alive(pid: int) -> bool:
        assert pid == 4242
        if ended_meanwhile is not None:  # it wrote its status and ended just before this was asked
            user.files[EXIT_STATUS_FILE] = ended_meanwhile
            return False
        return alive

    monkeypatch.setattr(local, "session_alive", session_alive)
    record = SimpleNamespace(check_owner=lambda name: None, job_dir=Path("/home/alice/jobs/x/local-1"),
                             submitted_at="2026-12-05T16:26:47+00:00")
    assert LocalScheduler(PortalConfig()).state(record, user) == state
