"""A sweep's request (portal.records.sweep): what it may search, how many at once within the quota, the refusals naming
the field; its record; Slurm's tasks and the study's trials merged into the sweep page's rows; its batch script;
the submit form's sweep fields. (The sweep's chart: tests/unit/portal/service/test_charts.py.)"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from portal.config import PortalConfig
from portal.quota import GpuHolder, GpuQuota
from portal.records import programs
from portal.records.record import JobRecord, RecordError
from portal.records.spec import JobSpecError
from portal.records.sweep import (
    BEST_BY,
    MAX_TRIALS,
    OBJECTIVE,
    SweepStatusError,
    params_of,
    parse_sweep,
    read_status,
    recorded_plan,
    sweep_outcome,
    sweep_view,
    task_states,
)
from portal.scheduler.slurm.sbatch import render_sbatch, shell_path
from portal.service.submit_form import form_spec, sweep_form_field, sweep_form_values
from tests.unit.helpers import SPEC_LIMITS as LIMITS
from tests.unit.helpers import bash_syntax_ok, sbatch_lines
from tests.unit.helpers import parse_spec as parse

SPACE = {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, "batch_size": [8, 16], "model": ["densenet121", "resnet50"],
         "fp16": [False, True], "image_size": {"low": 64, "high": 128}, "warmup_epochs": [0, 1], "xla": [True]}


def plan_of(raw=None, epochs=5, limits=LIMITS, gpus=1):
    return parse_sweep({"space": SPACE, "trials": 6, "parallel": 2} if raw is None else raw, epochs, limits, gpus)


def refused(raw, field, *words, epochs=5, limits=LIMITS, gpus=1):
    with pytest.raises(JobSpecError) as err:
        parse_sweep(raw, epochs, limits, gpus)
    assert err.value.field == field, str(err.value)
    for word in words:
        assert word in str(err.value), str(err.value)
    return str(err.value)


def test_every_hyperparameter_can_be_searched_and_the_plan_reads_back_the_same():
    plan = plan_of()
    assert plan.names == tuple(SPACE) and set(plan.names) == set(params_of(programs.registry().get("chexnet")))
    assert (plan.trials, plan.parallel, plan.sampler, plan.pruner, plan.min_epochs, plan.seed) == (6, 2, "tpe",
                                                                                                  "median", 2, 0)
    recorded = json.loads(json.dumps(plan.to_dict()))
    assert recorded_plan(recorded, 5, "chexnet") == plan
    assert recorded["space"]["lr"] == {"low": 1e-4, "high": 1e-2, "log": True}
    assert recorded["space"]["batch_size"] == {"choices": [8, 16]}


def test_a_sweep_searches_its_programs_own_fields_and_no_other_programs():
    """chexnet-torch declares amp (a choice) and channels_last; chexnet's fp16 is not among its parameters."""
    plan = parse_sweep({"space": {"amp": ["off", "bf16"], "model": ["tinycnn"]}}, 5, LIMITS, 1,
                       template="chexnet-torch")
    assert plan.names == ("amp", "model") and plan.space[0].choices == ("off", "bf16")
    with pytest.raises(JobSpecError) as err:
        parse_sweep({"space": {"fp16": [True]}}, 5, LIMITS, 1, template="chexnet-torch")
    assert err.value.field == "sweep.space.fp16" and str(err.value).endswith(
        "not a hyperparameter a sweep of chexnet-torch can search; allowed: lr, warmup_epochs, batch_size, "
        "image_size, model, amp, channels_last")
    with pytest.raises(JobSpecError, match=r"sweep\.space\.amp\[0\].*auto, off, bf16, fp16"):
        parse_sweep({"space": {"amp": ["fp8"]}}, 5, LIMITS, 1, template="chexnet-torch")


def test_defaults_search_the_learning_rate_two_at_a_time():
    plan = parse_sweep({}, 5, LIMITS, 1)
    assert plan.names == ("lr",) and plan.space[0].log and plan.trials == 8 and plan.parallel == 2


