"""`python -m portal.accounts`: sync and show through the command line, their exit codes and one-line errors, and
the real command runner with stand-ins for Slurm's programs.

The directory and Slurm's answers are the fakes test_accounts.py uses too (tests/unit/helpers.py): literal
`sacctmgr -nP` output.
"""

from __future__ import annotations

import stat

import pytest

from portal.config import PortalConfig
from portal.directory import DirectoryError
from portal.scheduler.slurm.accounts import desired_state, main, plan, read_slurm, show_lines, slurm_runner, sync
from portal.scheduler.slurm.errors import SlurmError
from tests.unit.helpers import ACCOUNTS_CFG as CFG
from tests.unit.helpers import DEMO, IN_SYNC, NEW_CLUSTER, NEW_USERS, FakeSlurm, group, slurm_state

# --- sync, gpu_limits and the command line -------------------------------------------------------------------


def run_main(capsys, *argv: str, directory=DEMO, slurm: FakeSlurm | None = None, euid: int = 0,
             cfg: PortalConfig | None = CFG) -> tuple[int, list[str], list[str]]:
    code = main(list(argv), read_dir=lambda cfg: directory, run=slurm or FakeSlurm(), euid=euid, cfg=cfg)
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_sync_applies_the_plan_in_order_and_reports_each_change(capsys):
    slurm = FakeSlurm(NEW_CLUSTER, NEW_USERS, "normal|\n")
    code, out, err = run_main(capsys, "sync", slurm=slurm)
    assert (code, err) == (0, [])
    assert out[0] == "add account datascientists" and out[-2:] == ["add bob to account datascientists with no GPUs",
                                                                   "7 changes"]
    assert slurm.writes == [cmd for c in plan(desired_state(DEMO, CFG), slurm_state(NEW_CLUSTER, NEW_USERS, ""))
                            for cmd in c.commands]


def test_in_sync(capsys):
    slurm = FakeSlurm()
    assert run_main(capsys, "sync", slurm=slurm) == (0, ["in sync"], [])
    assert slurm.writes == []


def test_a_dry_run_changes_nothing(capsys):
    slurm = FakeSlurm(IN_SYNC.replace("gres/gpu=4", "gres/gpu=2"))
    code, out, _ = run_main(capsys, "sync", "--dry-run", slurm=slurm)
    assert (code, out) == (0, ["alice: GPU limit 2 -> 4", "1 change (dry run: nothing changed)"])
    assert slurm.writes == []


def test_only_root_may_run_it(capsys):
    slurm = FakeSlurm()
    code, out, err = run_main(capsys, "sync", slurm=slurm, euid=1000)
    assert (code, out, len(err)) == (2, [], 1)
    assert "must run as root" in err[0]
    assert slurm.calls == []


@pytest.mark.parametrize("argv", [(), ("sync", "--force"), ("delete",), ("show", "alice")])
def test_usage_errors(capsys, argv):
    code, _, err = run_main(capsys, *argv)
    assert (code, len(err)) == (2, 1)
    assert "usage: python -m portal.accounts sync [--dry-run] | show" in err[0]


def test_a_bad_setting_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setenv("DSPORTAL_LDAP_TLS", "sometimes")
    code, _, err = run_main(capsys, "sync", cfg=None)
    assert (code, len(err)) == (2, 1)
    assert "ldap_tls is 'sometimes'; allowed: starttls, ldaps, none" in err[0]


def test_a_failing_directory_is_one_line_and_exit_1(capsys):
    def down(cfg):
        raise DirectoryError("LDAP at ldap://127.0.0.1:3389: socket connection error while opening: [Errno 111]")

    slurm = FakeSlurm()
    code = main(["sync"], read_dir=down, run=slurm, euid=0, cfg=CFG)
    out, err = capsys.readouterr()
    assert (code, out, err.count("\n")) == (1, "", 1)
    assert err.startswith("python -m portal.accounts: LDAP at ldap://127.0.0.1:3389: socket connection error")
    assert slurm.writes == []


def test_slurm_refusing_stops_the_sync_with_its_own_words(capsys):
    directory = (group("datascientists", "alice"), *DEMO[1:])  # bob leaves, but has a job running
    code, out, err = run_main(capsys, "sync", directory=directory, slurm=FakeSlurm(refuse="Name=bob"))
    assert (code, out, len(err)) == (1, [], 1)
    assert "Slurm refused `sacctmgr -i delete user where Name=bob" in err[0]
    assert "Job(s) active, cancel job(s) before remove" in err[0]


def test_show_and_gpu_limits(capsys):
    slurm = FakeSlurm(IN_SYNC + "dsportal|datascientists|carol|\n")
    code, out, _ = run_main(capsys, "show", slurm=slurm)
    assert code == 0
    assert out == ["USER   ACCOUNT         GPUS", "admin  portal-admins   0", "alice  gpu-users       4",
                   "bob    datascientists  0", "carol  datascientists  none", "root   root            none"]
    gpus = {a.user: a.gpus for a in read_slurm(CFG, slurm).associations}  # GrpTRES gres/gpu; None: no limit
    assert gpus == {"admin": 0, "alice": 4, "bob": 0, "carol": None, "root": None}
    assert show_lines(()) == ["USER  ACCOUNT  GPUS"]


def test_sync_reports_and_warns_through_what_it_is_given():
    reported, warned = [], []
    directory = (*DEMO, group("Bad Name", "alice"))
    changes = sync(CFG, dry_run=True, read_dir=lambda cfg: directory, run=FakeSlurm(NEW_CLUSTER, NEW_USERS),
                   report=reported.append, warn=warned.append)
    assert reported == changes and len(changes) == 6
    assert warned == list(desired_state(directory, CFG).warnings) and len(warned) == 1


# --- The real command runner, with stand-ins for Slurm's programs ----------------------------------------------


def stand_in(tmp_path, name: str, script: str) -> PortalConfig:
    program = tmp_path / name
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    return PortalConfig(state_dir=tmp_path, slurm_bin_dir=tmp_path)


def test_the_runner_passes_slurm_conf_and_returns_stdout(tmp_path):
    cfg = stand_in(tmp_path, "sacctmgr", 'echo "$SLURM_CONF $*"')
    assert slurm_runner(cfg)(["sacctmgr", "-nP", "show", "qos"]) == f"{tmp_path}/slurm/slurm.conf -nP show qos\n"


def test_the_runner_turns_a_refusal_into_one_line(tmp_path):
    cfg = stand_in(tmp_path, "sacctmgr", "echo ' Error with request: Job(s) active' >&2; echo '  C = x' >&2; exit 1")
    with pytest.raises(SlurmError) as err:
        slurm_runner(cfg)(["sacctmgr", "-i", "delete", "user", "where", "Name=bob"])
    assert str(err.value) == ("Slurm refused `sacctmgr -i delete user where Name=bob`: "
                              "Error with request: Job(s) active; C = x")
    with pytest.raises(SlurmError, match="cannot run .*/scontrol: No such file"):
        slurm_runner(cfg)(["scontrol", "show", "config"])
