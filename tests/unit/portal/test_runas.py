"""Processes run as a user are isolated from what the user controls (portal.runas), and what they answer is checked
(portal.metrics.RunMetrics.from_json): the argv and environment built, a real `python -I` beside a home that holds
a forged `portal` package and sitecustomize files, and each malformed metrics answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from portal import runas
from portal.metrics import MetricsError, RunMetrics
from portal.records import account
from portal.records.account import JobUser
from portal.scheduler.home import METRICS_IF_EVENTS

FORGED = '{"images_per_sec": 1e9, "best_mean_auroc": 1.0, "epochs_done": 999}'


def test_runuser_argv_clears_the_environment_and_fixes_path():
    argv = runas.runuser_argv("alice", "/home/alice", ["cat", "--", "x"], {"SLURM_CONF": "/etc/slurm.conf"})
    assert argv[:7] == [runas.RUNUSER, "-u", "alice", "--", "/usr/bin/env", "-i", f"PATH={runas.ISOLATED_PATH}"]
    assert "HOME=/home/alice" in argv and "SLURM_CONF=/etc/slurm.conf" in argv and argv[-3:] == ["cat", "--", "x"]
    assert not [a for a in argv if a.startswith(("PYTHON", "JUPYTERHUB", "LD_"))]


@pytest.mark.parametrize("name", ["PYTHONPATH", "PYTHONSTARTUP", "LD_PRELOAD", "LD_LIBRARY_PATH"])
def test_nothing_that_changes_what_a_program_loads_is_passed(name):
    with pytest.raises(ValueError, match=name):
        runas.isolated_env("alice", "/home/alice", {name: "/home/alice/evil"})


def test_a_command_for_another_user_gets_no_secret_of_the_callers_and_runs_in_root(monkeypatch):
    assert os.geteuid() == 0, "acting for another user needs root (the dashboard's case): run the tests as root"
    seen = {}

    def fake_run(argv, input, timeout, **kwargs):
        seen.update(kwargs, argv=argv)
        return subprocess.CompletedProcess(argv, 0, b"", b"")

    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "service-secret")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    real_run = account.run_bounded
    monkeypatch.setattr(account, "run_bounded", fake_run)
    user = JobUser(name="alice", uid=10_001, gid=100, home=Path("/home/alice"), groups=())
    user.run(["cat", "--", "/home/alice/jobs/1/job.json"], env={"SLURM_CONF": "/s"})
    assert seen["env"] == runas.launcher_env()
    assert real_run(["pwd"], None, 30).stdout == b"/\n"  # every command runs in "/", never a home
    assert seen["argv"][:6] == [runas.RUNUSER, "-u", "alice", "--", "/usr/bin/env", "-i"]
    assert "service-secret" not in " ".join(seen["argv"]) and "/somewhere" not in " ".join(seen["argv"])


def test_the_metrics_helper_runs_python_isolated():
    assert f'"$2" {runas.PYTHON_ISOLATED} -m portal.metrics' in METRICS_IF_EVENTS


def forged_home(home: Path) -> None:
    """What a hostile user puts in their home: a `portal` package, sitecustomize in the home and user site."""
    (home / "portal").mkdir(parents=True)
    (home / "portal" / "__init__.py").write_text("")
    (home / "portal" / "metrics.py").write_text(f"print({FORGED!r})\n")
    (home / "sitecustomize.py").write_text(f"print({FORGED!r}); raise SystemExit(0)\n")
    site = home / ".local" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    site.mkdir(parents=True)
    (site / "usercustomize.py").write_text(f"print({FORGED!r}); raise SystemExit(0)\n")


def test_a_forged_portal_package_in_the_home_is_not_imported(tmp_path):
    home = tmp_path / "home"
    forged_home(home)
    logdir = tmp_path / "empty-logdir"
    leaky = subprocess.run([sys.executable, "-m", "portal.metrics", str(logdir)], cwd=home, capture_output=True,
                           text=True, env={**os.environ, "HOME": str(home), "PYTHONPATH": str(home)}, timeout=60)
    assert "1e9" in leaky.stdout or "1000000000" in leaky.stdout  # without isolation the user's code answers
    env_argv = [runas.ENV, "-i", *(f"{k}={v}" for k, v in runas.isolated_env("alice", home).items())]
    isolated = subprocess.run([*env_argv, sys.executable, runas.PYTHON_ISOLATED, "-m", "portal.metrics", str(logdir)],
                              cwd=runas.ISOLATED_CWD, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(home), **runas.launcher_env()})
    assert isolated.returncode == 0, isolated.stderr
    assert RunMetrics.from_json(isolated.stdout) == RunMetrics()


def test_real_metrics_read_back():
    metrics = RunMetrics(images_per_sec=17.5, best_mean_auroc=0.81, best_epoch=3, epochs_done=4,
                         per_class_auroc={"Atelectasis": 0.8, "Mass": 0.7})
    assert RunMetrics.from_json(json.dumps(metrics.to_dict())) == metrics
    assert RunMetrics.from_json("{}") == RunMetrics()


MALFORMED_METRICS = [
    ("not JSON", "oops"),
    ("an array", "[]"),
    ("null", "null"),
    ("NaN", '{"images_per_sec": NaN}'),
    ("Infinity", '{"best_mean_auroc": Infinity}'),
    ("a huge number", '{"images_per_sec": 1e999}'),
    ("a string number", '{"images_per_sec": "12"}'),
    ("a boolean", '{"epochs_done": true}'),
    ("a negative count", '{"epochs_done": -1}'),
    ("a float count", '{"epochs_done": 1.5}'),
    ("AUROC above one", '{"best_mean_auroc": 7}'),
    ("an unknown field", '{"user": "bob"}'),
    ("per-class a list", '{"per_class_auroc": []}'),
    ("per-class too many", json.dumps({"per_class_auroc": {f"c{i}": 0.5 for i in range(300)}})),
    ("per-class a long name", json.dumps({"per_class_auroc": {"x" * 500: 0.5}})),
    ("per-class a string value", '{"per_class_auroc": {"Mass": "0.5"}}'),
    ("per-class a null value", '{"per_class_auroc": {"Mass": null}}'),
    ("output too large", json.dumps({"unreadable": "x" * 100_000})),
    ("deep nesting", "[" * 100_000 + "]" * 100_000),
]


@pytest.mark.parametrize(("what", "text"), MALFORMED_METRICS, ids=[m[0] for m in MALFORMED_METRICS])
def test_each_malformed_metrics_answer_is_refused(what, text):
    with pytest.raises(MetricsError) as caught:
        RunMetrics.from_json(text)
    assert len(str(caught.value)) < 200, what


def test_reads_of_a_users_files_are_bounded(tmp_path):
    """A log of one 2 MB line, a job.json of 2 MB: what is read of them is capped (here as the caller)."""
    from portal.records.account import job_user

    log = tmp_path / "output.log"
    log.write_text("x" * 2_000_000 + "\nlast line\n")
    me = job_user()
    assert me.tail(log, 2, max_bytes=1000) == "x" * 989 + "\nlast line\n"
    assert len(me.tail(log, None, max_bytes=5000)) == 5000
    assert len(me.read_text(log, limit=100)) == 101  # one byte more than the limit: the caller knows it is cut
    assert me.tail(tmp_path / "missing", 5) is None and me.read_text(tmp_path / "missing") is None