@pytest.mark.parametrize("raw, field, words", [
    ([], "sweep", ["mapping"]),
    ({"trails": 3}, "trails", ["unknown field", "trials"]),
    ({"trials": 0}, "sweep.trials", ["1-200"]),
    ({"trials": MAX_TRIALS + 1}, "sweep.trials", []),
    ({"trials": True}, "sweep.trials", ["not a whole number"]),
    ({"space": {}}, "sweep.space", ["at least one"]),
    ({"space": {"weights": ["/etc/shadow"]}}, "sweep.space.weights", ["lr, warmup_epochs"]),
    ({"space": {"\n" * 500: [1]}}, "sweep.space", ["not a hyperparameter"]),
    ({"space": {"lr": {"low": 0, "high": 0.1}}}, "sweep.space.lr.low", ["above 0"]),
    ({"space": {"lr": {"low": 0.1, "high": 0.01}}}, "sweep.space.lr.high", ["not above low"]),
    ({"space": {"lr": {"low": float("nan"), "high": 0.1}}}, "sweep.space.lr.low", ["not a number"]),
    ({"space": {"lr": {"low": "1e-3"}}}, "sweep.space.lr.high", ["missing"]),
    ({"space": {"lr": {"low": 1e-3, "high": 1e-2, "step": 1}}}, "step", ["unknown field"]),
    ({"space": {"batch_size": [8, 8]}}, "sweep.space.batch_size", ["twice"]),
    ({"space": {"batch_size": [8, 0]}}, "sweep.space.batch_size[1]", ["1-1024"]),
    ({"space": {"batch_size": list(range(1, 40))}}, "sweep.space.batch_size", ["1 to 16 choices"]),
    ({"space": {"image_size": {"low": 16, "high": 64}}}, "sweep.space.image_size.low", ["32-1024"]),
    ({"space": {"model": "resnet50"}}, "sweep.space.model", ["a list"]),
    ({"space": {"model": ["vgg"]}}, "sweep.space.model[0]", ["densenet121"]),
    ({"space": {"fp16": ["maybe"]}}, "sweep.space.fp16[0]", ["true, false"]),
    ({"sampler": "grid"}, "sweep.sampler", ["tpe, random"]),
    ({"pruner": "percentile"}, "sweep.pruner", ["median, hyperband, none"]),
    ({"min_epochs": 5}, "sweep.min_epochs", ["1-4"]),
    ({"seed": -1}, "sweep.seed", []),
])
def test_bad_requests_name_the_field_and_what_is_allowed(raw, field, words):
    refused(raw, field, *words)


def test_pruning_needs_epochs_to_compare():
    refused({}, "sweep.pruner", "epochs of at least 3", epochs=2)
    assert parse_sweep({"pruner": "none"}, 1, LIMITS, 1).pruner == "none"


def test_parallel_is_capped_so_that_that_many_trials_fit_the_quota_left():
    held = replace(LIMITS, quota=GpuQuota(4, ("g",), (GpuHolder("7", 1),)))  # 3 of 4 GPUs left
    assert parse_sweep({"trials": 6, "parallel": 3}, 5, held, 1).parallel == 3
    message = refused({"trials": 6, "parallel": 2}, "sweep.parallel", "allowed: 1 (", limits=held, gpus=2)
    assert "you use 1 of your 4 GPUs" in message
    assert parse_sweep({"trials": 6}, 5, held, 2).parallel == 1  # the default, lowered to what fits
    refused({}, "sweep.parallel", "no trial of 4 GPU(s) fits", limits=held, gpus=4)
    assert parse_sweep({"trials": 6, "parallel": 6}, 5, held, 0).parallel == 6  # CPU-only trials: no GPU quota


def test_numbers_from_a_form_are_ascii_text():
    plan = parse_sweep({"space": {"lr": {"low": "1e-4", "high": " 0.01 ", "log": "true"}, "batch_size": ["8"]}},
                       5, LIMITS, 1)
    assert plan.space[0].low == 1e-4 and plan.space[0].high == 0.01 and plan.space[1].choices == (8,)
    for text in ("١e-4", "0x10", "1e5000", "inf", "--1"):
        refused({"space": {"lr": {"low": text, "high": "0.1"}}}, "sweep.space.lr.low", "not a number")


# --- the record ---

def test_a_record_keeps_its_plan_and_a_plan_edited_into_nonsense_is_unreadable():
    plan = plan_of()
    record = JobRecord(id="42", scheduler="slurm", user="alice", spec=parse(epochs=5),
                       submitted_at="2026-11-26T10:00:00", job_dir=Path("/home/alice/jobs/42"), sweep=plan)
    assert JobRecord.from_json(record.to_json()).sweep == plan
    data = json.loads(record.to_json())
    assert "sweep" not in json.loads(replace(record, sweep=None).to_json())
    data["sweep"]["space"] = {"lr": {"low": -1, "high": 2}}
    with pytest.raises(RecordError, match="sweep.space.lr.low"):
        JobRecord.from_json(json.dumps(data))
    data["sweep"] = "all of them"
    with pytest.raises(RecordError, match="sweep"):
        JobRecord.from_json(json.dumps(data))


# --- Slurm's tasks and the study's trials ---

