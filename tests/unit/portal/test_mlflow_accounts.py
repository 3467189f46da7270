"""Each user's MLflow account, made by the portal as the server's admin (portal.mlflow_accounts), against a real
`mlflow server` with the portal's basic-auth settings (tests/mlflow_server.py): who can see what is MLflow's own
answer, asked with each user's own credentials."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest
import requests

from portal.config import PortalConfig
from portal.errors import Misconfigured
from portal.mlflow_accounts import (
    EXPERIMENT_PREFIX,
    Account,
    Accounts,
    MlflowUnavailable,
    for_job,
    tracking_uri,
    user_password,
)
from tests.mlflow_server import free_port


def settings(server, tmp_path: Path, **more) -> PortalConfig:
    """The portal's settings for the test server: its URL and its admin's file, a state dir of the test's own."""
    admin = tmp_path / "mlflow-admin"
    admin.write_text(":".join(server.admin) + "\n")
    admin.chmod(0o600)
    return PortalConfig(state_dir=tmp_path / "state", mlflow_url=server.url, mlflow_admin_file=str(admin), **more)


def ask(server, account: tuple[str, str], method: str, path: str, **kwargs) -> requests.Response:
    """MLflow's REST API with these credentials (user, password)."""
    token = base64.b64encode(":".join(account).encode()).decode()
    return requests.request(method, f"{server.url}/api/2.0/mlflow/{path}", timeout=30,
                            headers={"Authorization": f"Basic {token}"}, **kwargs)


def test_a_user_gets_an_account_and_an_experiment_only_they_can_use(mlflow_server, tmp_path):
    cfg = settings(mlflow_server, tmp_path)
    alice = Accounts(cfg).account("alice")
    assert (alice.tracking_uri, alice.username) == (mlflow_server.url, "alice")
    assert alice.password == user_password(mlflow_server.admin[1], "alice")
    mine = ask(mlflow_server, ("alice", alice.password), "GET", "experiments/get",
               params={"experiment_id": alice.experiment_id})
    # Hers: `portal/alice`, or beside it where another test's state dir made that one on this session's server.
    assert mine.status_code == 200 and mine.json()["experiment"]["name"].startswith(f"{EXPERIMENT_PREFIX}alice"), \
        mine.text
    made = ask(mlflow_server, ("alice", alice.password), "POST", "runs/create",
               json={"experiment_id": alice.experiment_id, "run_name": "hers"})
    assert made.status_code == 200, made.text
    bob = Accounts(cfg).account("bob")
    assert bob.experiment_id != alice.experiment_id
    run_id = made.json()["run"]["info"]["run_id"]
    for path, params in (("runs/get", {"run_id": run_id}), ("experiments/get", {"experiment_id": alice.experiment_id})):
        theirs = ask(mlflow_server, ("bob", bob.password), "GET", path, params=params)
        assert theirs.status_code == 403, (path, theirs.status_code, theirs.text)
    listed = ask(mlflow_server, ("bob", bob.password), "POST", "experiments/search", json={"max_results": 100})
    names = {e["experiment_id"]: e["name"] for e in listed.json()["experiments"]}
    assert bob.experiment_id in names and all(n.startswith(f"{EXPERIMENT_PREFIX}bob") for n in names.values()), names
    # Nobody may write to MLflow's Default experiment either (NO_PERMISSIONS by default).
    default = ask(mlflow_server, ("bob", bob.password), "POST", "runs/create", json={"experiment_id": "0"})
    assert default.status_code == 403, default.text


def test_the_account_is_the_same_for_every_process_and_made_once(mlflow_server, tmp_path):
    """The hub and the dashboard (two processes, one state dir) give a user the same account; made once."""
    cfg = settings(mlflow_server, tmp_path)
    first = Accounts(cfg).account("carol")
    again = Accounts(cfg).account("carol")
    assert first == again
    rows = ask(mlflow_server, mlflow_server.admin, "POST", "experiments/search",
               json={"max_results": 100, "filter": f"name LIKE '{EXPERIMENT_PREFIX}carol%'"})
    assert len(rows.json()["experiments"]) == 1, rows.text


def test_an_experiment_name_taken_by_someone_else_is_never_the_users(mlflow_server, tmp_path):
    """mallory makes `portal/dave` first and grants dave on it: dave's runs must not land where mallory reads."""
    cfg = settings(mlflow_server, tmp_path)
    mallory = Accounts(cfg).account("mallory")
    squat = ask(mlflow_server, ("mallory", mallory.password), "POST", "experiments/create",
                json={"name": f"{EXPERIMENT_PREFIX}dave"})
    assert squat.status_code == 200, squat.text
    dave = Accounts(cfg).account("dave")
    assert dave.experiment_id != squat.json()["experiment_id"]
    found = ask(mlflow_server, ("dave", dave.password), "GET", "experiments/get",
                params={"experiment_id": dave.experiment_id}).json()["experiment"]
    assert found["name"].startswith(f"{EXPERIMENT_PREFIX}dave-"), found
    denied = ask(mlflow_server, ("mallory", mallory.password), "GET", "experiments/get",
                 params={"experiment_id": dave.experiment_id})
    assert denied.status_code == 403


