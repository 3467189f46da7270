"""The training programs' contract, box-free: every program registered in portal.records.programs (each test's id is
its NAME) runs for real through the same tests, so a third program gets all of them by registering; so does the toy
program written in tests/ with the program kit alone (tests/toyprogram: no framework), registered here. Each run is a
sweep's trial as a task's job script makes it: `python -m programkit.sweep_cli attach JOB_DIR TASK` writes its
trial.json, then the program runs as `python -m MODULE` from its own venv (one process: the smallest launch without a
box), this checkout's code on PYTHONPATH, with the flags every program's job scripts give (--resume, --progress epoch).

What the portal reads of any program, proven here:
- the sweep hooks: a trial below the study's completed trials is pruned by the median pruner at its first allowed
  epoch and trains no epoch after; one above them completes and the study holds its value and each epoch's;
- the per-epoch record (checkpoints/epochs.jsonl, and its `dsportal.epoch` lines in the log), TensorBoard's epoch
  tags once per epoch with HPARAMS and the layout, and the model card;
- a kill mid-epoch, then the task run again as Slurm's requeue runs it (attach again: the same trial; --resume):
  it goes on after its last checkpoint, and the record, TensorBoard and the study hold every epoch once;
- tracking: rank 0 logs the task to one MLflow run as the job's owner, continued after the requeue, each epoch once;
- a bad flag: exit 2 and one line naming it.

Sized for 2 CPU cores: the synthetic set (tests/programs/conftest.py), tinycnn at 64x64, 3 epochs. The completed
trial's run is shared by the record, tag and card tests (module-scoped, per program); CPU_FLAGS only makes runs
cheaper here, and a program without an entry runs without any.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.sweep import BAD_LR, GOOD_LR
from portal.records.programs import REGISTERED, Program, registry_of
from programkit import mlflow_file, sweep, tblog
from programkit.schemas import EPOCH_RECORD, MODEL_CARD, check
from programkit.tags import (
    AUROC_TAG_PREFIX,
    AUROC_TAGS,
    TAG_AUROC_MEAN,
    TAG_LOSS_TRAIN,
    TAG_LOSS_VAL,
    TAG_LR,
    TAG_THROUGHPUT,
)
from tests import cards
from tests.children import LIMIT_S, run_child, start_in_own_session
from tests.conftest import (
    REPO,
    TINY_MODEL,
    TRAINER_SPEEDUP,
    epochs_recorded,
    last_checkpoint,
    tensorboard_steps,
)
from tests.programs.helpers import program_python
from tests.toyprogram import TOY_PROGRAM

PROGRAMS = registry_of((*REGISTERED, TOY_PROGRAM)).programs  # the registered ones, and the toy registered here
EPOCHS = 3
SIZE = 64  # the synthetic set's (tests/programs/conftest.py)
MIN_EPOCHS = 2  # the sweep's: the median pruner may stop a trial from this epoch on, not before
CORE_TAGS = (TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_LR, TAG_AUROC_MEAN)
CPU_FLAGS = {"chexnet": TRAINER_SPEEDUP, "chexnet-torch": ("--loader-workers", "0")}
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)}
RESUMED = re.compile(r"(\d+) epochs done, continuing with epoch (\d+) of (\d+)")


@pytest.fixture(scope="module", params=PROGRAMS, ids=[program.name for program in PROGRAMS])
def program(request) -> Program:
    return request.param


@dataclass(frozen=True)
class Trial:
    """A sweep's task and its trial, where the job scripts put its files."""

    job_dir: Path
    task: int
    number: int

    @property
    def file(self) -> Path:
        return self.job_dir / sweep.TRIALS_DIR / str(self.task) / sweep.TRIAL_FILE

    @property
    def checkpoints(self) -> Path:
        return self.file.parent / "checkpoints"

    @property
    def logdir(self) -> Path:
        return self.job_dir / "tensorboard" / f"trial-{self.number}"

    def in_study(self) -> dict:
        """The trial as the study holds it (programkit.sweep.status), and only it: a task is one trial."""
        (row,) = sweep.status(self.job_dir, self.task)["trials"]
        return row


