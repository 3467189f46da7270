"""A sweep on the Kubernetes box (portal.scheduler.kubernetes.manifests.sweep_job_manifest, programkit.sweep claim): one
Job of trial pods in alice's namespace, at most `parallel` at once, sharing one Optuna study on her home volume; a bad
trial pruned early; a node lost mid-sweep, and the task its pod ran taken over by the pod the Job makes again,
which resumes the same trial from its checkpoint, counted once; a cancelled sweep's pods gone, its running trials
marked failed in the study.

Sized for 2 CPU cores as tests/integration/test_sweeps.py is: 64x64 images, batch 8, 3 epochs, one worker per
trial, the learning rate searched between 1e-3 (learns) and 1e-8 (does not), with a seed whose tasks 0 and 1
learn and task 2 does not (bench.sweep.seed_for): pods claim the lowest free task, so 0 and 1 run first.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from bench.sweep import BAD_LR, GOOD_LR, seed_for
from portal import jobs
from portal.scheduler.kubernetes.manifests import LABEL_JOB
from tests.conftest import TINY_MODEL, epochs_recorded, tensorboard_steps, wait_for
from tests.kubernetes.conftest import kubebox

pytestmark = pytest.mark.integration
ALICE = ("alice", ["datascientists", "gpu-users"])
NAMESPACE = "dsportal-u-alice"
# tinycnn: an epoch of a trial in under a second; enough epochs that the node lost after a trial's first checkpoint
# finds it training, and that the trials that learn reach a mean AUROC well above 0.8.
TRIAL = {"nodes": 1, "gpus_per_node": 1, "epochs": 30, "batch_size": 8, "image_size": 64, "cpus_per_task": 1,
         "memory_gb": 3, "time_limit": "00:15:00", "model": TINY_MODEL}
SWEEP_WAIT_S = 1200
LOST_S = 240  # the node NotReady (node-monitor-grace, 20 s), its pods' toleration (30 s), a claim silent 45 s




def most_at_once(pods) -> int:
    """The most trial containers that ran at the same time, from the start and end the kubelets recorded."""
    events = []
    for pod in pods:
        for status in pod.status.container_statuses or []:
            ran = status.state.terminated or status.state.running
            if ran is None or ran.started_at is None:
                continue
            events.append((ran.started_at, 1))
            end = getattr(ran, "finished_at", None)
            if end is not None:
                events.append((end, -1))
    running = most = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        running += step
        most = max(most, running)
    return most


def study_trials(home) -> dict[int, str]:
    """The study's trials on alice's home volume: task -> Optuna's state."""
    found = subprocess.run(["/opt/dsportal/venv/bin/python", "-m", "programkit.sweep_cli", "status", str(home)],
                           capture_output=True, text=True, check=True).stdout
    return {trial["task"]: trial["state"] for trial in json.loads(found)["trials"]}


