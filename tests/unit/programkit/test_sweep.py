"""A sweep's trials against a real Optuna journal in a temporary directory (programkit.sweep): one trial per task,
found again when the task runs again, distinct draws for concurrent tasks, reports, pruning, the end told once; a
stale lock cleared; the files of a user's making refused with a reason."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from programkit import studylock, sweep, sweepclaims
from tests.special_files import fifo, link_to

PLAN = {"space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, "batch_size": {"choices": [8, 16, 32]},
                  "image_size": {"low": 64, "high": 128}},
        "trials": 4, "parallel": 2, "sampler": "tpe", "pruner": "median", "min_epochs": 2, "seed": 0, "epochs": 4}


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    (tmp_path / sweep.PLAN_FILE).write_text(json.dumps(PLAN))
    return tmp_path


def cli(*args: str, module: str = "programkit.sweep_cli") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60)


def test_each_task_gets_one_trial_and_finds_it_again_when_run_again(job_dir):
    first = [sweep.attach(job_dir, task) for task in range(3)]
    assert [number for number, _, _ in first] == [0, 1, 2]
    assert all(not finished for _, _, finished in first)
    # Seeded per task: concurrent tasks do not draw the same values.
    assert len({params["lr"] for _, params, _ in first}) == 3
    number, params, finished = sweep.attach(job_dir, 1)  # Slurm runs task 1 again (its node failed)
    assert (number, params, finished) == (1, first[1][1], False)
    assert 8 <= params["batch_size"] <= 32 and isinstance(params["image_size"], int)
    study = sweep.open_study(job_dir, sweep.Plan.read(job_dir))
    assert len(study.get_trials()) == 3  # counted once


def test_the_cli_writes_the_trial_file_and_a_finished_trial_is_not_run_again(job_dir):
    answer = cli("attach", str(job_dir), "0")
    assert answer.returncode == 0 and answer.stdout.strip() == "0", answer.stderr
    trial = json.loads((job_dir / "trials" / "0" / "trial.json").read_text())
    assert trial["number"] == 0 and trial["task"] == 0 and set(trial["params"]) == {"lr", "batch_size", "image_size"}
    assert "ExperimentalWarning" not in answer.stderr
    assert cli("fail", str(job_dir), "0").returncode == 0
    again = cli("attach", str(job_dir), "0")
    assert again.returncode == sweep.EXIT_FINISHED and "already finished" in again.stderr
    status = json.loads(cli("status", str(job_dir)).stdout)
    assert [t["state"] for t in status["trials"]] == ["FAIL"]
    assert cli("attach", str(job_dir), "x").returncode == 2 and cli("nothing").returncode == 2
    # Job scripts written before they ran programkit.sweep_cli run `python -m chexnet.sweep` or `python -m
    # chexnet.sweep_cli`: the same command line
    for old in ("chexnet.sweep", "chexnet.sweep_cli"):
        assert json.loads(cli("status", str(job_dir), module=old).stdout) == status


def test_a_trial_reports_each_epoch_is_pruned_below_the_median_and_told_once(job_dir):
    for task in (0, 1):
        sweep.attach(job_dir, task)
    good = sweep.TrialReporter(job_dir, 0, 0)
    assert not good.report(1, 0.6) and not good.report(2, 0.9)
    good.complete(0.95)
    bad = sweep.TrialReporter(job_dir, 1, 1)
    assert not bad.report(1, 0.3)  # epoch 1 < min_epochs 2: never pruned there
    assert bad.report(2, 0.4)  # below the completed trial's 0.9 at epoch 2
    bad.pruned(2)
    bad.complete(0.5)  # a late tell after the prune changes nothing
    sweep.attach(job_dir, 2)
    last = sweep.TrialReporter(job_dir, 2, 2)
    for epoch in (1, 2, 3):
        last.report(epoch, 0.95)
    assert not last.report(4, 0.1)  # below the median, but after the last epoch: complete, not pruned
    status = sweep.status(job_dir)
    assert [(t["state"], t["value"]) for t in status["trials"][:2]] == [("COMPLETE", 0.95), ("PRUNED", 0.4)]
    assert status["trials"][1]["epochs"] == {"1": 0.3, "2": 0.4}
    # When each started and finished, as seconds since the epoch (the page's wall time of the sweep)
    now = time.time()
    assert all(now - 60 < t["started"] <= t["ended"] <= now for t in status["trials"][:2])
    sweep.attach(job_dir, 3)
    assert sweep.status(job_dir, 3)["trials"][0]["ended"] is None  # running: not finished


def test_a_resumed_trial_reports_its_checkpoints_epochs_again_keeping_the_first(job_dir):
    sweep.attach(job_dir, 0)
    reporter = sweep.TrialReporter(job_dir, 0, 0)
    reporter.report(1, 0.5)  # the run killed after epoch 2's checkpoint, before its report
    again = sweep.TrialReporter(job_dir, 0, 0)
    again.catch_up({1: 0.55, 2: 0.7})
    assert sweep.status(job_dir)["trials"][0]["epochs"] == {"1": 0.5, "2": 0.7}


def test_a_runs_reporter_comes_from_its_trial_file_and_catches_up_from_its_record(job_dir):
    """TrialReporter.for_run, as both programs' rank 0 makes it: from --trial, the resumed epochs (the per-epoch
    record in the checkpoint directory, any program's) reported again up to the epoch it resumes after."""
    from programkit import tblog

    assert sweep.TrialReporter.for_run(None, job_dir, 0) is None  # not a sweep
    number, params, _ = sweep.attach(job_dir, 0)
    trial_file = sweep.write_trial_file(job_dir, 0, number, params)
    checkpoints = job_dir / "trials" / "0" / "checkpoints"
    checkpoints.mkdir()
    for epoch, auroc in ((1, 0.5), (2, 0.6), (3, 0.7)):
        tblog.append_record(tblog.record_path(checkpoints), tblog.EpochScalars(epoch, {"auroc/mean": auroc}, "x"))
    reporter = sweep.TrialReporter.for_run(trial_file, checkpoints, 2)
    assert reporter is not None and reporter.describe().startswith(f"trial {number}: lr=")
    assert sweep.status(job_dir)["trials"][0]["epochs"] == {"1": 0.5, "2": 0.6}  # not epoch 3: it runs again
    with pytest.raises(sweep.SweepError, match=r"--trial .*: the sweep's study cannot be opened"):
        sweep.TrialReporter.for_run(job_dir / "nothing.json", checkpoints, 0)


