"""programkit.tracking against a real MLflow server with the portal's basic-auth settings (tests/mlflow_server.py) and
users' accounts made by the portal (portal.mlflow_accounts): what a run holds, a requeued job's run continued and
caught up, a server that is down, hangs or refuses costing one line and seconds, hostile job files, and a user who
cannot read another's run."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from programkit import mlflow_file, tblog, tracking
from programkit.tags import ALL_TAGS, TAG_AUROC_MEAN, TAG_LOSS_TRAIN, TAG_LOSS_VAL
from tests.mlflow_server import accounts
from tests.special_files import KINDS, put_special

CLIENT_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_HTTP_REQUEST_TIMEOUT",
              "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "MLFLOW_DISABLE_TELEMETRY",
              "DO_NOT_TRACK", "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", mlflow_file.FILE_ENV, mlflow_file.TASK_ENV)
TAGS = {"dsportal.user": "alice", "dsportal.scheduler": "slurm", "dsportal.program": "chexnet"}
PARAMS = {"model": "tinycnn", "batch_size": 16, "lr": 0.001, "fp16": False}
QUICK_S = 10  # what a failure may cost here: the client's import and a refused connection


@pytest.fixture(autouse=True)
def own_environment(monkeypatch):
    """The tracker sets the client's variables in os.environ (one user's process): put back after each test."""
    for name in CLIENT_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def users(mlflow_server, tmp_path_factory):
    """alice's and bob's accounts, made by the portal as the hub makes them."""
    made = accounts(mlflow_server, tmp_path_factory.mktemp("portal-state"))
    return {user: made.account(user) for user in ("alice", "bob")}


@pytest.fixture(scope="module")
def jobs():
    """A job id of its own for each test: the experiment is shared by the module's tests."""
    return iter(range(100, 10_000))


def job_file(directory: Path, account, job: int | str, monkeypatch) -> Path:
    """The portal's mlflow.json for `job` (mode 0600), named by DSPORTAL_MLFLOW_FILE as the job script does."""
    path = directory / "mlflow.json"
    path.write_text(account.job_file({**TAGS, "dsportal.user": account.username, "dsportal.job": str(job)}))
    path.chmod(0o600)
    monkeypatch.setenv(mlflow_file.FILE_ENV, str(path))
    return path


def client_as(account, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", account.username)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", account.password)
    return MlflowClient(account.tracking_uri)


def entry(epoch: int, logdir: str = "/logs") -> tblog.EpochScalars:
    scalars = {TAG_LOSS_TRAIN: 1.0 / epoch, TAG_LOSS_VAL: 2.0 / epoch, TAG_AUROC_MEAN: 0.5 + epoch / 100,
               "auroc/Pleural_Thickening": 0.6, "auroc/Hernia": None}
    return tblog.EpochScalars(epoch, scalars, logdir, images_per_sec=120.0 + epoch, seconds=3.5)


def steps(client, run_id: str, key: str = TAG_LOSS_VAL) -> list[int]:
    return sorted(point.step for point in client.get_metric_history(run_id, key))


class Said(list):
    def __call__(self, line: str) -> None:
        self.append(line)


def test_a_run_gets_its_params_tags_epochs_card_and_status(users, jobs, tmp_path, monkeypatch):
    job = next(jobs)
    job_file(tmp_path, users["alice"], job, monkeypatch)
    said = Said()
    tracker = tracking.RunTracker.start(PARAMS, said)
    assert tracker is not None, said
    for epoch in (1, 2, 3):
        tracker.epoch(entry(epoch))
    card = tmp_path / "model_card.json"
    card.write_text('{"format": 1}\n')
    tracker.card(card)
    tracker.finish(tracking.FINISHED)
    assert len(said) == 1 and said[0].startswith(f"MLflow: logging to run {tracker.run_id} (job {job})"), said
    client = client_as(users["alice"], monkeypatch)
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == f"job {job}"
    assert run.info.experiment_id == users["alice"].experiment_id
    assert run.data.params == {"model": "tinycnn", "batch_size": "16", "lr": "0.001", "fp16": "False"}
    assert {**TAGS, "dsportal.job": str(job), "dsportal.run": str(job)}.items() <= run.data.tags.items()
    assert steps(client, tracker.run_id) == [1, 2, 3]
    assert [point.value for point in client.get_metric_history(tracker.run_id, TAG_LOSS_TRAIN)] == \
        pytest.approx([1.0, 0.5, 1 / 3])
    assert steps(client, tracker.run_id, "auroc/Pleural_Thickening") == [1, 2, 3]
    assert "auroc/Hernia" not in run.data.metrics  # undefined: left out, as in TensorBoard
    assert run.data.metrics[tracking.METRIC_IMAGES_PER_SEC] == 123.0 and run.data.metrics["epoch/seconds"] == 3.5
    assert [item.path for item in client.list_artifacts(tracker.run_id)] == ["model_card.json"]
    assert Path(client.download_artifacts(tracker.run_id, "model_card.json", str(tmp_path / "got"))).read_text() \
        == card.read_text()


