"""Each user's account on the portal's MLflow tracking server (docs/mlflow.md), made by the portal as the server's
admin the first time it is needed, and what a job or a server is given of it.

    cfg.mlflow_url                 "" (no MLflow), "box" (the box's own server), or a site's server's URL
    tracking_uri(cfg)              the URL every client uses ("" when there is none), PREFIX its path
    Accounts(cfg).account(user)    the user's Account: made (user, password, experiment, permission) or found
    account.job_file(tags)         what rank 0 of a job reads (programkit.tracking): the run's place and its tags
    account.environment()          MLflow's own variables, for a user's JupyterLab server

Who may see what is MLflow's own basic-auth app with NO_PERMISSIONS by default (deploy/mlflow_server.py): each user
has an account of their own and MANAGE on one experiment the admin made for them, and nothing else. A user's
password is derived from the admin's (an HMAC of the user's name), so the hub and the dashboard, which both hold the
admin's, give the same one without sharing a file of passwords; the admin's never leaves root's processes.

Which experiment is a user's is kept by the portal (<state_dir>/portal/mlflow-accounts.sqlite3), not read from
MLflow: any user may make an experiment of any free name and grant others on it, so a name found on the server
proves nothing. The admin makes `portal/<user>` (or, where someone took that name first, a name with a suffix) and
grants MANAGE on it to that user only.

The MLflow client (mlflow-skinny) reads its credentials from the environment, which one process shares among its
users: the calls here pass the admin's explicitly (rest_utils.http_request with MlflowHostCreds).
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from portal.config import PortalConfig
from portal.config_checks import MLFLOW_PATH
from portal.errors import Forbidden, Misconfigured, Unavailable
from portal.first_import import loaded
from portal.registrations import SCHEDULERS

if TYPE_CHECKING:
    from mlflow.utils.rest_utils import MlflowHostCreds

ADMIN_USER = "dsportal-admin"
PREFIX = MLFLOW_PATH  # the dashboard's route to the server, and the server's --static-prefix
BOX_PORT_OFFSET = 95  # the box's server listens on hub_port + 95 (8095 for the demo), on the bridge's address
MLFLOW_CLIENT = ("mlflow.exceptions", "mlflow.utils.rest_utils")  # what the portal uses of the client
JOB_FILE = "mlflow.json"  # in the job's directory (mode 0600) or a Secret's volume: programkit.tracking reads it
EXPERIMENT_PREFIX = "portal/"
TIMEOUT_S = 10
USERS, GRANT = "/api/2.0/mlflow/users", "/api/3.0/mlflow/users/permissions/grant"
_PER_PROCESS: dict[tuple[str, str, str], Accounts] = {}  # for_job's, per server, admin and state dir


class MlflowUnavailable(Unavailable):
    """The tracking server did not answer, or refused the portal's admin."""


@dataclass(frozen=True)
class Account:
    tracking_uri: str
    username: str
    password: str
    experiment_id: str

    def job_file(self, tags: Mapping[str, str]) -> str:
        """The JSON rank 0 of a job reads: where to log, as whom, and the run's tags (user, job, scheduler, ...)."""
        return json.dumps({"tracking_uri": self.tracking_uri, "username": self.username, "password": self.password,
                           "experiment_id": self.experiment_id, "tags": dict(tags)}, indent=2) + "\n"

    def environment(self) -> dict[str, str]:
        """MLflow's own variables: a notebook's `mlflow` client then logs and reads as this user, in this
        experiment, with nothing to configure."""
        return {"MLFLOW_TRACKING_URI": self.tracking_uri, "MLFLOW_TRACKING_USERNAME": self.username,
                "MLFLOW_TRACKING_PASSWORD": self.password, "MLFLOW_EXPERIMENT_ID": self.experiment_id,
                "MLFLOW_DISABLE_TELEMETRY": "true"}


def run_tags(user: str, job_id: str, scheduler: str, program: str, cluster: str) -> dict[str, str]:
    """The tags every run of a job carries in MLflow (a sweep's task adds its own: programkit.tracking)."""
    return {"dsportal.user": user, "dsportal.job": job_id, "dsportal.scheduler": scheduler,
            "dsportal.program": program, "dsportal.cluster": cluster}


def tracking_uri(cfg: PortalConfig) -> str:
    """The server's URL as jobs, servers and the dashboard reach it; "" when the portal has none. `box` is the
    cluster in a box's own, on its bridge: with a scheduler whose nodes are on that bridge (the Slurm box); the
    Kubernetes box names its server's URL to its hub (kubeparts/mlflow.py), and pods never reach the Slurm box's."""
    if cfg.mlflow_url == "box":
        registered = SCHEDULERS.get(cfg.scheduler)
        if registered is None or not registered.hub_api_at_gateway:
            return ""
        return f"http://{cfg.box_gateway}:{cfg.hub_port + BOX_PORT_OFFSET}{PREFIX}"
    return cfg.mlflow_url.rstrip("/")


