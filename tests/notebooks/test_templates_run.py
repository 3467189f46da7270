"""Each template notebook, top to bottom, as alice, against the test box's real Slurm and the demo data set.

The kernel runs as alice (papermill under runuser), so the jobs it submits are hers, exactly as from her
JupyterLab. Sized for 2 CPU cores: 64x64 demo images, 1 epoch, batch 8; notebook 4 submits its 1-node and 2-node
jobs together (its `run_together` parameter) to stay within a few minutes.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from portal.jobs.demo_data import ensure_demo_data
from portal.mlflow_accounts import for_job
from portal.runas import RUNUSER
from tests.conftest import PROGRAMS, REPO, TEST_CONFIG, TINY_MODEL, as_user, job_dir_of, scratch_dir

pytestmark = pytest.mark.integration
USER = "alice"
TINY = {"epochs": 1, "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 4, "model": TINY_MODEL}
NOTEBOOK_TIMEOUT_S = 900
DURATIONS: dict[str, float] = {}


@pytest.fixture(scope="module")
def workdir(cluster) -> Path:
    """A directory for the notebooks and their outputs in the tests' scratch in alice's home (a mark of the test
    box's, removed with it), and the demo data set. The kernels' HOME is a directory beside it: what IPython and
    Jupyter keep in a home (history, runtime files) never reaches alice's own."""
    ensure_demo_data(cluster)
    scratch = scratch_dir(USER)
    for name in ("notebook-tests", "home"):
        as_user(USER, "rm", "-rf", "--", str(scratch / name))
        as_user(USER, "mkdir", "-m", "700", "--", str(scratch / name))
    yield scratch / "notebook-tests"
    print("\nnotebook durations: " + ", ".join(f"{name} {secs:.0f} s" for name, secs in DURATIONS.items()))


def run_notebook(cluster, workdir: Path, name: str, parameters: dict) -> dict:
    """Execute notebooks/<name> as alice with papermill; the executed notebook, as JSON."""
    source, executed, params = workdir / name, workdir / f"out-{name}", workdir / f"{name}.params.yaml"
    shutil.copy(REPO / "notebooks" / name, source)
    params.write_text(yaml.safe_dump(parameters))
    account = pwd.getpwnam(USER)
    for path in (source, params):
        os.chown(path, account.pw_uid, account.pw_gid)
    env = [f"DSPORTAL_CONFIG={TEST_CONFIG}", f"SLURM_CONF={cluster.slurm_conf_path}", f"HOME={workdir.parent / 'home'}",
           f"PATH={cluster.venv / 'bin'}:/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL=2", f"JUPYTERHUB_USER={USER}",
           *(f"{name}={value}" for name, value in mlflow_environment(cluster).items())]
    started = time.monotonic()
    result = subprocess.run(
        [RUNUSER, "-u", USER, "--", "/usr/bin/env", "-i", *env, str(cluster.venv / "bin" / "python"), "-m",
         "papermill", str(source), str(executed), "-f", str(params), "--cwd", str(workdir), "--log-output",
         "--kernel", "python3"],
        capture_output=True, text=True, timeout=NOTEBOOK_TIMEOUT_S, cwd="/")
    DURATIONS[name] = time.monotonic() - started
    assert result.returncode == 0, f"{name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return json.loads(executed.read_text())


def mlflow_environment(cluster) -> dict[str, str]:
    """alice's MLflow account as her server's environment has it (spawners.options.prepare_mlflow): the test box
    runs an MLflow server, so her notebooks' jobs are logged there and notebook 06 reads them."""
    account, why_not = for_job(cluster, USER)
    assert account is not None, f"the test box's MLflow server gave alice no account: {why_not}"
    return account.environment()


def texts(notebook: dict) -> str:
    """Everything the cells printed or displayed as text or HTML, in order."""
    parts = []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            parts.append("".join(output.get("text", "")))
            for kind in ("text/plain", "text/html"):
                parts.append("".join(output.get("data", {}).get(kind, "")))
    return "\n".join(parts)


def images(notebook: dict) -> int:
    return sum("image/png" in output.get("data", {}) for cell in notebook["cells"]
               for output in cell.get("outputs", []))


def test_01_explore_draws_frequencies_co_occurrence_and_samples(cluster, workdir):
    notebook = run_notebook(cluster, workdir, "01-explore-chestxray14.ipynb", {"sample_images": 4})
    out = texts(notebook)
    assert re.search(r"train:\s+\d+ images from\s+\d+ patients", out)
    assert "Cardiomegaly" in out and "findings per image:" in out
    assert images(notebook) == 3  # frequencies, co-occurrence, sample grid


TRAIN = {"chexnet": "02-train-chexnet-horovod.ipynb", "chexnet-torch": "02b-train-chexnet-pytorch.ipynb"}
SCALING = {"chexnet": "04-scaling-study.ipynb", "chexnet-torch": "04b-scaling-study-pytorch.ipynb"}


@pytest.fixture(scope="module", params=PROGRAMS)  # each program's training notebook (its PyTorch twin too)
def trained_job(request, cluster, workdir) -> str:
    notebook = run_notebook(cluster, workdir, TRAIN[request.param], {**TINY, "gpus_per_node": 2})
    out = texts(notebook)
    assert "final state: COMPLETED" in out, out[-3000:]
    assert '<table class="dsportal-auroc">' in out and "Rajpurkar" in out
    assert "epochs done: 1" in out
    assert '<iframe' in out and "/user/alice/tensorboard/?runFilter=" in out
    return re.search(r"job id for 03-evaluate: (\d+)", out).group(1)


def test_02_train_ends_with_a_completed_job_and_an_auroc_table(trained_job):
    assert trained_job.isdigit()


# 03-evaluate reads the TensorFlow program's checkpoints (chexnet.evaluate): its job is chexnet's.
@pytest.mark.parametrize("trained_job", ["chexnet"], indirect=True)
def test_03_evaluate_shows_test_auroc_roc_curves_and_grad_cam(cluster, workdir, trained_job):
    notebook = run_notebook(cluster, workdir, "03-evaluate.ipynb",
                            {"job_id": trained_job, "batch_size": 8, "gradcam_images": 2})
    out = texts(notebook)
    assert f"job {trained_job}: test AUROC vs CheXNet" in out and "mean test AUROC:" in out
    # Its model card's data is the data evaluated on: said before any figure, and no warning.
    assert f"the same images and patient split as job {trained_job} was trained on" in out and "WARNING" not in out
    assert "Grad-CAM maps: 2" in out
    assert images(notebook) == 2  # ROC curves, Grad-CAM row
    report = json.loads((job_dir_of(USER, trained_job) / "evaluation" / "auroc.json").read_text())
    assert report["checkpoint"] and len(report["auroc"]) == 14


@pytest.mark.parametrize("program", PROGRAMS)
def test_04_scaling_study_charts_one_node_and_two(cluster, workdir, program):
    notebook = run_notebook(cluster, workdir, SCALING[program],
                            {**TINY, "layouts": ["1x1", "2x1"], "run_together": True})
    out = texts(notebook)
    assert "points on the chart: 2 (1x1, 2x1)" in out, out[-3000:]
    rows = re.findall(r"^\s+([12])\s+1\s+([12])\s+([\d.]+)\s+([\d.]+)\s+", out, re.MULTILINE)
    assert [(row[0], row[1]) for row in rows] == [("1", "1"), ("2", "2")] and all(float(r[2]) > 0 for r in rows)
    assert images(notebook) == 1


def test_05_sweep_runs_trials_and_tables_them(cluster, workdir):
    # One epoch each (pruning needs 3: tests/integration/test_sweeps.py prunes), to stay within a minute.
    notebook = run_notebook(cluster, workdir, "05-sweep.ipynb",
                            {"trials": 2, "parallel": 2, "epochs": 1, "pruner": "none", "min_epochs": 1,
                             "model": TINY_MODEL, "batch_sizes": [], "lr_low": 5e-4, "lr_high": 2e-3})
    out = texts(notebook)
    assert "2 trials, at most 2 at once, tpe sampler, pruner none" in out, out[-3000:]
    assert "lr from 0.0005 to 0.002 (log scale)" in out
    assert "final state: COMPLETED" in out, out[-3000:]
    assert '<table class="dsportal-sweep">' in out and re.search(r"best trial: [01] \(task [01]\), mean AUROC", out)
    assert "pruned: 0 of 2 trials" in out
    assert images(notebook) == 1  # AUROC against the learning rate


@pytest.mark.parametrize("trained_job", PROGRAMS, indirect=True)
def test_06_mlflow_lists_the_trained_jobs_run_with_its_epochs_and_card(cluster, workdir, trained_job):
    """Notebook 02's job (each program's) was logged to the test box's MLflow server by its rank 0, as alice:
    notebook 06 finds it among her runs with her own account, charts its epochs and reads its model card."""
    notebook = run_notebook(cluster, workdir, "06-mlflow-runs.ipynb", {"job_id": trained_job})
    out = texts(notebook)
    assert "experiment 'portal/alice'" in out, out[-3000:]
    assert re.search(rf"run job {trained_job}: 1 epoch\(s\) logged", out), out[-3000:]
    assert "Open this run in MLflow" in out and "model card model_card.json" in out, out[-3000:]
    assert "patient split sha256: " in out and "None" not in out.split("patient split sha256: ")[1][:10]
    assert images(notebook) == 1
