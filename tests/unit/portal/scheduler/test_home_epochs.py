"""A run's per-epoch record as the dashboard reads it (JobsInHome.epochs): through the bounded reader, as the user,
each line checked against programkit.schemas.EPOCH_RECORD; a FIFO, a link or a huge file in its place is said, never
read through or waited on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portal.config import PortalConfig
from portal.records.account import job_user
from portal.records.record import JobRecord
from portal.records.spec import JobSpec
from portal.records.sweep import parse_sweep
from portal.scheduler.home import MAX_EPOCH_RECORD_BYTES
from portal.scheduler.slurm.scheduler import SlurmScheduler
from tests import special_files


def line(epoch: int, **scalars) -> str:
    return json.dumps({"epoch": epoch, "logdir": "/l", "scalars": scalars, "images_per_sec": 100.0 + epoch}) + "\n"


def record(tmp_path: Path, sweep: bool = False) -> JobRecord:
    plan = parse_sweep({"space": {"lr": {"low": 1e-5, "high": 1e-2, "log": True}}, "trials": 2}, 3, None, 0) \
        if sweep else None
    return JobRecord(id="42", scheduler="slurm", user=job_user().name, spec=JobSpec(data_dir="/d"),
                     submitted_at="2026-01-01T00:00:00+00:00", job_dir=tmp_path, sweep=plan)


def epochs_of(job: JobRecord, task=None):
    return SlurmScheduler(PortalConfig()).epochs(job, job_user(), task)


def test_each_checked_line_counts_the_last_of_an_epoch_winning_and_a_bad_line_skipped(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "epochs.jsonl").write_text(
        line(1, **{"auroc/mean": 0.6}) + "not json\n" + json.dumps({"epoch": "two", "scalars": {}}) + "\n"
        + line(2, **{"auroc/mean": 0.7}) + line(2, **{"auroc/mean": 0.75}) + '{"epoch": 3, "logdir"')
    found, problem = epochs_of(record(tmp_path))
    assert sorted(found) == [1, 2] and found[2]["scalars"]["auroc/mean"] == 0.75 and problem == ""


def test_nothing_yet_is_no_problem_and_a_sweep_reads_its_tasks_record(tmp_path):
    assert epochs_of(record(tmp_path)) == ({}, "")
    sweep = record(tmp_path, sweep=True)
    assert epochs_of(sweep) == ({}, "")  # a sweep's own: none; its trials' are per task
    trial = tmp_path / "trials" / "1" / "checkpoints"
    trial.mkdir(parents=True)
    (trial / "epochs.jsonl").write_text(line(1, **{"loss/val": 0.3}))
    assert list(epochs_of(sweep, 1)[0]) == [1]


@pytest.mark.parametrize("kind", ["fifo", "device_link", "link_to"])
def test_a_fifo_or_a_link_in_its_place_is_said_not_read(tmp_path, kind):
    (tmp_path / "checkpoints").mkdir()
    path = tmp_path / "checkpoints" / "epochs.jsonl"
    if kind == "link_to":
        (tmp_path / "other").write_text(line(1))
        special_files.link_to(path, tmp_path / "other")
    else:
        getattr(special_files, kind)(path)
    found, problem = epochs_of(record(tmp_path))
    assert found == {} and problem.startswith("its per-epoch record is not read: a "), problem


def test_a_record_over_the_cap_is_read_up_to_its_last_whole_line_and_said(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    one = line(1, **{"auroc/mean": 0.5, "pad": 0.0}).replace('"pad": 0.0', '"pad": ' + "0." + "0" * 4000)
    (tmp_path / "checkpoints" / "epochs.jsonl").write_text(one * (MAX_EPOCH_RECORD_BYTES // len(one) + 5))
    found, problem = epochs_of(record(tmp_path))
    assert list(found) == [1] and "over 4 MB" in problem
