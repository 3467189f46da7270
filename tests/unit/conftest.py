"""Fixtures of the unit tests that need a real service started for them alone (no box)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.mlflow_server import Server, start


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real `mlflow server` with the portal's basic-auth settings (tests/mlflow_server.py), one per worker."""
    server = start(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()