def test_a_sweeps_task_is_a_run_of_its_own_and_a_pruned_one_says_so(users, jobs, tmp_path, monkeypatch):
    job = next(jobs)
    job_file(tmp_path, users["alice"], job, monkeypatch)
    monkeypatch.setenv(mlflow_file.TASK_ENV, "3")
    tracker = tracking.RunTracker.start(PARAMS, Said())
    tracker.epoch(entry(1))
    tracker.finish(tracking.FINISHED, pruned_at=1)
    run = client_as(users["alice"], monkeypatch).get_run(tracker.run_id)
    assert run.info.run_name == f"sweep {job}, task 3" and run.data.tags["dsportal.run"] == f"{job}:3"
    assert run.info.status == "FINISHED" and run.data.tags["dsportal.pruned"] == "epoch 1"


def test_a_requeued_job_continues_its_run_and_logs_what_a_kill_left_out(users, jobs, tmp_path, monkeypatch):
    job = next(jobs)
    job_file(tmp_path, users["alice"], job, monkeypatch)
    checkpoints, logdir = tmp_path / "checkpoints", tmp_path / "logs"
    first = tracking.RunTracker.start(PARAMS, Said(), checkpoint_dir=checkpoints, logdir=logdir)
    for epoch in (1, 2, 3):  # epoch 3 is recorded and checkpointed; the node dies before MLflow hears of it
        tblog.append_record(tblog.record_path(checkpoints), entry(epoch, tblog.logdir_key(logdir)))
        if epoch < 3:
            first.epoch(entry(epoch, tblog.logdir_key(logdir)))
    tblog.append_record(tblog.record_path(checkpoints), entry(4, "/another/run's/logdir"))  # not this run's
    said = Said()
    resumed = tracking.RunTracker.start({**PARAMS, "lr": 0.002, "workers": 2}, said, epochs_done=3,
                                        checkpoint_dir=checkpoints, logdir=logdir)
    assert resumed is not None and resumed.run_id == first.run_id, said
    client = client_as(users["alice"], monkeypatch)
    assert client.get_run(first.run_id).info.status == "RUNNING"
    assert steps(client, first.run_id) == [1, 2, 3]  # each once: 3 from the record
    resumed.epoch(entry(4, tblog.logdir_key(logdir)))
    resumed.finish(tracking.FINISHED)
    run = client.get_run(first.run_id)
    assert run.info.status == "FINISHED" and steps(client, first.run_id) == [1, 2, 3, 4]
    assert run.data.params["lr"] == "0.001" and run.data.params["workers"] == "2"  # the first value kept
    assert any("keeps its first values of lr" in line for line in said), said
    assert any("logged epoch(s) 3 from the checkpoint's record" in line for line in said), said
    assert any(line.startswith(f"MLflow: continuing run {first.run_id}") for line in said), said
    runs = client.search_runs([users["alice"].experiment_id], f"tags.`dsportal.run` = '{job}'")
    assert [found.info.run_id for found in runs] == [first.run_id]


def test_a_run_with_epochs_beyond_the_checkpoints_is_not_continued(users, jobs, tmp_path, monkeypatch):
    job = next(jobs)
    job_file(tmp_path, users["alice"], job, monkeypatch)
    first = tracking.RunTracker.start(PARAMS, Said())
    first.epoch(entry(1))
    said = Said()
    again = tracking.RunTracker.start(PARAMS, said, epochs_done=0)  # its checkpoints removed: trained anew
    assert again is not None and again.run_id != first.run_id
    assert "holds epochs beyond the checkpoint's 0" in said[0], said


def test_an_exception_out_of_the_training_fails_the_run_and_an_interrupt_kills_it(users, jobs, tmp_path,
                                                                                   monkeypatch):
    ended = {}
    for error, status in ((RuntimeError("boom"), "FAILED"), (KeyboardInterrupt(), "KILLED")):
        job_file(tmp_path, users["alice"], next(jobs), monkeypatch)
        tracker = tracking.RunTracker.start(PARAMS, Said())
        with pytest.raises(type(error)), tracking.failing(tracker):
            raise error
        ended[tracker.run_id] = status
    with tracking.failing(None):  # rank > 0, or no MLflow: nothing to end
        pass
    client = client_as(users["alice"], monkeypatch)
    assert {run_id: client.get_run(run_id).info.status for run_id in ended} == ended


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_server_that_is_down_costs_one_line_and_seconds(users, tmp_path, monkeypatch):
    path = tmp_path / "mlflow.json"
    account = users["alice"]
    down = f"http://127.0.0.1:{closed_port()}/services/portal/mlflow"
    path.write_text(account.job_file({"dsportal.job": "7"}).replace(account.tracking_uri, down))
    monkeypatch.setenv(mlflow_file.FILE_ENV, str(path))
    said, started = Said(), time.monotonic()
    assert tracking.RunTracker.start(PARAMS, said) is None
    assert time.monotonic() - started < QUICK_S
    (line,) = said
    assert line.startswith(f"MLflow at {down}: searching the experiment") and "Connection refused" in line, line


