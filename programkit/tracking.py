"""Rank 0 of every training logs its run to the portal's MLflow tracking server, as the job's owner (docs/mlflow.md).

Both programs (chexnet.train, chexnet_torch.train) call it, on rank 0 only, beside what they already write: the
per-epoch record and TensorBoard (programkit.tblog) and the model card (programkit.model_card). Without TensorFlow or
torch; the MLflow client (mlflow-skinny) is imported only when the job has an MLflow file.

    tracker = RunTracker.start(params, say, epochs_done=, checkpoint_dir=, logdir=)  # None: no MLflow for this run
    tracker.epoch(entry)        # after the epoch's checkpoint: its scalars at step = epoch
    tracker.card(path)          # model_card.json as the run's artifact
    tracker.finish(FINISHED)    # or FAILED (an exception, a NaN exit), KILLED; pruned_at= tags a pruned trial
    with failing(tracker): ...  # an exception out of the training ends the run FAILED (KILLED on ^C)

The run. Its tags are the job file's (dsportal.user, .job, .scheduler, .program) and `dsportal.run`, the job ("12")
or a sweep's task ("12:3", programkit.mlflow_file.run_key); its name "job 12" or "sweep 12, task 3"; its params the
program's hyperparameters as strings (MLflow's params are strings). A requeued job (Slurm re-runs it with --resume
after a node died) continues the SAME run: `start` finds the newest run of the experiment whose `dsportal.run` is
the job's, reopens it (RUNNING) and logs only the params it lacks (MLflow refuses a logged param a new value). It
then logs from the per-epoch record every epoch that the checkpoint holds and the run lacks (a kill between the
checkpoint and MLflow, or a server that was down), known by the history of one metric (loss/val: each epoch's
metrics go in one log_batch, so one metric's steps are the run's epochs). A run found with epochs beyond the
checkpoint's is not this checkpoint's run (its checkpoints were removed, the training started over): a new one.

Metric names. A TensorBoard tag is the metric's name as it is (`metric_name`): MLflow takes letters, digits,
`_ - . / :` and spaces, in a name that a path normalisation leaves as it is, and every chexnet tag (loss/train,
loss/val, lr, auroc/mean, auroc/<Class>, data/skipped_records) already is one, so the charts in MLflow and in
TensorBoard have the same names. Any other character becomes `_`, and empty, `.` and `..` parts of a path are
dropped. The epoch's images/sec (all workers) and wall time are `epoch/images_per_sec` and `epoch/seconds`, at step
= epoch (TensorBoard's throughput/images_per_sec is at the global step, every few steps: not the same series).

Never in the training's way. Every call runs in a thread of its own, waited for at most what is left of a budget of
BUDGET_S that the run's calls share; each epoch adds EPOCH_ALLOWANCE_S to it (up to BUDGET_S again), which a healthy
server never uses up (an epoch is one call: 30 ms here, 0.5 s on 2 busy cores). So MLflow costs a training at most
BUDGET_S plus EPOCH_ALLOWANCE_S an epoch, and a server that hangs or crawls at most BUDGET_S before the tracker
gives up. Each request times out after REQUEST_TIMEOUT_S and is retried once. The first failure (no answer, 401/403,
a time-out, the budget spent) is said in one line naming the server and what failed, and the tracker is off for the
rest of the run.
"""

from __future__ import annotations

import math
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from programkit import mlflow_file, tblog
from programkit.tags import TAG_LOSS_VAL

__all__ = ["FAILED", "FINISHED", "KILLED", "RunTracker", "failing", "metric_name"]

FINISHED, FAILED, KILLED = "FINISHED", "FAILED", "KILLED"
BUDGET_S = 30.0  # what the run's calls may take at most, failures included; each epoch adds EPOCH_ALLOWANCE_S
EPOCH_ALLOWANCE_S = 1.0
REQUEST_TIMEOUT_S = 10
REQUEST_RETRIES = 1
TAG_RUN, TAG_PRUNED = "dsportal.run", "dsportal.pruned"
METRIC_IMAGES_PER_SEC, METRIC_SECONDS = "epoch/images_per_sec", "epoch/seconds"
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param's value
MAX_METRICS_PER_BATCH = 1000  # MLflow's limit on one log_batch
MAX_KEY_CHARS = 250
_NOT_IN_A_NAME = re.compile(r"[^\w.\- /:]")


def metric_name(tag: str) -> str:
    """A TensorBoard tag as an MLflow metric or param name (the module's docstring has the rule): chexnet's own
    tags are unchanged."""
    parts = [part for part in _NOT_IN_A_NAME.sub("_", tag).split("/") if part not in ("", ".", "..")]
    return "/".join(parts)[:MAX_KEY_CHARS].rstrip("/") or "_"


STEP_METRIC = metric_name(TAG_LOSS_VAL)  # every epoch has it: its steps are the epochs a run holds


class _Off(Exception):
    """A call failed (and was said): the tracker is off."""