def admin_file(cfg: PortalConfig) -> Path:
    return Path(cfg.mlflow_admin_file) if cfg.mlflow_admin_file else cfg.state_dir / "mlflow" / "admin"


def admin_credentials(cfg: PortalConfig) -> tuple[str, str]:
    """(user, password) of the server's admin, from mlflow_admin_file's first line `user:password`."""
    path = admin_file(cfg)
    try:
        line = path.read_text().splitlines()[0].strip()
    except (OSError, IndexError) as err:
        raise Misconfigured(f"mlflow_admin_file: {path} cannot be read ({getattr(err, 'strerror', None) or err}); "
                            "it holds the MLflow server's admin as `user:password`") from None
    user, _, password = line.partition(":")
    if not user or not password:
        raise Misconfigured(f"mlflow_admin_file: {path}'s first line is not `user:password`")
    return user, password


def user_password(admin_password: str, user: str) -> str:
    """The user's MLflow password: derived from the admin's, so every root process of the portal gives the same."""
    return hmac.new(admin_password.encode(), f"dsportal-mlflow-user:{user}".encode(), hashlib.sha256).hexdigest()


def for_job(cfg: PortalConfig, user: str) -> tuple[Account | None, str]:
    """The user's account for a job they submit, or None and why not (a note for the submit's answer; "" when the
    portal has no MLflow). In the portal's own processes (the dashboard, as root) it is made or found with the
    admin's; in the user's server (a notebook submitting) it is the one the spawner gave it (`environment`)."""
    uri = tracking_uri(cfg)
    if not uri:
        return None, ""
    env = os.environ
    if env.get("MLFLOW_TRACKING_USERNAME") == user and env.get("MLFLOW_TRACKING_URI", "").rstrip("/") == uri \
            and env.get("MLFLOW_TRACKING_PASSWORD") and env.get("MLFLOW_EXPERIMENT_ID"):
        return Account(uri, user, env["MLFLOW_TRACKING_PASSWORD"], env["MLFLOW_EXPERIMENT_ID"]), ""
    admin = admin_file(cfg)
    if not os.access(admin, os.R_OK):
        if cfg.mlflow_url == "box" and not admin.parent.exists():
            return None, ""  # no box runs a server here (the local scheduler alone, a box not yet up)
        return None, ("it will not be logged to MLflow: this process has no MLflow account of yours (a server "
                      "started before MLflow was set up: start it again)")
    key = (uri, str(admin), str(cfg.state_dir))
    accounts = _PER_PROCESS.setdefault(key, Accounts(cfg))
    try:
        return accounts.account(user), ""
    except (MlflowUnavailable, Misconfigured, Forbidden) as err:
        return None, f"it will not be logged to MLflow: {err}"


