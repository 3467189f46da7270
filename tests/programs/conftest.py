"""The training programs' tests' fixtures: the synthetic set they train on, and the unit tests' real MLflow server
(tests/unit/conftest.py) with alice's account on it, which the programs' rank 0 logs to when the job has an MLflow
file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.mlflow_server import accounts
from tests.unit.conftest import mlflow_server  # noqa: F401 - a fixture, found here by pytest

# 400 synthetic images of 64x64 (seed 3): a validation split in which tinycnn's mean AUROC is defined every epoch
# and passes 0.8 within 3 epochs; an epoch takes well under a second of one CPU core.
DATASET_IMAGES, DATASET_SIZE, DATASET_SEED = 400, 64, 3


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> Path:
    """The synthetic ChestX-ray14 layout the programs train on (programkit.data.synthetic), made once a session."""
    out = tmp_path_factory.mktemp("programs-data") / "data"
    subprocess.run([sys.executable, "-m", "programkit.data.synthetic", "--out", str(out), "--images",
                    str(DATASET_IMAGES), "--size", str(DATASET_SIZE), "--seed", str(DATASET_SEED)], cwd=REPO,
                   check=True, capture_output=True, timeout=300)
    return out


@pytest.fixture(scope="session")
def mlflow_alice(mlflow_server, tmp_path_factory):  # noqa: F811 - the fixture imported above, by its name
    """alice's account on the real MLflow server (tests/mlflow_server.py), as the hub makes it."""
    return accounts(mlflow_server, tmp_path_factory.mktemp("portal-state")).account("alice")
