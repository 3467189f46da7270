"""Fixtures of the unit tests that need a real service started for them alone (no box), and the demo directory's
Unix accounts, which some unit tests act as (runuser), made as the box makes them."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator

import pytest

from tests.mlflow_server import Server, start


@pytest.fixture(scope="session", autouse=True)
def demo_accounts() -> None:
    """alice, bob, ... as Unix accounts, with the uids and groups of the demo directory (deploy/local/parts/slapd.py),
    as `make up` or a test box makes them from the directory (users.sync_unix_users, which then finds them as they
    must be). On a new machine the unit tests run before any box has: without this, every test that acts as alice
    failed there ("user 'alice' does not exist on this machine"). Nothing is made where they exist."""
    if os.geteuid() != 0:
        return
    from deploy.local.parts import slapd, users

    with open(users.ACCOUNTS_LOCK, "w") as lock:  # the workers (pytest-xdist) and a starting box one at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, gid, _ in slapd.DEMO_GROUPS:
            users.ensure_group(name, gid)
        for uid, _, number, given, surname in slapd.DEMO_USERS:
            users.ensure_user(uid, number, slapd.DEMO_PRIMARY_GID, f"/home/{uid}", "/bin/bash", f"{given} {surname}")
        for name, _, members in slapd.DEMO_GROUPS:
            for member in members:
                users.ensure_member(member, name)


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