def test_nan_auroc_fails_the_trial_rather_than_completing_it(job_dir):
    sweep.attach(job_dir, 0)
    sweep.TrialReporter(job_dir, 0, 0).complete(float("nan"))
    assert sweep.status(job_dir)["trials"][0]["state"] == "FAIL"


def test_close_fails_every_unfinished_trial(job_dir):
    for task in (0, 1, 2):
        sweep.attach(job_dir, task)
    sweep.TrialReporter(job_dir, 0, 0).complete(0.8)
    assert sweep.close(job_dir) == 2
    assert [t["state"] for t in sweep.status(job_dir)["trials"]] == ["COMPLETE", "FAIL", "FAIL"]


def test_a_lock_left_by_a_killed_writer_is_cleared_a_fresh_one_is_not(job_dir):
    lock = Path(f"{job_dir / sweep.JOURNAL_FILE}.lock")
    lock.write_text("")
    assert not studylock.clear_stale_lock(job_dir / sweep.JOURNAL_FILE)
    old = time.time() - studylock.STALE_LOCK_S - 5
    os.utime(lock, (old, old))
    started = time.monotonic()
    assert sweep.attach(job_dir, 0)[0] == 0  # not a wait forever
    assert time.monotonic() - started < 10 and not lock.exists()


def test_a_writer_waiting_when_the_holder_is_killed_takes_the_lock_once_it_is_stale(job_dir, monkeypatch):
    """The other task of a sweep, mid-training when a node dies with the lock: it waits, then goes on."""
    monkeypatch.setattr(studylock, "STALE_LOCK_S", 1.5)
    journal = job_dir / sweep.JOURNAL_FILE
    Path(f"{journal}.lock").write_text("")  # fresh: a write in progress, whose writer is then killed
    waiter = studylock.StudyLock(journal)
    taken = threading.Event()
    thread = threading.Thread(target=lambda: waiter.acquire() and taken.set(), daemon=True)
    started = time.monotonic()
    thread.start()
    assert not taken.wait(0.5)  # a lock younger than STALE_LOCK_S is a live write: waited on
    assert taken.wait(10)
    assert time.monotonic() - started >= 1.4
    waiter.release()
    assert not Path(f"{journal}.lock").exists()