class Accounts:
    """The users' accounts on the server, made on first use; one object per process (it remembers what it made)."""

    def __init__(self, cfg: PortalConfig) -> None:
        self.cfg = cfg
        self.uri = tracking_uri(cfg)
        self.store_path = cfg.state_dir / "portal" / "mlflow-accounts.sqlite3"
        self._known: dict[str, Account] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.uri)

    def account(self, user: str) -> Account:
        """The user's account, made on the server the first time (MlflowUnavailable when the server does not
        answer or refuses; Misconfigured without the admin's file; Forbidden for a user of the admin's name).
        Blocks: call it off the event loop."""
        if user in self._known:
            return self._known[user]
        loaded(*MLFLOW_CLIENT)  # the client loads when MLflow is used, not with the portal
        from mlflow.exceptions import MlflowException
        from mlflow.utils.rest_utils import MlflowHostCreds

        admin_user, admin_password = admin_credentials(self.cfg)
        if user == admin_user:  # _ensure_user would give the admin's account a user's password, and that user
            raise Forbidden(f"the hub user {user!r} has the name of the MLflow server's admin (mlflow_admin_file): "
                            "that account is the portal's own; an operator renames one of them")
        creds = MlflowHostCreds(self.uri, username=admin_user, password=admin_password)
        password = user_password(admin_password, user)
        try:
            with self._locked() as db:
                self._ensure_user(creds, user, password)
                experiment = self._experiment(creds, db, user)
        except _Refused as err:
            raise MlflowUnavailable(f"the MLflow server at {self.uri} refused the portal: {err}") from None
        except (MlflowException, OSError) as err:  # the client's wrapping of a connection's failure or timeout
            raise MlflowUnavailable(f"the MLflow server at {self.uri} did not answer ({_why(err)})") from None
        found = Account(self.uri, user, password, experiment)
        self._known[user] = found
        return found

    def _locked(self) -> _Store:
        return _Store(self.store_path)

    @staticmethod
    def _ensure_user(creds: MlflowHostCreds, user: str, password: str) -> None:
        found = _call(creds, f"{USERS}/get", "GET", params={"username": user}, missing_ok=True)
        if found is None:
            _call(creds, f"{USERS}/create", "POST", json={"username": user, "password": password})
        else:  # made before with another admin password (a site rotated it): the derived one again
            _call(creds, f"{USERS}/update-password", "PATCH", json={"username": user, "password": password})

    def _experiment(self, creds: MlflowHostCreds, db: sqlite3.Connection, user: str) -> str:
        row = db.execute("SELECT experiment_id FROM accounts WHERE user = ? AND tracking_uri = ?",
                         (user, self.uri)).fetchone()
        if row is not None:
            found = _call(creds, "/api/2.0/mlflow/experiments/get", "GET", params={"experiment_id": row[0]},
                          missing_ok=True)
            if found is not None and found["experiment"].get("lifecycle_stage") == "active":
                return str(row[0])
        name = f"{EXPERIMENT_PREFIX}{user}"
        made = _call(creds, "/api/2.0/mlflow/experiments/create", "POST", json={"name": name}, taken_ok=True)
        while made is None:  # someone made an experiment of that name: one of ours beside it
            name = f"{EXPERIMENT_PREFIX}{user}-{secrets.token_hex(3)}"
            made = _call(creds, "/api/2.0/mlflow/experiments/create", "POST", json={"name": name}, taken_ok=True)
        experiment = str(made["experiment_id"])
        _call(creds, GRANT, "POST", json={"username": user, "resource_type": "experiment",
                                          "resource_id": experiment, "permission": "MANAGE"})
        db.execute("INSERT OR REPLACE INTO accounts (user, tracking_uri, experiment_id) VALUES (?, ?, ?)",
                   (user, self.uri, experiment))
        return experiment


class _Refused(Unavailable):
    """The server answered the admin's request with an error (its words): `account` says it refused."""


def _why(err: BaseException) -> str:
    """A connection's failure in a few words: the OS's reason when there is one ("Connection refused")."""
    found = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(err))
    return found.group(1).strip() if found else (str(err).splitlines() or [type(err).__name__])[0][:200]


def _call(creds: MlflowHostCreds, endpoint: str, method: str, *, missing_ok: bool = False, taken_ok: bool = False,
          **kwargs: object) -> dict | None:
    """One request of the admin's; None for "does not exist" (missing_ok) or "already exists" (taken_ok); _Refused
    for any other answer that is not 200. The client's MlflowException when no answer came (after one retry)."""
    loaded(*MLFLOW_CLIENT)
    from mlflow.exceptions import RestException
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    response = http_request(creds, endpoint, method, max_retries=1, backoff_factor=1, timeout=TIMEOUT_S, **kwargs)
    if response.status_code in (401, 403):  # the auth app answers these in plain text
        raise _Refused(f"{endpoint}: {response.status_code} {response.text[:200]}")
    try:
        verify_rest_response(response, endpoint)
    except RestException as err:
        if (missing_ok and err.error_code == "RESOURCE_DOES_NOT_EXIST") or (
                taken_ok and err.error_code == "RESOURCE_ALREADY_EXISTS"):
            return None
        raise _Refused(f"{endpoint}: {err.message}") from None
    return response.json() if response.content else {}


class _Store:
    """The portal's own record of each user's experiment: SQLite, one writer at a time across the hub's and the
    dashboard's processes (a lock file beside it, held while an account is made)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> sqlite3.Connection:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = open(self.path.with_suffix(".lock"), "w")  # noqa: SIM115 - released in __exit__
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        self._db = sqlite3.connect(self.path, timeout=30)
        self._db.execute("CREATE TABLE IF NOT EXISTS accounts (user TEXT NOT NULL, tracking_uri TEXT NOT NULL, "
                         "experiment_id TEXT NOT NULL, PRIMARY KEY (user, tracking_uri))")
        return self._db

    def __exit__(self, kind: object, *rest: object) -> None:
        try:
            if kind is None:
                self._db.commit()
            self._db.close()
        finally:
            self._lock.close()
