"""A job's directory in one process (JobUser.make_job_dir), and Slurm's cancel read from scancel alone. Run as the
caller (no runuser): the same shell script the dashboard runs as the user."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from portal.config import PortalConfig
from portal.jobs import JobNotFound
from portal.records.account import THEN_FAILED, job_user
from portal.records.record import JobRecord
from portal.records.spec import JobSpec
from portal.scheduler.slurm.errors import SlurmError
from portal.scheduler.slurm.scheduler import SlurmScheduler


def test_the_directory_and_its_files_are_made_with_their_modes_and_its_inode_is_returned(tmp_path):
    job_dir = tmp_path / "jobs" / "5"  # ~/jobs itself is made too
    script = "#!/bin/bash\necho 'données: ü'\n" + "x" * 70_000  # more than one pipe buffer, not ASCII
    record = '{"id": "5"}\n'
    inode = job_user().make_job_dir(job_dir, [("job.sbatch", script, "700"), ("empty", "", "600"),
                                              ("job.json", record, "600")])
    assert inode == str(os.stat(job_dir).st_ino)
    assert stat.S_IMODE(os.stat(job_dir).st_mode) == 0o700
    assert (job_dir / "job.sbatch").read_text() == script and (job_dir / "job.json").read_text() == record
    assert (job_dir / "empty").read_text() == ""
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in job_dir.iterdir()}
    assert modes == {"job.sbatch": 0o700, "empty": 0o600, "job.json": 0o600}


def test_an_existing_directory_is_refused_or_with_replace_kept_renamed(tmp_path):
    me = job_user()
    job_dir = tmp_path / "jobs" / "5"
    job_dir.mkdir(parents=True)
    (job_dir / "old").write_text("an old job's")
    with pytest.raises(subprocess.CalledProcessError) as err:
        me.make_job_dir(job_dir, [("job.json", "{}", "600")])
    assert "File exists" in err.value.stderr and (job_dir / "old").exists()  # untouched, not removed
    me.make_job_dir(job_dir, [("job.json", "{}", "600")], replace=True)
    kept = [p for p in (tmp_path / "jobs").iterdir() if p.name.startswith("5.replaced-")]
    assert len(kept) == 1 and (kept[0] / "old").read_text() == "an old job's"
    assert sorted(p.name for p in job_dir.iterdir()) == ["job.json"]


def test_a_failed_step_leaves_no_directory_behind(tmp_path):
    me = job_user()
    job_dir = tmp_path / "jobs" / "6"
    with pytest.raises(subprocess.CalledProcessError) as err:  # the command after the files fails
        me.make_job_dir(job_dir, [("job.json", "{}", "600")], then=["sh", "-c", "echo refused >&2; exit 1"])
    assert err.value.returncode == THEN_FAILED and "refused" in err.value.stderr
    assert not job_dir.exists()
    with pytest.raises(subprocess.CalledProcessError) as err:  # a file that cannot be written
        me.make_job_dir(job_dir, [("job.json", "{}", "600"), ("script", "#!", "not-a-mode")])
    assert err.value.returncode != THEN_FAILED and "script" in err.value.stderr
    assert not job_dir.exists()
    with pytest.raises(ValueError):  # a name is a name, never a path
        me.make_job_dir(job_dir, [("../job.json", "{}", "600")])
    assert not job_dir.exists()


class ScriptedUser:
    """A JobUser whose commands answer as scripted: (returncode, stderr) for scancel."""

    name = "alice"

    def __init__(self, returncode: int, stderr: str):
        self.answer = subprocess.CompletedProcess([], returncode, "", stderr)
        self.ran: list[list[str]] = []

    def run(self, argv, **_):
        self.ran.append([os.path.basename(argv[0]), *argv[1:]])
        return self.answer


@pytest.mark.parametrize("stderr", [
    "scancel: error: Kill job error on job id 12: Invalid job id specified",  # forgotten, or hidden from her
    "scancel: error: Kill job error on job id 12: Access/permission denied",  # someone else's
])
def test_a_cancel_slurm_refuses_as_unknown_or_someone_elses_reads_as_not_found(stderr):
    user = ScriptedUser(1, stderr)
    record = JobRecord(id="12", scheduler="slurm", user="alice", spec=JobSpec(), submitted_at="2026-11-22T10:00:00",
                       job_dir=Path("/home/alice/jobs/12"))
    with pytest.raises(JobNotFound, match="not in Slurm's queue for alice"):
        SlurmScheduler(PortalConfig()).cancel(record, user)
    assert user.ran == [["scancel", "12"]]  # one command: no scontrol before it


def test_any_other_cancel_refusal_is_slurms_own_words():
    user = ScriptedUser(1, "scancel: error: Unable to contact slurm controller (connect failure)")
    record = JobRecord(id="12", scheduler="slurm", user="alice", spec=JobSpec(), submitted_at="2026-11-22T10:00:00",
                       job_dir=Path("/home/alice/jobs/12"))
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        SlurmScheduler(PortalConfig()).cancel(record, user)
    SlurmScheduler(PortalConfig()).cancel(record, ScriptedUser(0, ""))  # accepted: nothing raised