def test_files_of_the_users_making_are_refused_with_a_reason(job_dir):
    journal = job_dir / sweep.JOURNAL_FILE
    fifo(journal)
    answer = cli("status", str(job_dir))
    assert answer.returncode == 2 and "not a regular file" in answer.stderr
    journal.unlink()
    link_to(journal, "/etc/passwd")
    assert "not a regular file" in cli("attach", str(job_dir), "0").stderr
    journal.unlink()
    journal.write_text("not json\n")
    assert cli("status", str(job_dir)).returncode == 2
    (job_dir / sweep.PLAN_FILE).write_text("[1, 2]")
    assert "not a sweep's plan" in cli("attach", str(job_dir), "0").stderr
    assert sweep.status(job_dir.parent / "nothing-here") == {"trials": []}


def test_the_benchmarks_seed_draws_learning_trials_first_and_a_bad_one_later(tmp_path):
    from bench.sweep import BAD_LR, GOOD_LR, drawn_lr, seed_for

    seed = seed_for(6, 2)
    lrs = [drawn_lr(seed, task) for task in range(6)]
    assert lrs[:2] == [GOOD_LR, GOOD_LR] and BAD_LR in lrs[2:]
    # As the trials draw it: each task's attach, in any order, gets the value drawn_lr says.
    (tmp_path / sweep.PLAN_FILE).write_text(json.dumps({**PLAN, "sampler": "random", "seed": seed,
                                                        "space": {"lr": {"choices": [GOOD_LR, BAD_LR]}}}))
    for task in (3, 0, 5, 1):
        assert sweep.attach(tmp_path, task)[1]["lr"] == lrs[task]


def test_pods_claim_distinct_tasks_and_a_silent_holders_task_is_taken_over(job_dir):
    """Kubernetes: pods carry no index, so each claims the lowest task no live pod holds."""
    assert sweepclaims.claim(job_dir, "pod-a", 3) == (0, False)
    assert sweepclaims.claim(job_dir, "pod-b", 3) == (1, True)
    assert sweepclaims.claim(job_dir, "pod-a", 3) == (0, False)  # the same pod asking again keeps its task
    sweep.attach(job_dir, 2)
    sweep.fail(job_dir, 2)  # task 2's trial has finished: nobody runs it again
    assert sweepclaims.claim(job_dir, "pod-c", 3) == (None, True)  # 0 and 1 held: wait for a lost one
    lost = job_dir / sweepclaims.CLAIMS_DIR / "1"
    os.utime(lost, (time.time() - sweepclaims.STALE_CLAIM_S - 5,) * 2)  # pod-b's node died: no more heartbeats
    assert sweepclaims.claim(job_dir, "pod-c", 3) == (1, True)
    assert lost.read_text().strip() == "pod-c"
    for task in (0, 1):
        sweep.attach(job_dir, task)
        sweep.fail(job_dir, task)
    assert sweepclaims.claim(job_dir, "pod-d", 3) == (None, False)  # every trial finished
    answer = cli("claim", str(job_dir), "pod-d", "3")
    assert answer.returncode == sweep.EXIT_FINISHED and "nothing left" in answer.stderr


def test_the_claim_cli_checks_its_arguments(job_dir):
    assert cli("claim", str(job_dir), "pod-a", "2").stdout.strip() == "0"
    for holder, trials in (("pod a", "2"), ("", "2"), ("../x", "2"), ("pod-a", "two"), ("pod-a", "-1")):
        assert cli("claim", str(job_dir), holder, trials).returncode == 2, (holder, trials)
    link_to(job_dir / sweepclaims.CLAIMS_DIR / "1", "/etc/passwd")  # a link of the user's is no claim
    assert sweepclaims.claim(job_dir, "pod-b", 2) == (1, True)
    assert not (job_dir / sweepclaims.CLAIMS_DIR / "1").is_symlink()
    status = json.loads(cli("status", str(job_dir), "0").stdout)
    assert status == {"trials": []}  # no trial before the pod attaches


def test_a_fresh_lock_taken_between_a_waiters_look_and_its_break_is_left_to_its_writer(job_dir, monkeypatch):
    """Two waiters find the same stale lock: the first breaks it and a writer takes a fresh one before the second
    acts on what it saw. The second must not remove the writer's lock."""
    journal = job_dir / sweep.JOURNAL_FILE
    lock = Path(f"{journal}.lock")
    lock.write_text("")
    old = time.time() - studylock.STALE_LOCK_S - 5
    os.utime(lock, (old, old))
    real_rename = os.rename

    def others_act_first(src, dst):  # between the second waiter's lstat and its rename
        lock.unlink()  # the first waiter broke the stale lock,
        lock.write_text("")  # and a writer took a fresh one (its inode may well be the old one's again)
        real_rename(src, dst)
    monkeypatch.setattr(studylock.os, "rename", others_act_first)
    assert not studylock.clear_stale_lock(journal)
    assert lock.exists() and time.time() - lock.stat().st_mtime < 5  # the writer's lock, back in place
    assert [p.name for p in job_dir.iterdir() if p.name.endswith(".stale")] == []