def test_a_wrong_password_costs_one_line(users, jobs, tmp_path, monkeypatch):
    account = users["alice"]
    path = job_file(tmp_path, account, next(jobs), monkeypatch)
    path.write_text(path.read_text().replace(account.password, "not-" + account.password))
    said, started = Said(), time.monotonic()
    assert tracking.RunTracker.start(PARAMS, said) is None
    assert time.monotonic() - started < QUICK_S
    (line,) = said
    assert line.startswith(f"MLflow at {account.tracking_uri}: ") and "401" in line, line


def test_a_server_failing_mid_run_turns_the_tracker_off_after_one_line(users, jobs, tmp_path, monkeypatch):
    job_file(tmp_path, users["alice"], next(jobs), monkeypatch)
    said = Said()
    tracker = tracking.RunTracker.start(PARAMS, said)
    tracker.epoch(entry(1))
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "changed")  # from now on the server refuses the job
    for epoch in (2, 3):
        tracker.epoch(entry(epoch))
    tracker.card(tmp_path / "mlflow.json")
    tracker.finish(tracking.FINISHED)
    assert tracker.off and len(said) == 2, said
    assert said[1].startswith(f"MLflow at {users['alice'].tracking_uri}: logging the epoch's metrics failed"), said
    run = client_as(users["alice"], monkeypatch).get_run(tracker.run_id)
    assert run.info.status == "RUNNING" and run.data.metrics[TAG_LOSS_VAL] == 2.0  # epoch 1 only