def test_task_states_read_every_task_and_the_pending_rest_of_the_array():
    sacct = ("12_0|COMPLETED\n12_1|CANCELLED by 1000\n12_2|RUNNING\n12_[3-5,7%2]|PENDING\n13_6|RUNNING\n"
             "12_9|not a state\n12_x|FAILED\n12_8|NODE_FAIL\n")
    assert task_states(sacct, "12") == {0: "COMPLETED", 1: "CANCELLED", 2: "RUNNING", 3: "PENDING", 4: "PENDING",
                                        5: "PENDING", 7: "PENDING", 8: "NODE_FAIL"}
    assert task_states("12_[0-99999999]|PENDING", "12") == {t: "PENDING" for t in range(MAX_TRIALS + 1)}


@pytest.mark.parametrize("ended, outcome", [
    ({"COMPLETED"}, "COMPLETED"),
    ({"COMPLETED", "FAILED"}, "COMPLETED"),  # a failed trial among completed ones: the sweep found its best
    ({"PRUNED"}, "COMPLETED"),  # the study's word for a trial its pruner stopped: its task exits 0
    ({"COMPLETED", "CANCELLED"}, "CANCELLED"),  # cancelled part-way, even after trials completed
    ({"CANCELLED"}, "CANCELLED"),
    ({"FAILED", "TIMEOUT", "OUT_OF_MEMORY"}, "FAILED"),
    ({"NODE_FAIL"}, "FAILED"),
])
def test_a_sweeps_end_is_cancelled_when_any_task_was_then_completed_when_any_ran_to_its_end(ended, outcome):
    assert sweep_outcome(ended) == outcome


def status_text(*trials):
    return json.dumps({"trials": list(trials)})


def trial(number, task, state, params=None, value=None, epochs=None):
    return {"number": number, "task": task, "state": state, "params": params or {"lr": 1e-3}, "value": value,
            "epochs": epochs or {}}


def test_the_rows_take_the_studys_word_on_finished_trials_and_slurms_on_the_rest():
    plan = plan_of()
    trials = read_status(status_text(
        trial(0, 0, "COMPLETE", value=0.9, epochs={"1": 0.5, "2": 0.95, "3": 0.9}),
        trial(1, 1, "PRUNED", {"lr": 1e-8}, 0.4, {"1": 0.38, "2": 0.4}),
        trial(2, 2, "RUNNING", epochs={"1": 0.6}),
        trial(3, 3, "RUNNING", epochs={"1": 0.7}),
        trial(4, 4, "FAIL")), plan)
    view = sweep_view(plan, trials, {0: "COMPLETED", 1: "COMPLETED", 2: "RUNNING", 3: "CANCELLED", 4: "FAILED",
                                     5: "PENDING"})
    states = [row.state for row in view.rows]
    assert states == ["COMPLETED", "PRUNED", "RUNNING", "CANCELLED", "FAILED", "PENDING"]
    assert view.rows[1].pruned_at == 2 and view.rows[1].epochs_run == 2 and view.rows[0].pruned_at is None
    assert view.rows[0].best_auroc == 0.95 and view.rows[0].value == 0.9
    assert view.best is view.rows[0]  # a pruned trial is never the best
    assert view.counts() == {"COMPLETED": 1, "PRUNED": 1, "RUNNING": 1, "CANCELLED": 1, "FAILED": 1, "PENDING": 1}
    row = view.to_dict()["trials"][1]
    assert row == {"task": 1, "trial": 1, "state": "PRUNED", "params": {"lr": 1e-8}, "value": 0.4,
                   "best_auroc": 0.4, "epochs_run": 2, "pruned": True, "pruned_at": 2, "started_at": None,
                   "ended_at": None}
    requeued = sweep_view(plan, trials, {2: "PENDING"})
    assert requeued.rows[2].state == "PENDING"  # its node failed: Slurm runs it again, the trial goes on


def test_a_study_answer_of_the_users_making_is_read_field_by_field():
    plan = plan_of()
    with pytest.raises(SweepStatusError):
        read_status("[]", plan)
    with pytest.raises(SweepStatusError):
        read_status('{"trials": [NaN]}', plan)
    with pytest.raises(SweepStatusError):
        read_status("x" * (9 * 1024 * 1024), plan)
    found = read_status(status_text(
        trial(0, 0, "COMPLETE", {"lr": 1e-3, "evil": "<script>", "model": "m" * 1000}, 0.9),
        trial(1, 0, "COMPLETE"),  # a second trial claiming task 0: the first is kept
        trial(2, 99, "COMPLETE"),  # no such task
        trial(True, 1, "COMPLETE"), trial(3, 2, "HACKED"), "not a trial",
        {**trial(4, 3, "RUNNING"), "epochs": {"1": "high", "x": 0.5, "2": 0.7}, "value": "1.0"}), plan)
    assert set(found) == {0, 3}
    assert found[0]["params"] == {"lr": 1e-3}
    assert found[3]["epochs"] == {1: None, 2: 0.7} and found[3]["value"] is None


