"""Sweeps on the box's Slurm (portal.records.sweep, programkit.sweep): a job array of trials sharing one Optuna study
in the job's directory, at most `parallel` at once, bad trials pruned early; a node lost mid-sweep, and the trial
it ran resumes from its checkpoint, counted once.

Sized for 2 CPU cores: the demo set's 64x64 images, batch 8, tinycnn (these test the sweep, not the model), one
worker per trial. The learning rate is the searched parameter, with two choices far apart: 1e-3 learns the demo
set's signal (mean AUROC above 0.9 after 5 epochs), 1e-8 does not move from its start (~0.4). The random
sampler draws trial `task` with seed + task, so
the seed is picked (bench.sweep.seed_for, with the sampler the trials use) for tasks 0 and 1, the first two to
run, to learn and for a later one not to: the median pruner then has completed trials to compare with and a
trial below them.
"""

from __future__ import annotations

import re
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from bench.sweep import BAD_LR, GOOD_LR, seed_for
from portal import jobs
from portal.config import load
from portal.runas import RUNUSER
from tests.conftest import (
    Mailbox,
    box,
    epochs_recorded,
    every_epoch_once_up_to,
    node_taken_back,
    scratch_dir,
    slurm,
    tensorboard_steps,
    wait_for,
)
from tests.integration.helpers import JOB_TIMEOUT_S, KILL_WAIT_S, PORTAL, TINY, portal_client, user_processes

pytestmark = pytest.mark.integration
SWEEP_TIMEOUT_S = 1500
# tinycnn trains an epoch of a trial in under a second: enough epochs that the node lost after a task's first
# checkpoint finds it (and its sibling) training, with epochs left to resume.
NODE_LOSS_EPOCHS = 40
MAIL_WAIT_S = 60  # MailProg runs when slurmctld records the array's end; the box's exim delivers at once


def most_at_once(array_id: str) -> int:
    """The most tasks of the array that ran at the same time, from Slurm's accounting (every run of every task,
    requeued ones included: -D): a sweep over (start, +1) and (end, -1), ends first within a second."""
    rows = slurm("sacct", "-X", "-D", "-P", "-n", "-j", array_id, "-o", "JobID,Start,End").splitlines()
    events = []
    for row in rows:
        _, start, end = row.split("|")
        if start in ("Unknown", "None", ""):
            continue  # the pending rest of the array
        events.append((datetime.fromisoformat(start), 1))
        events.append((datetime.fromisoformat(end) if end not in ("Unknown", "None", "") else datetime.now(), -1))
    running = most = 0
    for _, step in sorted(events):
        running += step
        most = max(most, running)
    return most