def sweep_dir(job_dir: Path, lr: float, pruner: str, completed_auroc: float | None = None) -> Path:
    """A sweep's directory as the portal makes it (sweep.json: `lr` the one choice), its study holding one completed
    trial (task 0) that reported `completed_auroc` as its mean AUROC at every epoch, when given."""
    job_dir.mkdir(parents=True)
    plan = {"space": {"lr": {"choices": [lr]}}, "sampler": "random", "pruner": pruner, "min_epochs": MIN_EPOCHS,
            "seed": 0, "epochs": EPOCHS}
    (job_dir / sweep.PLAN_FILE).write_text(json.dumps(plan))
    if completed_auroc is not None:
        number, _, _ = sweep.attach(job_dir, 0)
        reporter = sweep.TrialReporter(job_dir, 0, number)
        for epoch in range(1, EPOCHS + 1):
            reporter.report(epoch, completed_auroc)
        reporter.complete(completed_auroc)
    return job_dir


def attach(job_dir: Path, task: int) -> Trial:
    """The task's trial, as its job script attaches it before the program starts (writes trial.json)."""
    done = subprocess.run([sys.executable, "-m", "programkit.sweep_cli", "attach", str(job_dir), str(task)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    trial = Trial(job_dir, task, int(done.stdout))
    assert json.loads(trial.file.read_text())["number"] == trial.number
    return trial


def command(program: Program, data: Path, logdir: Path, checkpoints: Path, *flags: str) -> list[str]:
    """The program as its job scripts start it on each rank (`python -m MODULE` and the flags of every program's
    args.sh), in one process."""
    return [str(program_python(program)), "-m", program.module, "--data-dir", str(data), "--logdir", str(logdir),
            "--checkpoint-dir", str(checkpoints), "--epochs", str(EPOCHS), "--batch-size", "16", "--image-size",
            str(SIZE), "--model", TINY_MODEL, "--resume", "--progress", "epoch", *CPU_FLAGS.get(program.name, ()),
            *flags]


def trial_command(program: Program, trial: Trial, data: Path) -> list[str]:
    return command(program, data, trial.logdir, trial.checkpoints, "--trial", str(trial.file))


def train(program: Program, trial: Trial, data: Path) -> subprocess.CompletedProcess:
    return run_child(trial_command(program, trial, data), cwd=trial.job_dir, env=ENV)


def said(done: subprocess.CompletedProcess) -> str:
    return done.stdout + done.stderr


def record_lines(checkpoints: Path) -> list[dict]:
    return [json.loads(line) for line in tblog.record_path(checkpoints).read_text().splitlines()]


def auroc_by_epoch(lines: list[dict]) -> dict[str, float]:
    """Each epoch's mean AUROC as the study keys it; an epoch recorded again (re-trained after a kill): its last."""
    return {str(line["epoch"]): line["scalars"][TAG_AUROC_MEAN] for line in lines}


def rounded(values: dict[str, float | None]) -> dict[str, float | None]:
    """To 6 places: a value through float32 (TensorFlow's logs) or JSON is the same number to that."""
    return {key: None if value is None else round(value, 6) for key, value in values.items()}


def each_epoch_once(logdir: Path, epochs: int) -> dict[str, list[int]]:
    """TensorBoard's steps (its own reader); each epoch tag at every epoch once, up to `epochs`, and no throughput
    step twice."""
    steps = tensorboard_steps(logdir, user=None)
    for tag in CORE_TAGS:
        assert steps.get(tag) == list(range(1, epochs + 1)), (tag, steps.get(tag))
    written = [tag for tag in AUROC_TAGS if tag in steps]
    assert written and all(steps[tag] == list(range(1, epochs + 1)) for tag in written), steps
    points = steps.get(TAG_THROUGHPUT, [])
    assert points and len(points) == len(set(points)), points
    return steps


@pytest.fixture(scope="module")
def completed(program, dataset, tmp_path_factory) -> tuple[Trial, subprocess.CompletedProcess]:
    """A trial that learns, in a study whose completed trial reported 0.0 at every epoch: the pruner is asked after
    each epoch and never stops it. The record, tag and card tests read its run."""
    job_dir = sweep_dir(tmp_path_factory.mktemp("completed") / "job", GOOD_LR, "median", completed_auroc=0.0)
    trial = attach(job_dir, 1)
    return trial, train(program, trial, dataset)


@pytest.fixture(scope="module")
def pruned(program, dataset, tmp_path_factory) -> tuple[Trial, subprocess.CompletedProcess]:
    """A trial that does not learn (BAD_LR), in a study whose completed trial reported 1.0 at every epoch."""
    job_dir = sweep_dir(tmp_path_factory.mktemp("pruned") / "job", BAD_LR, "median", completed_auroc=1.0)
    trial = attach(job_dir, 1)
    return trial, train(program, trial, dataset)


def test_a_trial_below_the_completed_ones_is_pruned_at_its_first_allowed_epoch_and_trains_no_more(pruned):
    trial, done = pruned
    assert done.returncode == 0, said(done)[-3000:]  # a pruned trial's task ends well: Slurm calls it COMPLETED
    assert f"sweep: pruned at epoch {MIN_EPOCHS} by the median pruner" in said(done), said(done)[-3000:]
    assert [line["epoch"] for line in record_lines(trial.checkpoints)] == list(range(1, MIN_EPOCHS + 1))
    each_epoch_once(trial.logdir, MIN_EPOCHS)
    row = trial.in_study()
    assert row["state"] == "PRUNED" and sorted(row["epochs"]) == [str(e) for e in range(1, MIN_EPOCHS + 1)], row


def test_a_trial_above_the_completed_ones_completes_and_the_study_holds_its_value(completed):
    trial, done = completed
    assert done.returncode == 0, said(done)[-3000:]
    assert "sweep: pruned" not in said(done) and f"sweep: trial {trial.number} completed" in said(done)
    lines = record_lines(trial.checkpoints)
    row = trial.in_study()
    assert row["state"] == "COMPLETE", row
    assert row["value"] == pytest.approx(lines[-1]["scalars"][TAG_AUROC_MEAN], rel=1e-6)
    assert rounded(row["epochs"]) == rounded(auroc_by_epoch(lines))  # reported after every epoch


def test_each_epoch_is_one_record_line_and_the_same_line_in_the_log(program, completed):
    """checkpoints/epochs.jsonl, the record the portal reads of any program (programkit.tblog), and its copy in the
    job's log (what the portal reads where it has only the log: a pod's)."""
    trial, done = completed
    assert done.returncode == 0, said(done)[-3000:]
    lines = record_lines(trial.checkpoints)
    assert [line["epoch"] for line in lines] == list(range(1, EPOCHS + 1))
    assert epochs_recorded(trial.checkpoints) == EPOCHS  # the reader the box tests' waits use
    for line in lines:
        check(EPOCH_RECORD, line, "epochs.jsonl")
        assert line["program"] == program.name and line["logdir"] == tblog.logdir_key(trial.logdir), line
        assert line["images_per_sec"] > 0 and line["seconds"] > 0 and line["checkpoint"], line
        assert set(CORE_TAGS) <= set(line["scalars"]) and line["scalars"][TAG_AUROC_MEAN] is not None, line
    assert lines[-1]["scalars"][TAG_AUROC_MEAN] > 0.7, lines[-1]  # it learns the synthetic set's signal
    printed = [json.loads(text[len(tblog.RECORD_LINE_PREFIX):]) for text in done.stdout.splitlines()
               if text.startswith(tblog.RECORD_LINE_PREFIX)]
    assert printed == lines


def test_tensorboard_holds_each_epoch_tag_once_per_epoch_with_hparams_and_the_layout(completed):
    trial, done = completed
    assert done.returncode == 0, said(done)[-3000:]
    steps = each_epoch_once(trial.logdir, EPOCHS)
    assert "_hparams_/session_start_info" in steps and "custom_scalars__config__" in steps, sorted(steps)


def test_the_model_card_names_the_data_the_last_checkpoint_and_its_auroc(completed, dataset):
    trial, done = completed
    assert done.returncode == 0, said(done)[-3000:]
    card = json.loads((trial.checkpoints / "model_card.json").read_text())
    check(MODEL_CARD, card, "model_card.json")
    last = record_lines(trial.checkpoints)[-1]
    assert card["epochs_done"] == EPOCHS and card["spec"]["model"] == TINY_MODEL, card["spec"]
    assert card["spec"]["lr"] == GOOD_LR  # the trial's value, from its trial.json
    assert last["checkpoint"].startswith(card["checkpoint"]["prefix"]), (card["checkpoint"], last["checkpoint"])
    cards.checkpoint_files_hold(card, trial.checkpoints)
    cards.data_holds(card, dataset)
    assert card["auroc"]["mean"] == pytest.approx(last["scalars"][TAG_AUROC_MEAN], rel=1e-6)
    per_class = {row["class"]: row["auroc"] for row in card["auroc"]["per_class"]}
    assert rounded(per_class) == rounded({name: last["scalars"].get(f"{AUROC_TAG_PREFIX}{name}") for name in per_class})


def saved_through(checkpoints: Path) -> int:
    """The last epoch a run could resume after: TensorFlow's `checkpoint` state file (written after the files it
    names), or the newest whole `ckpt-<epoch>.pt` or `.npz` (PyTorch's and the toy's, written under a temporary name
    and renamed)."""
    renamed = [int(found.group(1)) for path in checkpoints.glob("ckpt-*")
               if (found := re.fullmatch(r"ckpt-(\d+)\.(pt|npz)", path.name))]
    return max([last_checkpoint(checkpoints), *renamed])


SLICE_S = 0.01  # what a held run is let on for at a time, until its checkpoint is whole


def kill_in_epoch_2(program: Program, trial: Trial, data: Path, env: dict[str, str]) -> None:
    """Start the trial and kill its whole session (SIGKILL, as a lost node) in epoch 2: once epoch 1's line is in
    the log and its checkpoint (the record names it) on disk. From that line on, the run is held (SIGSTOP) and let
    on only SLICE_S at a time until the checkpoint is whole, so that however short its epochs (the toy's: 0.1 s;
    a loaded machine's 0.3 s of waiting once let a tiny run finish all its epochs first, make test 2026-12-02),
    the kill comes in epoch 2."""
    child = start_in_own_session(trial_command(program, trial, data), cwd=trial.job_dir, env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + LIMIT_S
        for text in child.stdout or ():
            if text.startswith(f'{tblog.RECORD_LINE_PREFIX}{{"epoch": 1,'):
                os.killpg(child.pid, signal.SIGSTOP)
                while saved_through(trial.checkpoints) < 1:
                    assert time.monotonic() < deadline, "epoch 1's checkpoint was never whole"
                    os.killpg(child.pid, signal.SIGCONT)
                    time.sleep(SLICE_S)
                    os.killpg(child.pid, signal.SIGSTOP)
                break
            assert time.monotonic() < deadline
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


@dataclass(frozen=True)
class Requeued:
    """A task's two runs: killed, then run again."""

    trial: Trial
    killed_after: int  # the epochs recorded when the kill came
    attached_again: Trial
    resumed: subprocess.CompletedProcess
    job: str  # the job's id in its MLflow file


@pytest.fixture(scope="module")
def requeued(program, dataset, mlflow_alice, tmp_path_factory) -> Requeued:
    """A node lost in epoch 2 of a sweep's task, then the task run again as Slurm's requeue runs it: its script
    attaches again and starts the same command (--resume). Both runs have the job's MLflow file and the task's
    DSPORTAL_TASK, as the job scripts give them."""
    trial = attach(sweep_dir(tmp_path_factory.mktemp("requeued") / "job", GOOD_LR, "none"), 0)
    job = str(60 + PROGRAMS.index(program))
    job_file = trial.job_dir / "mlflow.json"
    job_file.write_text(mlflow_alice.job_file({"dsportal.user": "alice", "dsportal.job": job,
                                               "dsportal.scheduler": "slurm", "dsportal.program": program.name}))
    job_file.chmod(0o600)
    env = {**ENV, mlflow_file.FILE_ENV: str(job_file), mlflow_file.TASK_ENV: str(trial.task)}
    kill_in_epoch_2(program, trial, dataset, env)
    killed_after = epochs_recorded(trial.checkpoints)
    again = attach(trial.job_dir, trial.task)
    resumed = run_child(trial_command(program, again, dataset), cwd=trial.job_dir, env=env)
    return Requeued(trial, killed_after, again, resumed, job)


def test_a_trial_killed_mid_epoch_and_requeued_resumes_with_every_epoch_once(requeued):
    """It goes on with the epoch after its last checkpoint; the record (its last line per epoch), TensorBoard and
    the study (still one trial for the task) hold every epoch once."""
    trial, resumed = requeued.trial, requeued.resumed
    assert 1 <= requeued.killed_after < EPOCHS  # killed mid-run, after epoch 1
    assert requeued.attached_again == trial
    assert resumed.returncode == 0, said(resumed)[-3000:]
    found = RESUMED.search(said(resumed))
    # From its last checkpoint: the last epoch recorded, or the one before when the kill fell between the two
    assert found and 1 <= int(found[1]) <= requeued.killed_after, said(resumed)[-3000:]
    assert int(found[2]) == int(found[1]) + 1, said(resumed)[-3000:]
    lines = record_lines(trial.checkpoints)
    assert sorted({line["epoch"] for line in lines}) == list(range(1, EPOCHS + 1))
    each_epoch_once(trial.logdir, EPOCHS)
    row = trial.in_study()
    assert row["state"] == "COMPLETE" and rounded(row["epochs"]) == rounded(auroc_by_epoch(lines)), row


def test_rank_0_logs_the_task_to_one_mlflow_run_continued_after_the_requeue(program, requeued, mlflow_alice,
                                                                             monkeypatch):
    """As the job's owner: the program's params, the portal's tags, each epoch once at step = epoch across both
    runs, the model card, FINISHED."""
    from mlflow.tracking import MlflowClient

    resumed = requeued.resumed
    assert resumed.returncode == 0, said(resumed)[-3000:]
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", mlflow_alice.username)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", mlflow_alice.password)
    client = MlflowClient(mlflow_alice.tracking_uri)
    task = requeued.trial.task
    (run,) = client.search_runs([mlflow_alice.experiment_id], f"tags.`dsportal.run` = '{requeued.job}:{task}'")
    assert f"MLflow: continuing run {run.info.run_id} (sweep {requeued.job}, task {task})" in said(resumed), \
        said(resumed)[-3000:]
    assert run.info.status == "FINISHED" and run.data.tags["dsportal.program"] == program.name
    assert run.data.tags["dsportal.user"] == "alice" and run.data.params["program"] == program.name
    assert run.data.params["model"] == TINY_MODEL
    assert run.data.params["epochs"] == str(EPOCHS) and float(run.data.params["lr"]) == GOOD_LR
    for key in (*CORE_TAGS, "epoch/images_per_sec", "epoch/seconds"):
        steps = sorted(point.step for point in client.get_metric_history(run.info.run_id, key))
        assert steps == list(range(1, EPOCHS + 1)), (key, steps)
    assert [item.path for item in client.list_artifacts(run.info.run_id)] == ["model_card.json"]


BAD_FLAGS = [
    (("--batch-size", "0"), "--batch-size must be a positive integer"),
    (("--model", "vgg16"), "--model must be one of"),
    (("--data-dir", "/nonexistent/data"), "--data-dir must be an existing directory"),
    (("--trial", "/nonexistent/trial.json"), "--trial /nonexistent/trial.json: not a sweep's trial file"),
]


def test_bad_arguments_fail_in_one_line_naming_the_flag_with_exit_2(program, dataset, tmp_path):
    for flags, needle in BAD_FLAGS:
        done = run_child(command(program, dataset, tmp_path / "logs", tmp_path / "checkpoints", *flags),
                         cwd=tmp_path, env=ENV)
        assert done.returncode == 2, (flags, said(done)[-3000:])
        assert len(done.stderr.strip().splitlines()) == 1, (flags, done.stderr)
        assert done.stderr.startswith(f"{program.module}: error: ") and needle in done.stderr, (flags, done.stderr)
