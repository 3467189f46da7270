"""The experiments page's runs, filters and comparison (portal.service.experiments, experiment_filters, comparison,
run_labels), pure: rows and records in, what the page and the API show out."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest

from portal.inputs import InputError
from portal.service.comparison import compare, lineage, metric_summary, wall_time
from portal.service.experiment_filters import matches, parse_filter
from portal.service.experiments import MAX_COMPARED, Run, RunId, parse_run_ids, runs_of_job
from portal.service.run_labels import MAX_LABELLED, RunLabels, checked_label
from tests.cards import a_card


def row(job_id="42", sweep=None, **spec):
    return {"id": job_id, "user": "alice", "scheduler": "slurm", "state": "COMPLETED", "nodes": 1, "gpus_per_node": 2,
            "submitted_at": "2026-03-04T10:00:00+00:00", "best_mean_auroc": 0.8, "sweep": sweep,
            "spec": {"template": "chexnet", "batch_size": 16, "lr": 0.001, "mail": True, **spec},
            "links": {"page": f"/services/portal/jobs/{job_id}"}}


def epoch(n, mean, loss, rate=100.0, seconds=60.0, **classes):
    return {"epoch": n, "logdir": "/l", "images_per_sec": rate, "seconds": seconds,
            "scalars": {"auroc/mean": mean, "loss/val": loss, **{f"auroc/{k}": v for k, v in classes.items()}}}


def run(job_id="42", task=None, params=None, epochs=(), card=None, **more):
    return Run(id=RunId(job_id, task), owner="alice", scheduler="slurm", program="chexnet", state="COMPLETED",
               submitted_at="2026-03-04T10:00:00+00:00", params=params or {"lr": 0.001, "batch_size": 16}, gpus=2,
               epochs={e["epoch"]: e for e in epochs}, card=card, **more)


def test_run_ids_are_jobs_or_a_sweeps_tasks_each_once_and_anything_else_a_400_naming_runs():
    assert parse_run_ids("42, 43,50:1,42") == [RunId("42"), RunId("43"), RunId("50", 1)]
    assert parse_run_ids("k8s-20261127-101010-4f1786:0") == [RunId("k8s-20261127-101010-4f1786", 0)]
    for bad in ("", "../bob", "42:", "42:-1", "042", "42:1:2", "x" * 5000, ",".join(map(str, range(1, 20))),
                "42:99999", "<script>"):
        with pytest.raises(InputError) as raised:
            parse_run_ids(bad)
        assert raised.value.field == "runs"
    assert len(parse_run_ids(",".join(str(i) for i in range(1, MAX_COMPARED + 1)))) == MAX_COMPARED


def test_a_single_job_is_one_run_and_a_sweep_one_per_task_with_its_trials_params():
    [single] = runs_of_job(row(), None, "dsportal/42")
    assert single.id == RunId("42") and single.params == {"template": "chexnet", "batch_size": 16, "lr": 0.001}
    assert single.gpus == 2 and single.run_prefix == "dsportal/42" and single.label == "job 42"
    sweep = {"trials": [{"task": 0, "trial": 3, "state": "COMPLETED", "params": {"lr": 0.01}, "best_auroc": 0.9,
                         "started_at": 100.0, "ended_at": 700.0},
                        {"task": 1, "state": "PRUNED", "params": {"lr": 1e-5}, "best_auroc": 0.4}]}
    trials = runs_of_job(row("50", sweep={"trials": 2}), sweep, "dsportal/50")
    assert [(str(t.id), t.params["lr"], t.state, t.sweep_of) for t in trials] == [
        ("50:0", 0.01, "COMPLETED", "50"), ("50:1", 1e-5, "PRUNED", "50")]
    assert trials[0].run_prefix == "dsportal/50/tensorboard/trial-3"
    assert trials[1].links["log"].endswith("/jobs/50/log?task=1")
    unread = runs_of_job(row("51", sweep={"trials": 2}), None)
    assert [(str(t.id), t.state) for t in unread] == [("51:0", "PENDING"), ("51:1", "PENDING")]
    assert runs_of_job({**row(), "spec": {}}, None) == []  # an unreadable record is no run


def test_filters_by_text_tag_state_program_dates_and_hyperparameters():
    a = run("42", params={"lr": 0.0005, "batch_size": 16, "model": "densenet121", "fp16": True})
    a = a.labelled("baseline", ["paper", "v1"])
    b = dataclasses.replace(run("43", params={"lr": 0.01, "batch_size": 32, "model": "resnet50"}), state="FAILED",
                            submitted_at="2026-03-09T10:00:00+00:00", program="chexnet-torch")

    def kept(**args):
        return [str(r.id) for r in (a, b) if matches(r, parse_filter(args))]
    assert kept() == ["42", "43"]
    assert kept(q="BASE") == ["42"] and kept(q="43") == ["43"] and kept(tag="v1") == ["42"]
    assert kept(state="FAILED") == ["43"] and kept(program="chexnet-torch") == ["43"]
    assert kept(since="2026-03-05") == ["43"] and kept(until="2026-03-04") == ["42"]
    assert kept(where="lr<0.001") == ["42"] and kept(where="batch_size=32") == ["43"]
    assert kept(where="model=resnet50, lr>=0.01") == ["43"] and kept(where="fp16=true") == ["42"]
    assert kept(where="missing=1") == [] and kept(where="missing!=1") == ["42", "43"]


@pytest.mark.parametrize("args, field", [
    ({"where": "lr<<1"}, "where"), ({"where": "lr<abc"}, "where"), ({"where": "x" * 500}, "where"),
    ({"where": ",".join(f"a{i}=1" for i in range(11))}, "where"), ({"where": "lr=1;rm"}, "where"),
    ({"since": "2026-13-01"}, "since"), ({"until": "yesterday"}, "until"),
    ({"since": "2026-03-05", "until": "2026-03-01"}, "until"), ({"state": "running"}, "state"),
    ({"tag": "Not A Tag"}, "tag"), ({"program": "../x"}, "program"), ({"q": "a\x00b"}, "q"), ({"q": "q" * 81}, "q"),
])
def test_a_filter_that_is_not_one_is_refused_naming_its_argument(args, field):
    with pytest.raises(InputError) as raised:
        parse_filter(args)
    assert raised.value.field == field and "allowed" in raised.value.message


def test_best_and_final_with_their_epochs_more_or_less_being_better():
    r = run(epochs=[epoch(1, 0.6, 0.5), epoch(2, 0.8, 0.3), epoch(3, 0.8, 0.35), epoch(4, 0.7, 0.31)])
    assert metric_summary(r, "auroc/mean", True) == {"best": 0.8, "best_epoch": 2, "final": 0.7, "final_epoch": 4,
                                                     "note": ""}
    assert metric_summary(r, "loss/val", False)["best_epoch"] == 2
    assert metric_summary(run(), "auroc/mean", True)["note"] == "no epoch recorded yet"
    assert metric_summary(run(epochs_problem="its per-epoch record is not read: a fifo, not a regular file"),
                          "loss/val", False)["note"].endswith("not a regular file")


def test_wall_time_and_gpu_hours_from_a_trials_times_or_the_epochs_and_else_why_not():
    assert wall_time(run(started_at=0.0, ended_at=1800.0)) | {"note": ""} == {
        "seconds": 1800.0, "text": "30:00", "gpu_hours": 1.0, "note": ""}
    summed = wall_time(run(epochs=[epoch(1, 0.5, 0.4, seconds=900.0), epoch(2, 0.6, 0.3, seconds=900.0)]))
    assert summed["gpu_hours"] == 1.0 and summed["note"] == "the sum of its 2 epochs' times"
    assert wall_time(run(epochs=[epoch(1, 0.5, 0.4, seconds=8.0)]))["note"] == "its one epoch's time"
    assert wall_time(run())["note"] == "not known: no epoch recorded yet"
    assert wall_time(dataclasses.replace(run(), state="PENDING"))["note"] == "not known: not started yet"


def test_the_comparison_shows_differing_hyperparameters_unless_all_are_asked_and_the_lineage_differences():
    other = a_card()
    other["data"]["patient_split_sha256"] = "cd" * 32
    other["code"]["git_commit"] = "feedbeef"
    a = run("42", params={"lr": 0.001, "batch_size": 16, "model": "densenet121"}, card=a_card(),
            epochs=[epoch(1, 0.7, 0.4, Cardiomegaly=0.9)])
    b = run("50", 1, params={"lr": 0.01, "batch_size": 16, "model": "densenet121"}, card=other,
            epochs=[epoch(1, 0.75, 0.35, Cardiomegaly=0.92)])
    c = run("43", params={"lr": 0.001, "batch_size": 16}, card_problem="model_card.json of job 43: card: not JSON")
    shown = compare([a, b, c])
    assert [h["name"] for h in shown["hyperparameters"]] == ["lr", "model"]
    assert shown["hyperparameters"][1]["text"] == ["densenet121", "densenet121", "not set"]
    assert {h["name"] for h in compare([a, b, c], every_param=True)["hyperparameters"]} == {"lr", "batch_size",
                                                                                            "model"}
    assert shown["lineage_differences"] == ["git commit", "patient split (sha256)"]
    assert shown["runs"][2]["lineage"]["note"].startswith("its model card is unreadable: ")
    assert lineage(run())["note"].startswith("no model card yet")
    cardio = next(r for r in shown["per_class_auroc"] if r["class"] == "Cardiomegaly")
    assert cardio["paper"] == 0.9248 and cardio["runs"] == [0.9, 0.92, None]
    assert shown["per_class_auroc"][-1]["class"] == "Mean"
    assert shown["series"]["auroc/mean"][1] == {"run": "50:1", "label": "sweep 50, task 1", "points": [(1, 0.75)]}


def test_a_hyperparameter_a_job_left_to_its_default_shows_the_value_it_ran_with_from_its_card():
    card = a_card()
    card["spec"] = {**card.get("spec", {}), "lr": 0.001}
    single = run("42", params={"batch_size": 8}, card=card)
    uncarded = run("43", params={"batch_size": 4})
    trial = run("50", 0, params={"batch_size": 8, "lr": 0.00558})
    rows = {h["name"]: h for h in compare([single, uncarded, trial])["hyperparameters"]}
    assert rows["lr"]["text"] == ["0.001 (default)", "not set", "0.00558"] and rows["lr"]["differs"]
    assert rows["lr"]["values"] == [0.001, None, 0.00558]


def test_names_and_tags_are_checked_kept_per_owner_and_read_back_checked(tmp_path):
    store = RunLabels(tmp_path / "state" / "labels.sqlite3")
    assert store.of("alice") == {}
    key = RunLabels.key("42", "2026-03-04T10:00:00+00:00", None)
    assert store.set("alice", key, "baseline run", "paper, v1 v1") == {"name": "baseline run", "tags": ["paper", "v1"]}
    assert store.of("alice") == {key: ("baseline run", ("paper", "v1"))} and store.of("bob") == {}
    assert store.apply("alice", [run()])[0].tags == ("paper", "v1")
    for name, tags, field in (("a\nb", [], "name"), ("x" * 81, [], "name"), ("", ["UPPER"], "tags"),
                              ("", ["-x"], "tags"), ("", [f"t{i}" for i in range(9)], "tags"), (5, [], "name"),
                              ("", {"a": 1}, "tags"), ("", [3], "tags")):
        with pytest.raises(InputError) as raised:
            checked_label(name, tags)
        assert raised.value.field == field
    store.set("alice", key, "", [])  # cleared
    assert store.of("alice") == {}
    with sqlite3.connect(store.path) as db:  # a row the dashboard did not write is skipped
        db.execute("INSERT INTO labels VALUES ('alice', '43', 's', -1, 'ok', '[\"BAD TAG\"]')")
    assert store.of("alice") == {}
    assert MAX_LABELLED >= 1000
