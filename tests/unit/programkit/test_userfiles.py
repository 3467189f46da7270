"""programkit.userfiles, the training side's bounded reader, and the sweep's readers over it: each kind of special file
in place of a sweep's plan, trial file, claim and epoch record is refused at once (a FIFO never waits), and a regular
file is read whole up to its limit."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from programkit import sweep, sweepclaims, tblog, userfiles
from programkit.sweep import PLAN_FILE, Plan, SweepError
from tests.special_files import KINDS, fifo, put_special

LIMIT = 1024
PLAN = {"space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}, "sampler": "tpe", "pruner": "median",
        "min_epochs": 1, "seed": 0, "epochs": 3}


def put(kind: str, path: Path, tmp_path: Path) -> None:
    """One kind of file a user could put where a run's file should be (a link to another file: to a plan)."""
    other = tmp_path / "someone-elses.json"
    if kind == "link to another file":
        other.write_text(json.dumps(PLAN))
    put_special(path, kind, other)


@pytest.mark.parametrize("kind", KINDS)
def test_the_reader_refuses_each_special_file_at_once(tmp_path, kind):
    path = tmp_path / "file"
    put(kind, path, tmp_path)
    started = time.monotonic()
    refused = ValueError if kind == "huge sparse file" else userfiles.NotARegularFile
    with pytest.raises(refused):
        userfiles.read_bytes(path, LIMIT)
    assert time.monotonic() - started < 1, "it waited"


def test_a_regular_file_is_read_up_to_its_limit(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"x" * LIMIT)
    assert userfiles.read_bytes(path, LIMIT) == b"x" * LIMIT
    path.write_bytes(b"x" * (LIMIT + 1))
    with pytest.raises(ValueError, match=f"more than {LIMIT}"):
        userfiles.read_bytes(path, LIMIT)
    with pytest.raises(FileNotFoundError):
        userfiles.read_bytes(tmp_path / "missing", LIMIT)


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_in_place_of_the_sweeps_plan_is_refused_at_once(tmp_path, kind):
    put(kind, tmp_path / PLAN_FILE, tmp_path)
    started = time.monotonic()
    with pytest.raises(SweepError, match="not a sweep's plan"):
        Plan.read(tmp_path)
    assert time.monotonic() - started < 1


def test_the_plan_and_a_trial_file_of_regular_files_are_read(tmp_path):
    (tmp_path / PLAN_FILE).write_text(json.dumps(PLAN))
    assert Plan.read(tmp_path).epochs == 3
    trial = tmp_path / "trial.json"
    fifo(trial)
    with pytest.raises(OSError):
        sweep.TrialReporter.from_trial_file(trial)


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_as_the_runs_epoch_record_reads_as_no_record(tmp_path, kind):
    path = tmp_path / tblog.RECORD_FILE
    put(kind, path, tmp_path)
    started = time.monotonic()
    try:
        assert tblog.read_record(path) == {}
    except ValueError:
        assert kind == "huge sparse file"
    assert time.monotonic() - started < 1


def test_a_claim_that_is_no_claim_has_no_holder(tmp_path):
    fifo_path, big, mine = tmp_path / "0", tmp_path / "1", tmp_path / "2"
    fifo(fifo_path)
    big.write_bytes(b"x" * (sweepclaims.MAX_CLAIM_BYTES + 1))
    mine.write_text("pod-a\n")
    assert [sweepclaims._read_head(p) for p in (fifo_path, big, mine)] == ["", "", "pod-a"]


def a_plan_file() -> dict:
    from portal.records.sweep import parse_sweep

    plan = parse_sweep({"trials": 4, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True},
                                               "batch_size": [8, 16]}}, 5, None, 0)
    return plan.file_dict()


@pytest.mark.parametrize("record", ["plan", "trial"])
def test_each_field_of_a_plan_or_trial_file_of_another_type_is_refused_naming_it(tmp_path, record):
    """sweep.json and trial.json, each field given each JSON type but its own (tests/cards.py): refused, naming the
    field (programkit.schemas), never another error; the file as its writer writes it is read."""
    from programkit.schemas import SWEEP_PLAN, TRIAL_RECORD, SchemaError, check
    from tests.cards import wrong_type_cards

    good = a_plan_file() if record == "plan" else {"number": 3, "task": 1, "params": {"lr": 0.001, "batch_size": 8}}
    schema = SWEEP_PLAN if record == "plan" else TRIAL_RECORD
    check(schema, good, record)
    refused = 0
    for path, kind, bad in wrong_type_cards(good):
        try:
            check(schema, bad, record)
        except SchemaError as err:
            refused += 1
            named = err.field.split("[")[0]
            assert path.startswith(named) or named.startswith(path.split(".")[0]), (path, kind, str(err))
    assert refused >= 10, refused
    if record == "plan":
        (tmp_path / PLAN_FILE).write_text(json.dumps({**good, "epochs": "many"}))
        with pytest.raises(SweepError, match="epochs is \"many\" \\(a string\\); expected a whole number"):
            Plan.read(tmp_path)
        (tmp_path / PLAN_FILE).write_text(json.dumps({**good, "space": {"lr": {"choices": 7}}}))
        with pytest.raises(SweepError, match=r"space\.lr\.choices is 7 \(a number\); expected a list"):
            Plan.read(tmp_path)
    else:
        with pytest.raises(SchemaError, match="task"):
            sweep.write_trial_file(tmp_path, "1", 3, {})  # the writer checks what it writes
