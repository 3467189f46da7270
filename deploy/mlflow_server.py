"""The MLflow tracking server a box runs (docs/mlflow.md): `mlflow server` with MLflow's own basic-auth app, its
runs and its users in SQLite files of the box's, its artifacts (the model cards) served by itself.

    <data_dir>/admin            `dsportal-admin:<password>` (mode 0600): the server's admin, made on its first start;
                                the portal makes each user's account with it (portal.mlflow_accounts)
    <data_dir>/secret_key       the key the auth app signs its CSRF tokens with (mode 0600), made on its first start
                                and kept: MLflow 3 refuses to start its basic-auth app without one
    <data_dir>/basic_auth.ini   the auth app's settings: nobody may read what is not theirs (NO_PERMISSIONS)
    <data_dir>/mlflow.db        runs, parameters, metrics, tags (--backend-store-uri)
    <data_dir>/basic_auth.db    users and their permissions
    <data_dir>/artifacts/       what runs log as files (--artifacts-destination)

Every path of the server, its API and its web UI included, is under PREFIX (--static-prefix), the dashboard's route
to it: the dashboard passes a logged-in user's requests on, as that user, and the jobs use the same URL. Telemetry
is off: nothing leaves the machine. The Slurm box (deploy/local/parts/mlflow.py), the Kubernetes box and the unit
tests' server (tests/mlflow_server.py) all start it through here.
"""

from __future__ import annotations

import os
import secrets
import urllib.error
import urllib.request
from pathlib import Path

from deploy.supervise import make_once
from portal.mlflow_accounts import ADMIN_USER, PREFIX

VENV = Path(os.environ.get("DSPORTAL_MLFLOW_VENV", "/opt/dsportal/mlflow-venv"))  # deploy/local/install-mlflow.sh
# Its first start migrates two new databases: about 15 s on 2 busy cores, and over 90 s beside a user's trainings
# of more than a core (a unit tests' server, 2026-12-06: tables at 60 s, the admin at 84 s, no answer at 90 s).
READY_TIMEOUT_S = 240.0
# The environment of the server: no telemetry (MLflow's own switch, and the convention its UI honours too), and no
# job executor (huey workers for GenAI evaluation and trace rollups: processes the portal has no use for).
QUIET = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def admin_file(data_dir: Path) -> Path:
    return data_dir / "admin"


def auth_config(data_dir: Path) -> Path:
    return data_dir / "basic_auth.ini"


def secret_key_file(data_dir: Path) -> Path:
    return data_dir / "secret_key"


def prepare(data_dir: Path) -> None:
    """The data dir (root's, mode 0700), the admin's password (made once, kept) and the auth app's settings."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    (data_dir / "artifacts").mkdir(mode=0o700, exist_ok=True)
    admin = admin_file(data_dir)
    make_once(admin, f"{ADMIN_USER}:{secrets.token_urlsafe(24)}\n")
    make_once(secret_key_file(data_dir), secrets.token_urlsafe(32) + "\n")
    password = admin.read_text().strip().partition(":")[2]
    # The admin's password is given in the file only for the first start (MLflow ignores it once the admin exists).
    text = (
        "# Written by deploy/mlflow_server.py: MLflow's basic-auth app for the portal (docs/mlflow.md).\n"
        "[mlflow]\n"
        "default_permission = NO_PERMISSIONS\n"
        f"database_uri = sqlite:///{data_dir / 'basic_auth.db'}\n"
        f"admin_username = {ADMIN_USER}\n"
        f"admin_password = {password}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        "grant_default_workspace_access = false\n"
        # Each request's password is checked with PBKDF2: once a minute per user is enough.
        "auth_cache_ttl_seconds = 60\n"
    )
    ini = auth_config(data_dir)
    fd = os.open(ini, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def command(data_dir: Path, host: str, port: int, venv: Path = VENV) -> list[str]:
    """`mlflow server` on host:port with the basic-auth app, one worker (a box's few users)."""
    return [str(venv / "bin" / "mlflow"), "server", "--app-name", "basic-auth",
            "--backend-store-uri", f"sqlite:///{data_dir / 'mlflow.db'}",
            "--artifacts-destination", str(data_dir / "artifacts"), "--serve-artifacts",
            "--host", host, "--port", str(port), "--workers", "1", "--static-prefix", PREFIX,
            # Jobs reach it at the bridge's address, the dashboard's proxy by name or address: any Host header.
            "--allowed-hosts", "*"]


def environment(data_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONPATH", None)  # the server's own venv, nothing of the checkout's
    return {**env, **QUIET, "MLFLOW_AUTH_CONFIG_PATH": str(auth_config(data_dir)),
            "MLFLOW_FLASK_SERVER_SECRET_KEY": secret_key_file(data_dir).read_text().strip()}


def url(host: str, port: int) -> str:
    """The tracking URI of a server on host:port: every client (jobs, the dashboard, notebooks) uses it."""
    return f"http://{host}:{port}{PREFIX}"


def ready(tracking_uri: str) -> str | None:
    """None once the server answers its health check, else why not yet."""
    try:
        with urllib.request.urlopen(f"{tracking_uri}/health", timeout=3) as response:
            return None if response.status == 200 else f"GET {tracking_uri}/health: {response.status}"
    except (urllib.error.URLError, OSError) as err:
        return f"GET {tracking_uri}/health: {err}"
