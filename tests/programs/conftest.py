"""The training programs' tests' fixtures: the unit tests' real MLflow server (tests/unit/conftest.py), which the
programs' rank 0 logs to when the job has an MLflow file."""

from tests.unit.conftest import mlflow_server  # noqa: F401 - a fixture, found here by pytest