def hparams_groups(logdir: Path, port: int = 16106) -> list[dict]:
    """The session groups (rows) of TensorBoard's HPARAMS tab over `logdir`, from TensorBoard itself run as alice."""
    import requests

    # TensorBoard imports TensorFlow, whose Keras writes keras.json: into the tests' scratch, not her ~/.keras.
    keras_home = f"KERAS_HOME={scratch_dir('alice')}/keras"
    server = subprocess.Popen([RUNUSER, "-u", "alice", "--", "env", keras_home, "/opt/dsportal/venv/bin/tensorboard",
                               "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port)], cwd="/tmp",
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    body = {"experimentName": "", "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                                                      "STATUS_RUNNING"], "colParams": [], "startIndex": 0,
            "sliceSize": 100}
    try:
        def groups():
            try:
                answer = requests.post(f"http://127.0.0.1:{port}/data/plugin/hparams/session_groups", json=body,
                                       timeout=10)
            except requests.ConnectionError:
                return None
            return answer.json()["sessionGroups"] if answer.ok else None
        return wait_for(groups, 90, interval=2, what="TensorBoard's hparams plugin")
    finally:
        server.terminate()
        server.wait(30)


def test_a_sweep_prunes_a_bad_trial_and_runs_at_most_its_parallel(cluster, hub, demo_data, no_jobs_left):
    trials = 4  # two waves of two: the first completes, the second has a trial below it (was 6: a third wave)
    seed = seed_for(trials, parallel=2)  # tasks 0 and 1 learn, a later one does not
    client = portal_client(hub, "alice")
    # tinycnn learns the demo set's marks to a mean AUROC above 0.9 in 5 epochs at GOOD_LR, and not at BAD_LR. The
    # default program's: each program's sweep hooks (pruned, trial per task) are its own contract's, box-free.
    request = {**TINY, "epochs": 6, "gpus_per_node": 1,
               "sweep": {"trials": trials, "parallel": 2, "sampler": "random", "pruner": "median", "min_epochs": 2,
                         "seed": seed, "space": {"lr": [GOOD_LR, BAD_LR]}}}
    mailbox = Mailbox("alice")
    submitted = client.post(f"{client.base}jobs", json=request, timeout=60)
    assert submitted.status_code == 201, submitted.text
    sweep_id = submitted.json()["id"]
    job = jobs.get(sweep_id, user="alice")
    assert job.plan is not None and job.plan.parallel == 2 and job.spec.mail  # alice's default: e-mail at its end
    script = Path(job.job_dir, "job.sbatch").read_text()
    assert f"#SBATCH --array=0-{trials - 1}%2" in script

    # While it runs: never more than 2 tasks at once, and the page lists every task.
    deadline = time.monotonic() + SWEEP_TIMEOUT_S
    while (state := job.state) not in ("COMPLETED", "FAILED", "CANCELLED"):
        assert most_at_once(sweep_id) <= 2
        assert time.monotonic() < deadline, f"sweep {sweep_id} still {state}"
        time.sleep(5)
    assert state == "COMPLETED", job.logs(tail=60, task=0)
    assert most_at_once(sweep_id) <= 2
    assert most_at_once(sweep_id) == 2  # it did run two at once

    answer = client.get(f"{client.base}jobs/{sweep_id}", timeout=60).json()
    rows = answer["sweep"]["trials"]
    assert [row["task"] for row in rows] == list(range(trials)), rows
    assert sorted(row["trial"] for row in rows) == list(range(trials)), rows  # each trial once
    pruned = [row for row in rows if row["pruned"]]
    assert pruned, rows
    for row in pruned:  # min_epochs 2: the first epoch it may be pruned at; it trains no epoch after it
        assert row["state"] == "PRUNED" and row["pruned_at"] >= 2 and row["epochs_run"] == row["pruned_at"], row
    # A trial that does not learn is stopped at the first epoch it may be, once a trial has completed. One that
    # learns may be stopped too, at any epoch it is below the median of those that completed at that epoch: the
    # pruner's call (two learning trials running side by side differ by their random start).
    late_bad = [row for row in rows if row["params"]["lr"] == BAD_LR and row["task"] >= 2]
    assert late_bad and all(row["pruned"] and row["pruned_at"] == 2 for row in late_bad), rows
    completed = [row for row in rows if row["state"] == "COMPLETED"]
    assert {row["task"] for row in completed} & {0, 1}, rows  # the first two: one completes before any is pruned
    best = answer["sweep"]["best"]
    assert best["params"]["lr"] == GOOD_LR and best["value"] == max(row["value"] for row in completed), best
    assert best["value"] > 0.8, best
    # A pruned trial's task ended COMPLETED in Slurm (it exited 0): Slurm's word, not the study's.
    tasks = slurm("sacct", "-X", "-P", "-n", "-j", sweep_id, "-o", "JobID,State").split()
    assert all(line.endswith("|COMPLETED") for line in tasks), tasks

    # The sweep's page: the best trial, every task, a chart per parameter; the best trial's model card.
    session = hub.login("alice")
    page = session.get(f"{hub.url}{PORTAL}jobs/{sweep_id}", timeout=60)
    assert page.status_code == 200
    assert f"trial {best['trial']}</strong> (task {best['task']})" in page.text
    assert page.text.count("<tr data-task=") == trials and "pruned at epoch 2" in page.text
    assert 'class="scatter"' in page.text and 'id="card-download"' in page.text
    card = session.get(f"{hub.url}{PORTAL}jobs/{sweep_id}/model_card.json?task={best['task']}", timeout=60)
    assert card.status_code == 200 and card.json()["spec"]["lr"] == GOOD_LR
    log = session.get(f"{hub.url}{PORTAL}jobs/{sweep_id}/log?task={late_bad[0]['task']}", timeout=60).text
    assert "sweep: pruned at epoch 2 by the median pruner" in log

    # Every trial is a row of its own in TensorBoard's HPARAMS tab, with its learning rate and its AUROC.
    # Runs are named by their logdir below ~/jobs: the test box's cluster directory, then the sweep's.
    groups = hparams_groups(Path(job.job_dir) / "tensorboard")
    by_name = {group["name"]: group for group in groups}
    prefix = f"{load().cluster_name}/{sweep_id}"
    assert job.record.run_prefix == prefix
    assert sorted(by_name) == sorted(f"{prefix}/tensorboard/trial-{n}" for n in range(trials)), sorted(by_name)
    for row in rows:
        group = by_name[f"{prefix}/tensorboard/trial-{row['trial']}"]
        assert group["hparams"]["lr"] == pytest.approx(row["params"]["lr"])
        mean = next(m["value"] for m in group["metricValues"] if m["name"]["tag"] == "auroc/mean")
        assert mean == pytest.approx(row["value"], abs=1e-6)

    # The e-mail at its end, as delivered (the test box's mailbox): one message for the whole array, under the
    # sweep's id, with its best trial's AUROC and its page.
    (message,) = wait_for(lambda: mailbox.about(sweep_id), MAIL_WAIT_S, interval=2,
                          what=f"the e-mail about sweep {sweep_id} in {mailbox.path}")
    assert message["Subject"] == f"Job {sweep_id} COMPLETED: best mean AUROC {best['value']:.3f}", message["Subject"]
    assert f"{load().hub_url}/services/portal/jobs/{sweep_id}" in message.get_content()


def test_a_node_lost_mid_sweep_resumes_its_trial_counted_once(cluster, hub, demo_data, no_jobs_left):
    client = portal_client(hub, "alice")
    request = {**TINY, "epochs": NODE_LOSS_EPOCHS, "gpus_per_node": 1,
               "sweep": {"trials": 2, "parallel": 2, "sampler": "random", "pruner": "none",
                         "space": {"lr": {"low": 5e-4, "high": 2e-3, "log": True}}}}
    submitted = client.post(f"{client.base}jobs", json=request, timeout=60)
    assert submitted.status_code == 201, submitted.text
    job = jobs.get(submitted.json()["id"], user="alice")

    def node_of(task: int) -> str | None:
        found = re.search(r"chexnet: Slurm job \d+ on (\S+), ", job.logs(task=task))
        return found.group(1) if found else None

    def saved_epochs(task: int) -> int:  # the epochs its checkpoint state file names (written after the files)
        state = Path(job.job_dir, "trials", str(task), "checkpoints", "checkpoint")
        found = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', state.read_text() if state.exists() else "", re.M)
        return int(found.group(1)) if found else 0

    def trial_checkpoints(task: int) -> Path:
        return Path(job.job_dir, "trials", str(task), "checkpoints")

    def has_checkpoint(task: int) -> bool:
        return saved_epochs(task) > 0

    def first_checkpointed():  # a task that has saved its first epoch, and the node it runs on
        return next(((t, node_of(t)) for t in (0, 1) if node_of(t) and has_checkpoint(t)), None)
    task, node = wait_for(first_checkpointed, JOB_TIMEOUT_S, interval=1, what="a task's first checkpoint")
    lost = [t for t in (0, 1) if node_of(t) == node]  # both tasks, when Slurm put them on the same node
    trials_before = {t: job.sweep().rows[t].number for t in lost}
    assert box("crash", node).returncode == 0  # its power lost: every process on it killed, no goodbye
    # The admin who saw it go marks it down: Slurm requeues its tasks at once. Slurm finding a silent node by itself
    # (SlurmdTimeout, then the ping's own timeout: 39 s here) is proven once, by test_job_endings.py's node failure.
    slurm("scontrol", "update", f"nodename={node}", "state=down", "reason=power lost (test)")
    # The other task on that node, if any, may not have saved an epoch yet: it starts its trial again from epoch 1.
    # Read after the crash: what each task had saved when its node died is where it must go on.
    saved = {t: saved_epochs(t) for t in lost}
    wait_for(lambda: all(job.sweep().rows[t].state == "PENDING" for t in lost), 120, interval=2,
             what="Slurm to requeue the lost tasks")
    wait_for(lambda: not user_processes("alice")[node], KILL_WAIT_S, what=f"{node}'s processes to end")
    assert box("start", node).returncode == 0
    node_taken_back(node, ("idle", "mix", "alloc"))  # the killed runs' terminate requests delivered first
    for t in lost:  # as an admin would once the node is back; Slurm would wait 120 s
        slurm("scontrol", "update", f"jobid={job.id}_{t}", "starttime=now")
    # Each lost task goes on from what it had saved; once each has recorded the epoch after its resumed one, what
    # this test checks is there: the sweep is cancelled then (its other epochs would prove nothing more).
    wait_for(lambda: all(epochs_recorded(trial_checkpoints(t)) >= saved[t] + 2 for t in lost), JOB_TIMEOUT_S,
             interval=1, what="each requeued task's second epoch after its resume")
    assert client.delete(f"{client.base}jobs/{job.id}", timeout=60).status_code == 204
    assert job.wait(timeout=JOB_TIMEOUT_S, poll=3) == "CANCELLED", job.logs(tail=60, task=task)

    for t, number in trials_before.items():
        log = job.logs(task=t)
        assert "restarted (restart 1) after it was requeued" in log, log[-2000:]
        assert log.count(f"sweep task {t} is trial {number}") == 2, log[-2000:]  # both runs: the same trial
        if saved[t]:  # the task its node took down after a checkpoint goes on after it, not from the start
            assert f"{saved[t]} epochs done, continuing with epoch {saved[t] + 1}" in log, log[-2000:]
        else:
            assert "no checkpoint" in log, log[-2000:]
        steps = tensorboard_steps(Path(job.job_dir) / "tensorboard" / f"trial-{number}")
        every_epoch_once_up_to(steps, ("auroc/mean",), saved[t] + 1)  # every epoch once, across both runs
    assert sorted(row.number for row in job.sweep().rows) == [0, 1]
    status = subprocess.run([RUNUSER, "-u", "alice", "--", "/opt/dsportal/venv/bin/python", "-m",
                             "programkit.sweep_cli", "status", job.job_dir],
                            capture_output=True, text=True, check=True, cwd="/tmp").stdout
    assert status.count('"number"') == 2  # the study holds each trial once: the resumed one was not asked again


def test_cancelling_a_sweep_cancels_every_trial(cluster, hub, demo_data, no_jobs_left):
    client = portal_client(hub, "alice")
    request = {**TINY, "epochs": 500, "gpus_per_node": 1, "mail": True,
               "sweep": {"trials": 4, "parallel": 2, "pruner": "none"}}
    mailbox = Mailbox("alice")
    submitted = client.post(f"{client.base}jobs", json=request, timeout=60)
    assert submitted.status_code == 201, submitted.text
    job = jobs.get(submitted.json()["id"], user="alice")
    wait_for(lambda: sum(row.number is not None for row in job.sweep().rows) == 2, JOB_TIMEOUT_S, interval=2,
             what="two trials to start")
    assert client.delete(f"{client.base}jobs/{job.id}", timeout=60).status_code == 204
    assert job.wait(timeout=120, poll=2) == "CANCELLED"
    # slurmdbd records the tasks that ran a moment after the array's own line: wait for them (2 ran, the rest
    # pending, as one line)
    states = wait_for(lambda: len(found := slurm("sacct", "-X", "-P", "-n", "-j", job.id, "-o", "JobID,State")
                                  .splitlines()) >= 3 and found, 60, interval=2,
                      what=f"accounting to record sweep {job.id}'s cancelled tasks")
    assert all("|CANCELLED" in line for line in states), states
    view = job.sweep()
    assert [row.state for row in view.rows[:2]] == ["FAILED", "FAILED"], view.rows  # told FAIL by the cancel
    assert [row.state for row in view.rows[2:]] == ["CANCELLED", "CANCELLED"], view.rows  # never started
    wait_for(lambda: not any(user_processes("alice").values()), KILL_WAIT_S, what="the trials' processes to end")
    # Its one e-mail says how the sweep ended (Slurm's own word for an array is only its last task's).
    # One message (Slurm runs MailProg for the array's record and for its last task: the second is not sent).
    (message,) = wait_for(lambda: mailbox.about(job.id), 60, interval=2, what=f"the e-mail about sweep {job.id}")
    assert message["Subject"].startswith(f"Job {job.id} CANCELLED"), message["Subject"]
    time.sleep(5)
    assert len(mailbox.about(job.id)) == 1, [m["Subject"] for m in mailbox.about(job.id)]
