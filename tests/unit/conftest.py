"""Fixtures of the unit tests that need a real service started for them alone (no box), and the demo directory's
Unix accounts, which some unit tests act as (runuser), made as the box makes them."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator

import pytest

from tests.mlflow_server import Server, start

ACCOUNTS_LOCK = "/run/lock/dsportal-demo-accounts.lock"


@pytest.fixture(scope="session", autouse=True)
def demo_accounts() -> None:
    """alice, bob, ... as Unix accounts, with the uids and groups of the demo directory (deploy/local/parts/slapd.py),
    as `make up` or a test box makes them from the directory (users.sync_unix_users, which then finds them as they
    must be). On a new machine the unit tests run before any box has: without this, every test that acts as alice
    failed there ("user 'alice' does not exist on this machine"). Nothing is made where they exist."""
    if os.geteuid() != 0:
        return
    from deploy.local.parts import slapd, users

    with open(ACCOUNTS_LOCK, "w") as lock:  # the workers (pytest-xdist) one at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, gid, _ in slapd.DEMO_GROUPS:
            users.ensure_group(name, gid)
        for uid, _, number, given, surname in slapd.DEMO_USERS:
            users.ensure_user(uid, number, slapd.DEMO_PRIMARY_GID, f"/home/{uid}", "/bin/bash", f"{given} {surname}")
        for name, _, members in slapd.DEMO_GROUPS:
            for member in members:
                users.ensure_member(member, name)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real `mlflow server` with the portal's basic-auth settings (tests/mlflow_server.py), one per worker."""
    server = start(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()
