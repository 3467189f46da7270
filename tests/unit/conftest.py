"""Fixtures of the unit tests that need a real service started for them alone (no box), and the demo directory's
Unix accounts, which some unit tests act as (runuser), made as the box makes them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.mlflow_server import Server, start


@pytest.fixture(scope="session", autouse=True)
def unit_demo_accounts(demo_accounts) -> None:
    """Every unit test may act as alice, bob, ... (tests/conftest.py's demo_accounts)."""


@pytest.fixture(autouse=True)
def no_machine_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test never asks the machine's Slurm as root (slurm_bin_dir's default, /usr/bin; the first query of a
    process asks which JSON versions squeue knows): what it would answer depends on whether a box is up, and with
    none each command waited out SLURM_TIMEOUT_S, 20 s (the unit tests' slowest three, in CI's order). Asked, it
    is a Slurm that does not answer, at once. Tests of the commands give them a fake Slurm or a user of their own
    that answers."""
    from portal.config import PortalConfig
    from portal.scheduler.slurm import commands
    from portal.scheduler.slurm.errors import SlurmUnavailable

    machines, machine_slurm = commands.SlurmCommands.complete, PortalConfig().slurm_bin_dir

    def complete(self, *argv, user=None, input=None):
        if user is None and self.cfg.slurm_bin_dir == machine_slurm:  # a test's user answers what it is asked
            raise SlurmUnavailable(f"the unit tests ask no real Slurm: `{' '.join(argv)}`")
        return machines(self, *argv, user=user, input=input)
    monkeypatch.setattr(commands.SlurmCommands, "complete", complete)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real `mlflow server` with the portal's basic-auth settings (tests/mlflow_server.py), one per worker."""
    server = start(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()