# Journals of a sweep running when the portal's Optuna moved, written by tests/capture_optuna_journal.py (how: its
# docstring) under the version named: task 0 completed, 1 pruned at epoch 2, 2 failed, 3 running after epoch 1.
JOURNALS = Path(__file__).resolve().parents[1] / "data"
WRITTEN_BY = ("4.1.0", "5.0.0")


@pytest.mark.parametrize("version", WRITTEN_BY)
def test_a_journal_another_optuna_wrote_is_read_as_the_sweep_page_reads_it_and_continued(version, tmp_path):
    """4.1.0's: a sweep started before the upgrade to 5.0. 5.0.0's: one started before a rollback to 4.1 (with 5.0
    installed, its own format). Read by `programkit.sweep status` and the sweep page's reader, then continued with the
    installed Optuna: the running trial is found again and finishes, a new task gets a new trial."""
    from portal.records.sweep import read_status, recorded_plan, sweep_view

    shutil.copytree(JOURNALS / f"optuna-{version}", tmp_path, dirs_exist_ok=True)
    plan = recorded_plan(json.loads((tmp_path / sweep.PLAN_FILE).read_text()), 4, "chexnet")

    def rows():
        answer = cli("status", str(tmp_path))
        assert answer.returncode == 0, answer.stderr
        return sweep_view(plan, read_status(answer.stdout, plan), {}).rows

    before = rows()
    assert [(row.number, row.state) for row in before] == [(0, "COMPLETED"), (1, "PRUNED"), (2, "FAILED"),
                                                          (3, "RUNNING"), (None, "PENDING"), (None, "PENDING")]
    assert (before[0].value, before[0].epochs_run, before[1].pruned_at, before[3].best_auroc) == (0.78, 4, 2, 0.66)
    assert all(set(row.params) == set(plan.names) for row in before[:4])
    assert {type(before[0].params[name]) for name in ("fp16", "image_size", "model")} == {bool, int, str}
    assert all(row.started_at <= row.ended_at for row in before[:3]) and before[3].ended_at is None

    assert sweep.attach(tmp_path, 3) == (3, before[3].params, False)  # its task run again: the same trial
    running = sweep.TrialReporter(tmp_path, 3, 3)
    running.catch_up({1: 0.1, 2: 0.8})  # epoch 1 keeps the value the other version recorded
    assert not running.report(3, 0.82) and not running.report(4, 0.85)
    running.complete(0.85)
    number, params, finished = sweep.attach(tmp_path, 4)
    assert (number, set(params), finished) == (4, set(plan.names), False)
    fresh = sweep.TrialReporter(tmp_path, 4, 4)
    assert not fresh.report(1, 0.5) and fresh.report(2, 0.6)  # Hyperband: below trial 3's 0.8 at epoch 2
    fresh.pruned(2)

    after = rows()
    assert [row.state for row in after] == ["COMPLETED", "PRUNED", "FAILED", "COMPLETED", "PRUNED", "PENDING"]
    assert after[3].params == before[3].params and after[3].value == 0.85 and after[3].best_auroc == 0.85
    assert sweep.status(tmp_path, 3)["trials"][0]["epochs"] == {"1": 0.66, "2": 0.8, "3": 0.82, "4": 0.85}
    assert after[3].started_at == before[3].started_at <= after[3].ended_at
    assert sweep_view(plan, read_status(cli("status", str(tmp_path)).stdout, plan), {}).best.task == 3


def test_the_portal_and_the_pytorch_programs_venv_pin_one_optuna():
    """Both venvs write the same journal (the portal's attaches and reads, the PyTorch program's rank 0 reports)."""
    repo = JOURNALS.parents[2]
    pins = {path: re.findall(r"optuna==([0-9.]+)", (repo / path).read_text()) for path in
            ("setup.py", "deploy/local/torch-requirements.txt", "deploy/local/torch-requirements-gpu.txt")}
    assert all(len(found) == 1 for found in pins.values()) and len({v[0] for v in pins.values()}) == 1, pins
