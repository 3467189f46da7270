"""What the schedulers whose jobs live in the user's home (Slurm, local) share: the job's output and metrics are
files in ~/jobs/<cluster>/<id>/, read as the user (portal.records.account.JobUser), within bounds."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from portal.errors import Untrusted
from portal.inputs import finite_json
from portal.metrics import MetricsError, RunMetrics, read_run_metrics, record_lines
from portal.records.record import OUTPUT_FILE, JobRecord, cluster_jobs_dir
from programkit.model_card import CARD_FILE, check_card, frameworks_of  # TensorFlow-free
from programkit.schemas import SchemaError
from programkit.tblog import RECORD_FILE as EPOCH_RECORD_FILE

if TYPE_CHECKING:
    from portal.config import PortalConfig
    from portal.records.account import JobUser
    from portal.records.spec import JobSpec
    from portal.scheduler.cluster import QueuedJob
    from portal.scheduler.snapshot import ClusterSnapshot

MAX_CARD_BYTES = 256 * 1024  # a model card is a few KB; the user could put anything at its path
# A run's per-epoch record as the dashboard reads it: about 1 KB an epoch, so some 4,000 epochs; a longer one is
# read up to its last whole line within this (its latest epochs then missing, and said).
MAX_EPOCH_RECORD_BYTES = 4 * 2**20
METRICS_TIMEOUT_S = 60  # reading a run's event files as the user (at most portal.metrics.MAX_EVENT_BYTES)
# $1 the logdir, $2 the venv's python: portal.metrics's own early answer, without Python, when there is no events file.
# -I and the working directory "/" (JobUser.run): the user's own files never shadow portal.metrics (portal.runas).
METRICS_IF_EVENTS = ('for f in "$1"/events.out.tfevents.*; do [ -e "$f" ] && exec "$2" -I -m portal.metrics "$1"; '
                     'done; echo "{}"')


class ModelCardError(Untrusted, ValueError):
    """A job's model_card.json that is not one (the user's to write: read as hostile)."""


def checked_card(text: str, job_id: str) -> dict[str, Any]:
    """A model card's text (the user's: a file, or a line of their pod's log) read as hostile: ModelCardError
    saying why it is not a card, naming the first field whose type or size is wrong (programkit.schemas.MODEL_CARD).
    What it returns has every field the job page shows, of the type the page expects."""
    where = f"{CARD_FILE} of job {job_id}"
    try:
        card = finite_json(text, MAX_CARD_BYTES)
    except ValueError as err:
        raise ModelCardError(f"{where}: {err}") from None
    try:
        check_card(card, where)
    except SchemaError as err:
        raise ModelCardError(str(err)) from None
    card["environment"]["frameworks"] = frameworks_of(card["environment"])  # a card written before them too
    return card


class JobsInHome:
    """Output, metrics and (by default) no history or shared queue line, for jobs in ~/jobs/<cluster>/<id>/."""

    cfg: PortalConfig
    records_in_home = True  # each job's record is ~/jobs/<cluster>/<id>/job.json
    queue_in_snapshot = False  # a job's state is asked of it (`state`), never read from a snapshot

    def jobs_dir(self, user: JobUser) -> Path:
        """Where this cluster makes the user's new jobs: ~/jobs/<cluster_name>/."""
        return cluster_jobs_dir(user.home, self.cfg.cluster_name)

    def person(self, user: str | None, groups: Sequence[str] | None) -> JobUser:
        """The user as a Unix account: `user` when acting for them, else the caller."""
        from portal.records.account import job_user

        return job_user(user, groups)

    def queued(self, snapshot: ClusterSnapshot, record: JobRecord) -> QueuedJob | None:
        return None

    def waiting(self, snapshot: ClusterSnapshot, record: JobRecord) -> QueuedJob | None:
        return None

    def start_note(self, spec: JobSpec, user: str, snapshot: ClusterSnapshot) -> str:
        return ""  # no snapshot of each node's free resources here: a waiting job's page says why it waits

    def history(self, record: JobRecord, user: JobUser) -> list[str]:
        record.check_owner(user.name)
        return []

    def output_path(self, record: JobRecord, user: JobUser):
        return record.job_dir / OUTPUT_FILE

    def logs(self, record: JobRecord, user: JobUser, tail: int | None = None, task: int | None = None) -> str:
        """The job's output (stdout and stderr of every worker); "" before it starts. A sweep's: its task's
        (task 0 unless `task` is given)."""
        record.check_owner(user.name)
        if record.sweep is not None:
            return user.tail(record.task_log(task or 0), tail) or ""
        return user.tail(self.output_path(record, user), tail) or ""

    def model_card(self, record: JobRecord, user: JobUser, task: int | None = None) -> dict[str, Any] | None:
        """The run's model card (programkit.model_card), read as the user: None before the run wrote one; a card
        that is not one (too large, not JSON, not of the card's schema) is ModelCardError, saying why. A
        sweep's: its task's trial's (None without a `task`)."""
        record.check_owner(user.name)
        if record.sweep is not None and task is None:
            return None
        directory = record.checkpoint_dir if task is None else record.task_checkpoint_dir(task)
        text = user.read_text(directory / CARD_FILE, MAX_CARD_BYTES)
        return None if text is None else checked_card(text, record.id)

    def epochs(self, record: JobRecord, user: JobUser, task: int | None = None) -> tuple[dict[int, dict], str]:
        """The run's per-epoch record (checkpoints/epochs.jsonl; a sweep's: its task's trial's), read as the user
        through the bounded reader, each line checked against its schema (portal.metrics.record_lines): ({epoch:
        line}, "") or, for a file that is not one to read (a FIFO, a link, too large), what was read and why not
        all of it. ({}, "") before the first epoch, and for a sweep without a `task`."""
        record.check_owner(user.name)
        if record.sweep is not None and task is None:
            return {}, ""
        directory = record.checkpoint_dir if task is None else record.task_checkpoint_dir(task)
        text, why = user.read_text_why(directory / EPOCH_RECORD_FILE, MAX_EPOCH_RECORD_BYTES)
        if text is None:
            return {}, f"its per-epoch record is not read: {why}" if why else ""
        if len(text) > MAX_EPOCH_RECORD_BYTES:
            text = text[:MAX_EPOCH_RECORD_BYTES].rpartition("\n")[0]
            why = f"its per-epoch record is over {MAX_EPOCH_RECORD_BYTES // 2**20} MB: its first epochs only"
        return record_lines(text, prefix=""), why

    def metrics(self, record: JobRecord, user: JobUser) -> RunMetrics:
        """Images/sec and AUROC so far, from the run's TensorBoard logdir."""
        record.check_owner(user.name)
        if user.is_caller:
            return read_run_metrics(record.logdir)
        # Acting for the user: read their files as them, in a process of theirs. A run that never started (say,
        # cancelled while pending) has no event file: the shell answers for it without starting Python.
        # Its answer is checked like any input (RunMetrics.from_json); a bad one is shown as unreadable.
        python = str(self.cfg.venv / "bin" / "python")
        try:
            result = user.run(["/bin/sh", "-c", METRICS_IF_EVENTS, "sh", str(record.logdir), python],
                              timeout=METRICS_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:  # an answer too, kept like any other: a slow file costs one try a while
            return RunMetrics(unreadable=f"reading the TensorBoard files took more than {METRICS_TIMEOUT_S} s")
        try:
            if result.returncode != 0:
                last = (result.stderr.strip().splitlines() or ["no message"])[-1]
                raise MetricsError(f"reading the TensorBoard files failed: {last[:200]}")
            return RunMetrics.from_json(result.stdout)
        except MetricsError as err:
            return RunMetrics(unreadable=str(err))