def test_best_is_the_completed_trial_with_the_highest_final_value_even_where_an_epoch_of_another_was_higher():
    plan = plan_of()
    trials = read_status(status_text(
        {**trial(0, 0, "COMPLETE", value=0.960, epochs={"1": 0.95, "2": 0.965, "3": 0.960}),
         "started": 1_700_000_000.5, "ended": 1_700_003_600.0},
        {**trial(1, 1, "COMPLETE", value=0.950, epochs={"1": 0.94, "2": 0.973, "3": 0.950}),
         "started": 1_700_000_010, "ended": 1_700_004_000},
        {**trial(2, 2, "PRUNED", value=0.990, epochs={"1": 0.99}), "started": "yesterday", "ended": -5},
        {**trial(3, 3, "RUNNING", epochs={"1": 0.5}), "started": float("1e300")}), plan)
    view = sweep_view(plan, trials, {3: "RUNNING"})
    assert view.best is view.rows[0]  # 0.960 final beats trial 1's 0.950, whose best epoch (0.973) was higher
    assert max(view.rows[:2], key=lambda row: row.best_auroc or 0) is view.rows[1]  # the two rankings differ
    assert (view.rows[0].started_at, view.rows[0].ended_at) == (1_700_000_000.5, 1_700_003_600.0)
    assert (view.rows[2].started_at, view.rows[2].ended_at) == (None, None)  # not a time: left out
    assert view.rows[3].started_at is None  # past any clock: nonsense
    shown = view.to_dict()
    assert shown["best"]["task"] == 0 and shown["objective"] == OBJECTIVE == "final mean AUROC"
    assert shown["best_by"] == BEST_BY and "Optuna maximises" in BEST_BY and "pruned" in BEST_BY


# --- the batch script ---

def test_a_sweep_is_one_job_array_throttled_to_its_parallel_and_each_task_attaches_to_its_trial():
    plan = plan_of()
    script = render_sbatch(parse(epochs=5), "/home/alice/jobs/%j", PortalConfig(), "gpu", plan)
    lines = sbatch_lines(script)
    assert lines["array"] == "0-5%2" and lines["job-name"] == "chexnet-sweep"
    assert lines["output"] == "/home/alice/jobs/%A/trial-%a.log"
    assert 'job_dir=/home/alice/jobs/"$SLURM_ARRAY_JOB_ID"' in script
    assert re.search(r'-m programkit.sweep_cli attach "\$job_dir" "\$task"', script)
    assert '--trial "$run_dir/trial.json"' in script and '-m programkit.sweep_cli fail "$job_dir" "$task"' in script
    bash_syntax_ok(script)
    single = render_sbatch(parse(epochs=5), "/home/alice/jobs/%j", PortalConfig(), "gpu")
    assert "array" not in sbatch_lines(single) and "programkit.sweep" not in single


def test_shell_path_names_the_arrays_id():
    assert shell_path("/home/a b/jobs/%A") == "'/home/a b/jobs/'\"$SLURM_ARRAY_JOB_ID\""


# --- the submit form ---

def posted(**fields):
    return {name: [value.encode()] for name, value in fields.items()}


def test_the_forms_sweep_fields_become_the_requests_sweep():
    spec = form_spec(posted(template="chexnet", epochs="3", kind="sweep", sweep_trials="6", sweep_parallel="2",
                            sweep_lr_low="1e-4", sweep_lr_high="1e-2", sweep_batch_size="8, 16,", sweep_model="",
                            sweep_pruner="hyperband", sweep_sampler="random", sweep_min_epochs="1"))
    assert spec["sweep"] == {"trials": "6", "parallel": "2", "sampler": "random", "pruner": "hyperband",
                             "min_epochs": "1", "space": {"lr": {"log": True, "low": "1e-4", "high": "1e-2"},
                                                          "batch_size": ["8", "16"]}}
    plan = parse_sweep(spec["sweep"], 3, LIMITS, 1)
    assert plan.pruner == "hyperband" and plan.space[1].choices == (8, 16)
    assert "sweep" not in form_spec(posted(template="chexnet", kind="single", sweep_trials="6"))
    with pytest.raises(ValueError, match="kind"):
        form_spec(posted(template="chexnet", kind="grid"))
    again = sweep_form_values({"sweep": plan.to_dict()})
    assert again["sweep_batch_size"] == "8, 16" and again["sweep_lr_low"] == "0.0001"
    assert sweep_form_values({})["sweep_trials"] == "8"
    assert sweep_form_field("sweep.space.lr.high") == "sweep_lr_high"
    assert sweep_form_field("sweep.space.batch_size[0]") == "sweep_batch_size" and sweep_form_field("epochs") == ""