def test_a_sweep_of_pods_prunes_runs_at_most_parallel_and_a_lost_pods_task_resumes(kube, cfg, core):
    """The default program's sweep: each program's sweep hooks are its own contract's, proven without a box
    (tests/programs/test_program_contract.py), and each program's one-trial sweep runs on this box in
    tests/kubernetes/test_listeners_on_kubernetes.py."""
    trials = 3
    seed = seed_for(trials, parallel=2)
    request = {**TRIAL,
               "sweep": {"trials": trials, "parallel": 2, "sampler": "random", "pruner": "median", "min_epochs": 2,
                         "seed": seed, "space": {"lr": [GOOD_LR, BAD_LR]}}}
    job = jobs.submit(request, user=ALICE[0], groups=ALICE[1], cfg=cfg)
    home = kube.box.path("volumes", "home", "alice", "jobs", cfg.cluster_name, job.id)
    selector = f"{LABEL_JOB}={job.id}"

    def pods():
        return core.list_namespaced_pod(NAMESPACE, label_selector=selector).items

    def checkpointed_pod():  # a running trial pod whose task has saved an epoch: (pod, task)
        # Epoch 2's record line, not epoch 1's: a line is written just before its epoch's checkpoint, so only the
        # next epoch's says the first checkpoint is saved (a node lost between the two, in CI at stop 70, left
        # the pod that took the task over nothing to resume from).
        for row in job.sweep().rows:
            if row.state == "RUNNING" and epochs_recorded(home / "trials" / str(row.task) / "checkpoints") >= 2:
                holder = (home / "claims" / str(row.task)).read_text().strip()
                found = [p for p in pods() if p.metadata.name == holder and p.status.phase == "Running"]
                if found:
                    return found[0], row.task
        return None

    try:
        pod, task = wait_for(checkpointed_pod, SWEEP_WAIT_S, interval=2, what="a trial's first checkpoint")
        node = pod.spec.node_name
        number = job.sweep().rows[task].number
        print(kubebox.crash(kube.box, node))  # its power lost: the pod's process killed, no goodbye, no FAIL
        wait_for(lambda: "takes it over" in job.logs(task=task), LOST_S, interval=3,
                 what=f"a new pod to take task {task} over")
        kubebox.up(kube.box, report=print)  # the node comes back, as an operator brings it back
        assert job.wait(timeout=SWEEP_WAIT_S, poll=5) == "COMPLETED", job.logs(tail=60, task=task)
    finally:
        if not job.done:
            job.cancel()

    log = job.logs(task=task)
    # On failure, the lines that say how each pod took the task up (the log's end alone showed only the last run).
    starts = "\n".join(line for line in log.splitlines()
                       if re.search(r"sweep task|takes it over|resum|holder|starting fresh", line))
    assert f"sweep task {task} is trial {number}" in log and "epochs done, continuing with epoch" in log, \
        f"{starts[-3000:]}\n...\n{log[-2000:]}"
    view = job.sweep()
    resumed = view.rows[task]
    assert resumed.number == number and resumed.state in ("COMPLETED", "PRUNED"), resumed
    # Every epoch once across the two pods. The resumed trial may be pruned: it comes back after the other trial
    # of its wave has completed, and is compared with it (the pruner's call: seen once at 0.93 against 0.96).
    steps = tensorboard_steps(home / "tensorboard" / f"trial-{number}", user=None)
    assert steps["auroc/mean"] == list(range(1, resumed.epochs_run + 1)) and resumed.epochs_run >= 2, steps

    assert [row.task for row in view.rows] == [0, 1, 2] and not view.problem, view
    assert sorted(row.number for row in view.rows) == [0, 1, 2], view.rows  # each trial once
    assert {row.task for row in view.rows if row.state == "COMPLETED"} & {0, 1}, view.rows
    bad = view.rows[2]
    assert bad.params == {"lr": BAD_LR} and bad.state == "PRUNED" and bad.pruned_at == 2, bad
    assert view.best.params == {"lr": GOOD_LR} and view.best.value > 0.8, view.best
    assert sorted(study_trials(home)) == [0, 1, 2]  # the study: each once
    assert most_at_once(pods()) <= 2 < trials


def test_cancelling_a_sweep_deletes_its_pods_and_fails_its_running_trials(kube, cfg, core):
    request = {**TRIAL, "epochs": 500, "sweep": {"trials": 3, "parallel": 2, "pruner": "none"}}
    job = jobs.submit(request, user=ALICE[0], groups=ALICE[1], cfg=cfg)
    home = kube.box.path("volumes", "home", "alice", "jobs", cfg.cluster_name, job.id)
    try:
        wait_for(lambda: sum(row.state == "RUNNING" for row in job.sweep().rows) == 2, SWEEP_WAIT_S, interval=2,
                 what="two trials to run")
        assert study_trials(home) == {0: "RUNNING", 1: "RUNNING"}
    finally:
        job.cancel()
    assert job.wait(timeout=120, poll=2) == "CANCELLED"
    wait_for(lambda: not core.list_namespaced_pod(NAMESPACE, label_selector=f"{LABEL_JOB}={job.id}").items, 120,
             interval=2, what="the sweep's pods to be deleted")
    # Each trial pod's TERM trap told the study its trial failed; task 2 never ran.
    assert study_trials(home) == {0: "FAIL", 1: "FAIL"}