@pytest.fixture
def silent_server():
    """A server that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        held = []

        def accept() -> None:
            while True:
                try:
                    held.append(listener.accept()[0])
                except OSError:
                    return

        threading.Thread(target=accept, daemon=True).start()
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/services/portal/mlflow"
        for connection in held:
            connection.close()


@pytest.mark.parametrize(("timeout_s", "budget_s", "said_part"), [
    (1, 30.0, "TimeoutError"),  # each request times out (and is retried once)
    (10, 2.0, "no answer in the 2 s left of the 2 s"),  # the run's budget runs out first
])
def test_a_server_that_never_answers_costs_the_time_out_or_the_budget(silent_server, tmp_path, monkeypatch,
                                                                      timeout_s, budget_s, said_part):
    monkeypatch.setattr(tracking, "REQUEST_TIMEOUT_S", timeout_s)
    monkeypatch.setattr(tracking, "BUDGET_S", budget_s)
    path = tmp_path / "mlflow.json"
    path.write_text(json.dumps({"tracking_uri": silent_server, "username": "alice", "password": "p",
                                            "experiment_id": "1", "tags": {"dsportal.job": "8"}}))
    monkeypatch.setenv(mlflow_file.FILE_ENV, str(path))
    said, started = Said(), time.monotonic()
    assert tracking.RunTracker.start(PARAMS, said) is None
    assert time.monotonic() - started < QUICK_S
    (line,) = said
    assert line.startswith(f"MLflow at {silent_server}: searching the experiment") and said_part in line, line


def test_without_a_job_file_nothing_is_said(tmp_path, monkeypatch):
    said = Said()
    assert tracking.RunTracker.start(PARAMS, said) is None  # no DSPORTAL_MLFLOW_FILE
    monkeypatch.setenv(mlflow_file.FILE_ENV, str(tmp_path / "mlflow.json"))
    assert tracking.RunTracker.start(PARAMS, said) is None  # named, absent: MLflow is off
    assert said == []


GOOD = {"tracking_uri": "http://127.0.0.1:9/x", "username": "alice", "password": "p", "experiment_id": "3",
        "tags": {"dsportal.job": "12"}}
BAD_JSON = {
    "not JSON": "{tracking_uri: ",
    "a list": "[1, 2]",
    "a password of digits": json.dumps({**GOOD, "password": 1234}),
    "no experiment": json.dumps({key: value for key, value in GOOD.items() if key != "experiment_id"}),
    "tags as a list": json.dumps({**GOOD, "tags": ["dsportal.job"]}),
    "a tag's value a number": json.dumps({**GOOD, "tags": {"dsportal.job": 12}}),
    "no job": json.dumps({**GOOD, "tags": {"dsportal.user": "alice"}}),
    "a job that breaks the filter": json.dumps({**GOOD, "tags": {"dsportal.job": "1' OR '1'='1"}}),
    "a file URI": json.dumps({**GOOD, "tracking_uri": "file:///etc"}),
    "10 MB": " " * (10 << 20),
}
SAYS = {"not JSON": "is not JSON", "a list": "holds list, not an object", "a password of digits": "password must be",
        "no experiment": "experiment_id must be a non-empty string; got nothing", "tags as a list": "tags must be",
        "a tag's value a number": "tags.dsportal.job must be a string; got a number",
        "no job": "tags.dsportal.job must name the job", "a job that breaks the filter": "must name the job",
        "a file URI": "tracking_uri must be an http", "10 MB": f"larger than {mlflow_file.MAX_BYTES} bytes"}


def hostile(path: Path, kind: str) -> None:
    if kind in BAD_JSON:
        path.write_text(BAD_JSON[kind])
    elif kind == "link to another file":
        put_special(path, kind, path.with_name("elsewhere.json"))
        path.with_name("elsewhere.json").write_text(json.dumps(GOOD))
    else:
        put_special(path, kind)


@pytest.mark.parametrize("kind", [*KINDS, *BAD_JSON])
def test_a_hostile_job_file_gives_one_clear_line_and_no_wait(tmp_path, monkeypatch, kind):
    path = tmp_path / "mlflow.json"
    hostile(path, kind)
    monkeypatch.setenv(mlflow_file.FILE_ENV, str(path))
    said, started = Said(), time.monotonic()
    assert tracking.RunTracker.start(PARAMS, said) is None
    assert time.monotonic() - started < 2
    (line,) = said
    why = SAYS.get(kind, "larger than" if kind == "huge sparse file" else "is not a regular file")
    assert line.startswith("MLflow: ") and str(path) in line and why in line, line
    assert line.endswith("this run is not logged to MLflow")


def test_a_bad_task_number_gives_one_line(tmp_path, monkeypatch):
    path = tmp_path / "mlflow.json"
    path.write_text(json.dumps(GOOD))
    monkeypatch.setenv(mlflow_file.FILE_ENV, str(path))
    monkeypatch.setenv(mlflow_file.TASK_ENV, "3; DROP")
    said = Said()
    assert tracking.RunTracker.start(PARAMS, said) is None
    assert said == ["MLflow: DSPORTAL_TASK must be a task number; got '3; DROP'; this run is not logged to MLflow"]


def test_the_job_files_password_is_never_shown(tmp_path):
    path = tmp_path / "mlflow.json"
    path.write_text(json.dumps({**GOOD, "password": "s3cret"}))
    assert "s3cret" not in repr(mlflow_file.read(str(path)))


def test_another_user_cannot_read_alices_run(users, jobs, tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException

    job_file(tmp_path, users["alice"], next(jobs), monkeypatch)
    tracker = tracking.RunTracker.start(PARAMS, Said())
    tracker.epoch(entry(1))
    tracker.finish(tracking.FINISHED)
    as_bob = client_as(users["bob"], monkeypatch)
    with pytest.raises(MlflowException, match="PERMISSION_DENIED|403|ermission"):
        as_bob.get_run(tracker.run_id)
    with pytest.raises(MlflowException, match="PERMISSION_DENIED|403|ermission"):
        as_bob.get_metric_history(tracker.run_id, TAG_LOSS_VAL)
    try:
        found = as_bob.search_runs([users["alice"].experiment_id])
    except MlflowException:
        found = []
    assert list(found) == []
    assert as_bob.search_runs([users["bob"].experiment_id]) == []  # his own experiment: reachable, empty


def test_every_tag_is_its_own_metric_name_and_others_are_made_valid():
    from mlflow.utils.validation import _validate_metric_name  # MLflow's own rule, as its server applies it

    assert [tracking.metric_name(tag) for tag in ALL_TAGS] == list(ALL_TAGS)
    odd = {"a//b": "a/b", "loss/val?": "loss/val_", "../up": "up", "/x/./y/": "x/y", "": "_", "é/ü": "é/ü",
           "x" * 300: "x" * 250}
    assert {tag: tracking.metric_name(tag) for tag in odd} == odd
    for name in [*odd.values(), *ALL_TAGS, tracking.METRIC_IMAGES_PER_SEC, tracking.METRIC_SECONDS]:
        _validate_metric_name(name)


def test_the_tracker_needs_no_tensorflow_nor_torch():
    import subprocess
    import sys

    from tests.conftest import REPO

    code = ("import sys, programkit.tracking; bad = {'tensorflow', 'torch'} & set(sys.modules); "
            "sys.exit(f'imported {bad}' if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
