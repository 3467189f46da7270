"""One reader per data_parser version (portal.scheduler.slurm.data_parsers), and the version the portal asks each
Slurm for (SlurmCommands.json_flag): the newest that both Slurm lists and the portal reads."""

from __future__ import annotations

import pytest

from portal.config import PortalConfig
from portal.scheduler.slurm import commands
from portal.scheduler.slurm.commands import SlurmCommands
from portal.scheduler.slurm.data_parsers import (
    DATA_PARSERS,
    SACCT_READERS,
    SQUEUE_READERS,
    number,
    state_word,
    wait_status,
)


@pytest.mark.parametrize(("value", "read"), [
    ({"set": True, "infinite": False, "number": 7}, 7), ({"set": False, "infinite": False, "number": 7}, None),
    ({"set": True, "infinite": True, "number": 0}, None), ({"set": 1, "infinite": False, "number": 7}, None),
    ({"set": True, "infinite": False, "number": "7"}, None), ({"set": True, "infinite": False, "number": True}, None),
    ({"set": True, "infinite": None, "number": 7}, None), (5, 5), (True, None), ("5", None), (None, None), ([5], None),
])
def test_numbers_that_may_be_unset(value, read):
    assert number(value) == read


@pytest.mark.parametrize(("value", "word"), [
    (["RUNNING"], "RUNNING"), (["PENDING", "REQUEUED"], "REQUEUED"), (["RUNNING", "COMPLETING"], "COMPLETING"),
    (["COMPLETED", "COMPLETING"], "COMPLETING"), (["RUNNING", "CONFIGURING"], "CONFIGURING"),
    (["CANCELLED", "LAUNCH_FAILED"], "CANCELLED"),  # a flag 22.05 never printed leaves the base state
    (["REQUEUED"], None), ([], None), (["running"], None), ("RUNNING", None), ([["RUNNING"]], None), (None, None),
])
def test_states_read_as_22_05_printed_them(value, word):
    """22.05 printed a job's first flag (job_state_string) in place of its base state; the lists read the same."""
    assert state_word(value) == word


def test_exit_codes_as_wait_statuses():
    unset = {"set": False, "infinite": False, "number": 0}
    code = {"status": ["ERROR"], "return_code": {"set": True, "infinite": False, "number": 3},
            "signal": {"id": unset, "name": ""}}
    assert wait_status(code) == 768
    signalled = {**code, "return_code": {"set": True, "infinite": False, "number": 0},
                 "signal": {"id": {"set": True, "infinite": False, "number": 9}, "name": "KILL"}}
    assert wait_status(signalled) == 9
    assert wait_status({**code, "return_code": unset}) is None and wait_status(768) is None


def test_every_version_has_both_readers():
    assert list(SQUEUE_READERS) == list(SACCT_READERS) == list(DATA_PARSERS)


def fake_squeue(tmp_path, script: str) -> PortalConfig:
    squeue = tmp_path / "squeue"
    squeue.write_text("#!/bin/sh\n" + script)
    squeue.chmod(0o755)
    return PortalConfig(state_dir=tmp_path, slurm_bin_dir=tmp_path)


@pytest.mark.parametrize(("listed", "flag"), [
    # 26.05's list (its own order): v0.0.45 is the newest both know
    ("Possible data_parser plugins:\ndata_parser/v0.0.43\ndata_parser/v0.0.42\ndata_parser/v0.0.45\n"
     "data_parser/v0.0.44\n", "--json=v0.0.45"),
    ("Possible data_parser plugins:\ndata_parser/v0.0.42\ndata_parser/v0.0.40\ndata_parser/v0.0.41\n",
     "--json=v0.0.42"),  # 24.11's
    ("data_parser/v0.0.46\ndata_parser/v0.0.45\n", "--json=v0.0.45"),  # a later Slurm: the newest the portal reads
    ("data_parser/v0.0.47\n", "--json"),  # nothing in common: Slurm's default, whose answer names its version
    ("squeue: option '--json' doesn't allow an argument\n", "--json"),  # 22.05
])
def test_the_json_version_asked_for(tmp_path, monkeypatch, listed, flag):
    monkeypatch.setattr(commands, "_JSON_FLAGS", {})
    cfg = fake_squeue(tmp_path, f"cat >&2 <<'EOF'\n{listed}EOF\nexit 1\n")
    assert SlurmCommands(cfg).json_flag() == flag
    (tmp_path / "squeue").write_text("#!/bin/sh\nexit 99\n")
    assert SlurmCommands(cfg).json_flag() == flag  # asked once per Slurm


def test_a_slurm_that_does_not_answer_is_asked_again(tmp_path, monkeypatch):
    monkeypatch.setattr(commands, "_JSON_FLAGS", {})
    cfg = fake_squeue(tmp_path, "sleep 5\n")
    assert SlurmCommands(cfg, timeout=0.2).json_flag() == "--json"
    (tmp_path / "squeue").write_text("#!/bin/sh\necho data_parser/v0.0.42\n")
    assert SlurmCommands(cfg).json_flag() == "--json=v0.0.42"
