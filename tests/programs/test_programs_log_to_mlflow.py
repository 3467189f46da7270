"""Both training programs for real, with the job's MLflow file (DSPORTAL_MLFLOW_FILE, as the job script names it):
rank 0 logs the run to the real MLflow server of the unit tests (tests/mlflow_server.py) as the job's owner, each
epoch once at step = epoch, the program's params and the portal's tags, the model card as the run's artifact, and
ends it FINISHED. chexnet_torch runs as two processes under torchrun (only rank 0 logs), chexnet.train as one: the
hooks are the same whatever the launcher (tests/integration/test_training.py has Horovod's ranks). Sized for 2 CPU
cores: tinycnn on 64x64 synthetic images, 2 epochs.

The programs run this checkout's code (PYTHONPATH), whichever copy their venvs hold."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from programkit import mlflow_file
from programkit.tags import AUROC_TAGS, TAG_AUROC_MEAN, TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_LR
from tests.children import run_child
from tests.conftest import REPO, TRAINER_SPEEDUP
from tests.programs.helpers import torch_python

SIZE, EPOCHS = 64, 2  # SIZE: the images of conftest.py's dataset
PROGRAMS = ("chexnet", "chexnet-torch")


def command(program: str, tmp: Path, data: Path) -> list[str]:
    common = ["--data-dir", str(data), "--logdir", str(tmp / "logs"), "--checkpoint-dir", str(tmp / "checkpoints"),
              "--batch-size", "16", "--image-size", str(SIZE), "--model", "tinycnn", "--epochs", str(EPOCHS),
              "--resume", "--progress", "epoch"]
    if program == "chexnet":
        return [sys.executable, "-m", "chexnet.train", *common, "--pipeline", "parallel", *TRAINER_SPEEDUP]
    python = torch_python()
    return [str(python.with_name("torchrun")), "--standalone", "--nproc-per-node=2", "--max-restarts=0", "-m",
            "chexnet_torch.train", *common, "--loader-workers", "0"]


@pytest.mark.parametrize("program", PROGRAMS)
def test_rank_0_logs_the_run_its_epochs_and_card_as_the_jobs_owner(program, dataset, mlflow_alice, tmp_path,
                                                                  monkeypatch):
    alice = mlflow_alice
    from mlflow.tracking import MlflowClient

    job = str(PROGRAMS.index(program) + 40)
    job_file = tmp_path / "mlflow.json"
    job_file.write_text(alice.job_file({"dsportal.user": "alice", "dsportal.job": job, "dsportal.scheduler": "slurm",
                                        "dsportal.program": program}))
    job_file.chmod(0o600)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO),
           mlflow_file.FILE_ENV: str(job_file)}
    done = run_child(command(program, tmp_path, dataset), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "MLflow" in line]
    assert len(said) == 1 and "MLflow: logging to run " in said[0], said  # one line, from rank 0 alone
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", alice.username)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", alice.password)
    client = MlflowClient(alice.tracking_uri)
    (run,) = client.search_runs([alice.experiment_id], f"tags.`dsportal.run` = '{job}'")
    assert run.info.status == "FINISHED" and run.info.run_name == f"job {job}"
    assert run.data.tags["dsportal.program"] == program and run.data.tags["dsportal.user"] == "alice"
    assert run.data.params["model"] == "tinycnn" and run.data.params["epochs"] == str(EPOCHS)
    assert run.data.params["workers"] == ("1" if program == "chexnet" else "2")
    for key in (TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_LR, TAG_AUROC_MEAN, "epoch/images_per_sec", "epoch/seconds"):
        assert sorted(point.step for point in client.get_metric_history(run.info.run_id, key)) == \
            list(range(1, EPOCHS + 1)), key
    assert set(AUROC_TAGS) & set(run.data.metrics)
    artifacts = [item.path for item in client.list_artifacts(run.info.run_id)]
    assert artifacts == ["model_card.json"]
