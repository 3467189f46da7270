"""A real MLflow tracking server for the tests of the MLflow pieces that need no box: `mlflow server` with its
basic-auth app and the portal's settings (deploy/mlflow_server.py), from the server's venv that `make install`
builds, on a free loopback port, its files in a temporary directory. One per test session that asks for it
(`mlflow_server` fixture, tests/unit/conftest.py); stopped at the session's end.

    server = start(tmp_path)     # Server: url (the tracking URI), admin (user, password), data_dir
    accounts(server, tmp_path)   # the portal's users' accounts on it (portal.mlflow_accounts.Accounts)
    server.stop()
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from deploy import mlflow_server
from deploy.daemons import terminate
from portal.config import PortalConfig
from portal.mlflow_accounts import Accounts

LOOPBACK = "127.0.0.1"


@dataclass
class Server:
    url: str
    data_dir: Path
    admin: tuple[str, str]
    process: subprocess.Popen[bytes] = field(repr=False)
    log: Path = field(repr=False)

    def stop(self) -> None:
        """The server and its uvicorn worker below it."""
        if self.process.poll() is None:
            terminate(self.process.pid, 10.0, with_descendants=True)
            self.process.wait(10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def start(data_dir: Path, timeout_s: float = mlflow_server.READY_TIMEOUT_S) -> Server:
    """The server, answering; RuntimeError with its log's end when it does not start in time."""
    executable = mlflow_server.VENV / "bin" / "mlflow"
    if not executable.exists():
        raise RuntimeError(f"{executable} is missing: `make install` builds the MLflow server's venv "
                           "(deploy/local/install-mlflow.sh)")
    mlflow_server.prepare(data_dir)
    port = free_port()
    log = data_dir / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(mlflow_server.command(data_dir, LOOPBACK, port), stdout=out,
                                   stderr=subprocess.STDOUT, env=mlflow_server.environment(data_dir),
                                   cwd=data_dir, start_new_session=True)
    user, _, password = mlflow_server.admin_file(data_dir).read_text().strip().partition(":")
    server = Server(mlflow_server.url(LOOPBACK, port), data_dir, (user, password), process, log)
    deadline = time.monotonic() + timeout_s
    while (why := mlflow_server.ready(server.url)) is not None:
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"mlflow server did not start ({why}); its log ends:\n"
                               + log.read_text(errors="replace")[-3000:])
        time.sleep(0.3)
    return server


def accounts(server: Server, state_dir: Path) -> Accounts:
    """The portal's maker of users' accounts on this server, as the hub's: the admin's file and the portal's record
    of accounts under `state_dir`."""
    state_dir.mkdir(parents=True, exist_ok=True)
    admin = state_dir / "mlflow-admin"
    admin.write_text(f"{server.admin[0]}:{server.admin[1]}\n")
    admin.chmod(0o600)
    return Accounts(PortalConfig(state_dir=state_dir, mlflow_url=server.url, mlflow_admin_file=str(admin)))
