"""What every driver of the scheduler contract suite is (contract_helpers.py names them all: `DRIVERS`): one
scheduler against its cluster's recorded answers, and what a training run writes (`Run`), which each driver puts
where its scheduler reads it (`Driver.wrote`), so that a test says what the run did and never where it went."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from portal import jobs
from portal.config import PortalConfig
from portal.errors import JobNotFound
from portal.mlflow_accounts import JOB_FILE
from portal.records.account import JobUser
from portal.records.record import JobRecord
from portal.scheduler.protocol import Scheduler
from programkit.tblog import RECORD_LINE_PREFIX, EpochScalars

PEOPLE = ("alice", "bob")
GROUPS = ("gpu-users",)
NODE, NODE_GPUS = "node1", 4  # the one GPU node each cluster has
LOST_AT = datetime(2026, 11, 24, 10, 0)  # when the node a requeued job ran on failed (`Driver.lost_node`)


@dataclass(frozen=True)
class Run:
    """What a training run wrote, as every program does (chexnet.train, chexnet_torch.train): its own lines, then
    a per-epoch record line for each finished epoch (programkit.tblog: to checkpoints/epochs.jsonl and, after its
    prefix, to its output; a resumed run records an epoch again), and at its end its model card (programkit.model_card;
    text that is not a card where `card` is a string; None while it runs)."""

    said: tuple[str, ...] = ()
    epochs: tuple[EpochScalars, ...] = ()
    card: dict[str, Any] | str | None = None

    @property
    def log(self) -> str:
        """Its output as the program printed it."""
        printed = [*self.said, *(f"{RECORD_LINE_PREFIX}{json.dumps(entry.to_dict())}" for entry in self.epochs)]
        return "".join(f"{line}\n" for line in printed)

    @property
    def card_text(self) -> str:
        """The card file's text (programkit.model_card.write_card's JSON, or what stands in its place)."""
        return self.card if isinstance(self.card, str) else json.dumps(self.card, indent=1) + "\n"


def wait_for(done, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.05)


class Driver:
    """One scheduler against its cluster's recorded answers. Subclasses make the cluster answer."""

    name: str
    cfg: PortalConfig
    scheduler: Scheduler[Any]
    queue = True  # its cluster holds a job until nodes are free (False: this machine starts it at once)
    image_digest: str | None = None  # the kubelet's digest of the image a run ran in, where one says it

    def person(self, name: str) -> Any:
        raise NotImplementedError

    def listed(self, user: Any) -> list[JobRecord]:
        """The user's jobs as portal.jobs.jobs lists them for a scheduler whose records are in the homes: each job
        directory's job.json, kept where the scheduler says it is theirs (`state`, the check `_load` makes)."""
        found = []
        for job_id, _ in jobs.listed_jobs(user, self.cfg):
            try:
                found.append(self.load(user, job_id))
            except JobNotFound:
                continue
        return found

    def load(self, user: Any, job_id: str) -> JobRecord:
        """The user's job `job_id`, as portal.jobs.get loads it (with the scheduler's word that it is theirs)."""
        loaded = jobs._load(user, job_id, self.cfg, check=False).record
        self.scheduler.state(loaded, user)
        return loaded

    def answer(self, job: JobRecord, state: str) -> None:
        """Make the cluster say the job is `state`: RUNNING (on NODE, holding its GPUs there), COMPLETED, or
        PENDING (held: the GPUs it asks for are taken; only where `queue`)."""
        raise NotImplementedError

    def wrote(self, job: JobRecord, run: Run, task: int | None = None) -> None:
        """Put what `run` wrote where the scheduler keeps it (a sweep's: its task `task`'s trial's); a run with a
        card has ended."""
        raise NotImplementedError

    def lost_node(self, job: JobRecord) -> bool:
        """Make NODE fail under the running job at LOST_AT and the cluster run it again, where the scheduler
        does so and keeps its history (Slurm's requeue); False where it does not."""
        return False

    def started(self) -> list[str]:
        """The ids of the jobs the cluster was told to start."""
        raise NotImplementedError

    def cancelled(self) -> list[str]:
        """The ids of the jobs the cluster was asked to cancel, in order."""
        raise NotImplementedError

    def down(self) -> None:
        """Make the cluster stop answering."""
        raise NotImplementedError

    def up(self) -> None:
        """Make the cluster answer again."""
        raise NotImplementedError

    def close(self) -> None:
        """End what the driver started."""

    def tracking_file(self, job: JobRecord) -> tuple[str, int, list[str]]:
        """Where the job's rank 0 reads its MLflow account: (the file's text, its mode, the job's scripts and
        environments as text, where DSPORTAL_MLFLOW_FILE names it). A job in a home: its directory's file."""
        path = job.job_dir / JOB_FILE
        scripts = [p.read_text() for p in job.job_dir.iterdir() if p.suffix in (".sh", ".sbatch")]
        return path.read_text(), path.stat().st_mode & 0o777, scripts


def home_user(tmp_path: Path, name: str) -> JobUser:
    """A Unix account with its home under `tmp_path`, run as this process (no runuser: the caller is the user)."""
    return JobUser(name=name, uid=os.geteuid(), gid=os.getegid(), home=tmp_path / name, groups=GROUPS)


def wrote_in_home(job: JobRecord, run: Run, task: int | None = None) -> None:
    """What a run of a job in the home writes in its directory: its output (the job script's output.log; a
    sweep's task's trial-<task>.log), its per-epoch record, TensorBoard's event files (the last record line of
    each epoch: what programkit.tblog leaves there once a resumed run has caught up), and its card."""
    from programkit.model_card import CARD_FILE
    from programkit.tblog import append_record, record_path

    checkpoints = job.checkpoint_dir if task is None else job.task_checkpoint_dir(task)
    checkpoints.mkdir(parents=True, exist_ok=True)
    with (job.output_path if task is None else job.task_log(task)).open("a") as output:
        output.write(run.log)
    for entry in run.epochs:
        append_record(record_path(checkpoints), entry)
    if run.epochs and task is None:
        write_events(job.logdir, {entry.epoch: entry for entry in run.epochs})
    if run.card is not None:
        (checkpoints / CARD_FILE).write_text(run.card_text)


def write_events(logdir: Path, epochs: dict[int, EpochScalars]) -> None:
    """TensorBoard's event files as the training writes them: images/sec during each epoch (at its global steps),
    then the epoch's scalars at its end, a minute apart."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from portal.metrics import TAG_THROUGHPUT

    logdir.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(logdir))
    for epoch in sorted(epochs):
        entry, end = epochs[epoch], 1_795_587_000.0 + 60 * epoch
        points = [(TAG_THROUGHPUT, entry.images_per_sec, epoch * 100, end - 1)] if entry.images_per_sec else []
        points += [(tag, value, epoch, end) for tag, value in entry.scalars.items() if value is not None]
        for tag, value, step, wall in points:
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(event_pb2.Event(wall_time=wall, step=step, summary=summary))
    writer.close()