def test_a_deleted_experiment_is_replaced_by_a_new_one(mlflow_server, tmp_path):
    cfg = settings(mlflow_server, tmp_path)
    erin = Accounts(cfg).account("erin")
    gone = ask(mlflow_server, ("erin", erin.password), "POST", "experiments/delete",
               json={"experiment_id": erin.experiment_id})
    assert gone.status_code == 200, gone.text
    again = Accounts(cfg).account("erin")  # a new process: asks the server again
    assert again.experiment_id != erin.experiment_id


def test_a_server_that_does_not_answer_is_said_quickly_and_the_job_goes_on(mlflow_server, tmp_path):
    cfg = settings(mlflow_server, tmp_path)
    closed = f"http://127.0.0.1:{free_port()}/services/portal/mlflow"
    down = PortalConfig(state_dir=cfg.state_dir, mlflow_url=closed, mlflow_admin_file=cfg.mlflow_admin_file)
    started = time.monotonic()
    with pytest.raises(MlflowUnavailable, match="did not answer"):
        Accounts(down).account("alice")
    account, why_not = for_job(down, "alice")
    assert account is None and why_not.startswith("it will not be logged to MLflow: the MLflow server at "), why_not
    assert time.monotonic() - started < 30


def test_a_wrong_admin_password_is_refused_by_name(mlflow_server, tmp_path):
    cfg = settings(mlflow_server, tmp_path)
    Path(cfg.mlflow_admin_file).write_text(f"{mlflow_server.admin[0]}:not-the-password\n")
    with pytest.raises(MlflowUnavailable, match="refused the portal"):
        Accounts(cfg).account("alice")
    Path(cfg.mlflow_admin_file).write_text("no colon here\n")
    with pytest.raises(Misconfigured, match="mlflow_admin_file"):
        Accounts(cfg).account("alice")


def test_without_a_server_nothing_is_asked_and_nothing_said(tmp_path, monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_EXPERIMENT_ID"):
        monkeypatch.delenv(name, raising=False)
    assert for_job(PortalConfig(state_dir=tmp_path, mlflow_url=""), "alice") == (None, "")
    assert tracking_uri(PortalConfig(mlflow_url="")) == ""
    # "box" where no box runs a server (no <state_dir>/mlflow): none, silently (the local scheduler alone).
    assert for_job(PortalConfig(state_dir=tmp_path, mlflow_url="box"), "alice") == (None, "")
    box = PortalConfig(state_dir=tmp_path, mlflow_url="box", hub_port=8000, box_subnet="198.18.0.0/27")
    assert tracking_uri(box) == "http://198.18.0.1:8095/services/portal/mlflow"
    (tmp_path / "mlflow").mkdir()  # the box runs one, and this process may not read its admin: said
    account, why_not = for_job(box, "alice")
    assert account is None and "no MLflow account of yours" in why_not


def test_a_users_own_server_submits_with_the_account_the_spawner_gave_it(tmp_path, monkeypatch):
    cfg = PortalConfig(state_dir=tmp_path, mlflow_url="http://198.18.0.1:8095/services/portal/mlflow")
    given = Account(cfg.mlflow_url, "alice", "pw", "4")
    for name, value in given.environment().items():
        monkeypatch.setenv(name, value)
    assert for_job(cfg, "alice") == (given, "")
    # Another user's variables (or another server's) are no account of this one's.
    account, _ = for_job(cfg, "bob")
    assert account is None


def test_the_job_file_and_the_environment_say_where_and_as_whom():
    account = Account("http://h:1/services/portal/mlflow", "alice", "pw", "4")
    found = json.loads(account.job_file({"dsportal.job": "12"}))
    assert found == {"tracking_uri": "http://h:1/services/portal/mlflow", "username": "alice", "password": "pw",
                     "experiment_id": "4", "tags": {"dsportal.job": "12"}}
    env = account.environment()
    assert env["MLFLOW_TRACKING_USERNAME"] == "alice" and env["MLFLOW_EXPERIMENT_ID"] == "4"
    assert env["MLFLOW_DISABLE_TELEMETRY"] == "true"
    assert os.environ.get("MLFLOW_TRACKING_PASSWORD") != "pw"  # nothing set in this process