class RunTracker:
    """One run on the server, as the job's owner; made by `start`. Every method is a no-op once the tracker is off."""

    def __init__(self, job: mlflow_file.JobFile, client: Any, say: Callable[[str], None], key: str) -> None:
        self.job, self.client, self.say, self.key = job, client, say, key
        self.run_id: str | None = None
        self.logged: set[int] = set()  # the epochs the run holds
        self.budget_s = BUDGET_S  # what is left of it
        self.off = False

    @classmethod
    def start(cls, params: Mapping[str, object], say: Callable[[str], None], *, epochs_done: int = 0,
              checkpoint_dir: Path | None = None, logdir: Path | None = None) -> RunTracker | None:
        """The job's run, made or continued, with its params and (given the checkpoint directory) every epoch the
        checkpoint holds that it lacks; None without a job file (said nothing), with a bad one or when the server
        fails (said in one line). `epochs_done`: the epochs of the checkpoint the training resumes from."""
        path = os.environ.get(mlflow_file.FILE_ENV)
        if not path:
            return None
        try:
            job = mlflow_file.read(path)
            if job is None:
                return None
            key = mlflow_file.run_key(job)
        except mlflow_file.BadJobFile as err:
            say(f"MLflow: {err}; this run is not logged to MLflow")
            return None
        _configure(job)
        try:
            from mlflow.tracking import MlflowClient  # the client's import takes a second or two: only when needed

            client = MlflowClient(job.tracking_uri)
        except Exception as err:  # noqa: BLE001 - no client library, or one that refuses the URI: no MLflow
            say(f"MLflow: no client for {job.tracking_uri} ({_short(err)}); this run is not logged to MLflow")
            return None
        tracker = cls(job, client, say, key)
        try:
            tracker._open(params, epochs_done)
            if checkpoint_dir is not None and epochs_done:
                tracker._catch_up(checkpoint_dir, logdir, epochs_done)
        except _Off:
            return None
        return tracker

    def epoch(self, entry: tblog.EpochScalars) -> None:
        """The epoch's scalars (and images/sec and seconds when recorded) at step = epoch, in one call."""
        if self.off:
            return
        self.budget_s = min(BUDGET_S, self.budget_s + EPOCH_ALLOWANCE_S)
        try:
            self._log_metrics(_metrics(entry))
            self.logged.add(entry.epoch)
        except _Off:
            pass

    def card(self, path: Path) -> None:
        """The model card, as the run's artifact `model_card.json` (the server keeps it: --serve-artifacts)."""
        if self.off:
            return
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return
        except OSError:
            return  # no card was written: the training said why
        try:
            self._call("logging the model card", self.client.log_artifact, self.run_id, str(path))
        except _Off:
            pass

    def finish(self, status: str, *, pruned_at: int | None = None) -> None:
        """Ends the run with `status` (FINISHED, FAILED, KILLED); a sweep's pruned trial is FINISHED and tagged
        `dsportal.pruned` = "epoch N". The tracker is off afterwards."""
        if self.off:
            return
        try:
            if pruned_at is not None:
                self._call("tagging the run pruned", self.client.set_tag, self.run_id, TAG_PRUNED, f"epoch {pruned_at}")
            self._call(f"ending the run {status}", self.client.set_terminated, self.run_id, status)
        except _Off:
            return
        self.off = True

    # --- the run ------------------------------------------------------------------------------------------------

    def _open(self, params: Mapping[str, object], epochs_done: int) -> None:
        from mlflow.entities import Param, RunTag

        runs = self._call("searching the experiment for the job's run", self.client.search_runs,
                          [self.job.experiment_id], filter_string=f"tags.`{TAG_RUN}` = '{self.key}'",
                          max_results=1, order_by=["attributes.start_time DESC"])
        run = runs[0] if runs else None
        wanted = {metric_name(name): _param_value(value) for name, value in params.items()}
        if run is not None:
            history = self._call("reading the run's epochs", self.client.get_metric_history, run.info.run_id,
                                 STEP_METRIC)
            self.logged = {int(point.step) for point in history}
            if max(self.logged, default=0) > epochs_done:
                self.say(f"MLflow: run {run.info.run_id} of {mlflow_file.run_name(self.key)} holds epochs beyond the "
                         f"checkpoint's {epochs_done}: this training starts a new run")
                run, self.logged = None, set()
        if run is None:
            made = self._call("making the run", self.client.create_run, self.job.experiment_id,
                              tags=self._tags(), run_name=mlflow_file.run_name(self.key))
            self.run_id, logged_params = made.info.run_id, {}
            verb = "logging to"
        else:
            self.run_id, logged_params = run.info.run_id, dict(run.data.params)
            self._call("reopening the run", self.client.update_run, self.run_id, status="RUNNING")
            verb = "continuing"
        changed = sorted(name for name in wanted if name in logged_params and logged_params[name] != wanted[name])
        if changed:
            self.say(f"MLflow: the run keeps its first values of {', '.join(changed)} (MLflow's params never change)")
        self._call("logging the run's params and tags", self.client.log_batch, self.run_id,
                   params=[Param(name, value) for name, value in wanted.items() if name not in logged_params],
                   tags=[RunTag(name, value) for name, value in self._tags().items()] if run is not None else [])
        self.say(f"MLflow: {verb} run {self.run_id} ({mlflow_file.run_name(self.key)}) in experiment "
                 f"{self.job.experiment_id} at {self.job.tracking_uri}")

    def _tags(self) -> dict[str, str]:
        return {**self.job.tags, TAG_RUN: self.key, "mlflow.user": self.job.username}

    def _catch_up(self, checkpoint_dir: Path, logdir: Path | None, epochs_done: int) -> list[int]:
        """Logs, from the per-epoch record, the epochs up to the checkpoint's that the run lacks; returns them."""
        record = tblog.read_record(tblog.record_path(checkpoint_dir))
        key = tblog.logdir_key(logdir) if logdir is not None else None
        missing = [entry for epoch, entry in sorted(record.items())
                   if epoch <= epochs_done and epoch not in self.logged and key in (None, entry.logdir)]
        if missing:
            self._log_metrics([metric for entry in missing for metric in _metrics(entry)])
            self.logged.update(entry.epoch for entry in missing)
            self.say(f"MLflow: logged epoch(s) {', '.join(str(entry.epoch) for entry in missing)} from the "
                     "checkpoint's record (the run before did not)")
        return [entry.epoch for entry in missing]

    def _log_metrics(self, metrics: list) -> None:
        for first in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            self._call("logging the epoch's metrics", self.client.log_batch, self.run_id,
                       metrics=metrics[first:first + MAX_METRICS_PER_BATCH])

    # --- every call ---------------------------------------------------------------------------------------------

    def _call(self, what: str, function: Callable[..., Any], *args: object, **kwargs: object) -> Any:
        """function(*args, **kwargs) in a thread, waited for at most what is left of the budget; _Off (said once, and
        the tracker off) when it fails or is not done in time."""
        if self.off:
            raise _Off
        outcome: dict[str, Any] = {}

        def call() -> None:
            try:
                outcome["value"] = function(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - any failure of the client's: said by the caller below
                outcome["error"] = err

        thread = threading.Thread(target=call, name="mlflow-call", daemon=True)
        started, left = time.monotonic(), max(0.0, self.budget_s)
        thread.start()
        thread.join(left)  # a call still running then is left to itself (a daemon thread: it ends with the process)
        self.budget_s -= time.monotonic() - started
        if "value" in outcome:
            return outcome["value"]
        why = _short(outcome["error"]) if "error" in outcome else \
            f"no answer in the {left:.0f} s left of the {BUDGET_S:.0f} s that a training waits for MLflow at most"
        self.say(f"MLflow at {self.job.tracking_uri}: {what} failed ({why}); the rest of this run is not logged to "
                 "MLflow")
        self.off = True
        raise _Off


@contextmanager
def failing(tracker: RunTracker | None) -> Iterator[None]:
    """An exception out of the block ends the run FAILED (KILLED on KeyboardInterrupt), then goes on."""
    try:
        yield
    except BaseException as err:
        if tracker is not None:
            tracker.finish(KILLED if isinstance(err, KeyboardInterrupt) else FAILED)
        raise


def _configure(job: mlflow_file.JobFile) -> None:
    """The client's settings, in this process's environment (rank 0 is one user's process, logging one run): the
    job's credentials, short time-outs, and no telemetry (nothing may leave the machine)."""
    os.environ.update({"MLFLOW_TRACKING_USERNAME": job.username, "MLFLOW_TRACKING_PASSWORD": job.password,
                       "MLFLOW_HTTP_REQUEST_TIMEOUT": str(REQUEST_TIMEOUT_S),
                       "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(REQUEST_RETRIES),
                       "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
                       "DO_NOT_TRACK": "true",
                       # Not the client's own "View run" lines on standard output (nor the call they cost).
                       "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"})


def _metrics(entry: tblog.EpochScalars) -> list:
    """The epoch's metrics at step = epoch; undefined values (a class without AUROC) are left out, as in TensorBoard."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    values = {metric_name(tag): value for tag, value in entry.scalars.items()}
    values.update({METRIC_IMAGES_PER_SEC: entry.images_per_sec, METRIC_SECONDS: entry.seconds})
    return [Metric(name, float(value), now, entry.epoch) for name, value in values.items()
            if value is not None and math.isfinite(value)]


def _param_value(value: object) -> str:
    return str(value)[:MAX_PARAM_CHARS]


def _short(err: BaseException) -> str:
    """What went wrong, in a few words: the first line of the error at the root of the chain (the client wraps a
    refused connection or a time-out in three layers of retries and URLs: "ConnectionRefusedError: [Errno 111]
    Connection refused", "TimeoutError: timed out"); a server's refusal is the client's own error ("...: 401 ...")."""
    while (err.__cause__ or err.__context__) is not None:
        err = err.__cause__ or err.__context__
    text = str(getattr(err, "message", None) or err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200] if text else ''}"
