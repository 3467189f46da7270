"""Slurm's answers as data (portal.scheduler.slurm.json_answers): the real answers of Slurm 22.05, the fields a user
controls read as nothing but themselves, and an answer that is not Slurm's refused rather than guessed at."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.quota import array_claim
from portal.scheduler.cluster import duration_text, gpu_holders
from portal.scheduler.slurm.answers import SLURM_SERVERS
from portal.scheduler.slurm.json_answers import (
    SlurmAnswerError,
    data_parser_of,
    exit_code,
    read_sacct,
    read_squeue,
    users_jobs,
)
from tests.slurm_answers import (
    REAL_SACCT,
    REAL_SQUEUE,
    STARTED,
    real_squeue,
    sacct_json,
    sacct_run,
    squeue_job,
    squeue_json,
)

NOW = STARTED + 3723  # 1:02:03 after the jobs started


def test_the_real_squeue_answer():
    jobs = read_squeue(REAL_SQUEUE.read_text(), now=1_795_587_900)
    assert list(jobs) == ["1", "2", "3", "4"]
    forged, two_nodes, per_job, array = jobs.values()
    assert (forged.user, forged.uid, forged.state, forged.gpus) == ("root", 0, "CANCELLED", 0)
    assert forged.name.startswith("x\n900001|alice|RUNNING") and not forged.queued
    assert (two_nodes.state, two_nodes.nodes, two_nodes.gpus_per_node, two_nodes.gpus) == ("RUNNING", 2, 2, 4)
    assert (two_nodes.node_list, two_nodes.elapsed) == ("node[1-2]", "0:58")
    assert (per_job.state, per_job.reason, per_job.gpus_per_node, per_job.gpus) == ("PENDING", "Resources", 0, 3)
    # sbatch --array=0-3%2 of 1 GPU each, none started: its pending entry claims what may start at once, 2 tasks
    assert (array.reason, array.gpus, array.elapsed) == ("Priority", 2, "0:00")
    assert "900001" not in jobs


def test_the_real_sacct_answer():
    runs = read_sacct(REAL_SACCT.read_text())
    assert [(r.job_id, r.user, r.state, r.gpus, r.nodes) for r in runs] == [
        ("1", "root", "CANCELLED", 0, "node1"), ("2", "root", "CANCELLED", 4, "node[1-2]"),
        ("3", "root", "CANCELLED", 0, ""), ("4", "root", "CANCELLED", 0, "")]  # Slurm's "None assigned"
    assert runs[1].start == datetime.fromtimestamp(1_795_587_842) and runs[2].start is None
    assert read_sacct(REAL_SACCT.read_text(), user="alice") == []  # sacct's -u is ignored: the reader keeps hers


def test_a_users_jobs_are_hers_that_wait_or_run():
    jobs = read_squeue(squeue_json(
        squeue_job(1, "alice", gpus_per_node=1), squeue_job(2, "bob", gpus_per_node=2, uid=10002),
        squeue_job(3, "alice", "COMPLETED", gpus_per_node=4, end_time=STARTED + 60),
        squeue_job(4, "alice", "PENDING", gpus_per_node=2, nodes=2)), NOW)
    assert [job.id for job in users_jobs(jobs, "alice")] == ["1", "4"]
    holders = gpu_holders(users_jobs(jobs, "alice"), SLURM_SERVERS)
    assert [(h.describe(), h.gpus) for h in holders] == [("job 1", 1), ("job 4", 4)]
    assert jobs["3"].elapsed == "1:00" and jobs["1"].elapsed == "1:02:03"


@pytest.mark.parametrize(("status", "printed"), [(0, "0:0"), (768, "3:0"), (15, "0:15"), (256 + 9, "1:9")])
def test_exit_codes_as_slurm_prints_them(status, printed):
    assert exit_code(status) == printed


def test_durations_as_squeue_prints_them():
    assert [duration_text(s) for s in (-3, 5, 754, 3723, 93784)] == ["0:00", "0:05", "12:34", "1:02:03",
                                                                      "1-02:03:04"]


@pytest.mark.parametrize("answer", [
    "", "not json", "[]", "null", '{"jobs": {}}', '{"errors": [], "meta": {}}', "{" * 100_000,
    json.dumps({"errors": [{"error": "Unable to contact slurm controller", "errno": 1}], "jobs": []}),
])
def test_an_answer_that_is_not_slurms_is_an_error_not_an_empty_queue(answer):
    with pytest.raises(SlurmAnswerError):
        read_squeue(answer, NOW)
    with pytest.raises(SlurmAnswerError):
        read_sacct(answer)


@pytest.mark.parametrize("fields", [
    {"job_id": "12"}, {"job_id": -1}, {"job_id": True}, {"job_id": 1.5}, {"job_id": None},
    {"user_name": "alice\n12|bob"}, {"user_name": ""}, {"user_name": "al ice"}, {"user_name": 7},
    {"user_id": None}, {"user_id": "10001"}, {"job_state": "running"}, {"job_state": "RUNNING\nPENDING"},
    {"job_state": None},
])
def test_a_job_record_that_is_not_slurms_is_left_out(fields):
    jobs = read_squeue(squeue_json({**squeue_job(7, "alice"), **fields}, squeue_job(8, "alice")), NOW)
    assert list(jobs) == ["8"]


def test_one_record_per_job_id():
    jobs = read_squeue(squeue_json(squeue_job(7, "alice", gpus_per_node=1),
                                   squeue_job(7, "alice", gpus_per_node=4, name="second")), NOW)
    assert (len(jobs), jobs["7"].gpus, jobs["7"].name) == (1, 1, "chexnet")


def test_counts_that_are_not_whole_numbers_count_nothing():
    jobs = read_squeue(squeue_json(
        squeue_job(7, "alice", node_count=-2, tres_req_str="cpu=1,gres/gpu=1e9", tres_per_node="gres:gpu:x"),
        squeue_job(8, "alice", start_time="yesterday", exit_code="0")), NOW)
    assert (jobs["7"].nodes, jobs["7"].gpus, jobs["7"].gpus_per_node) == (0, 1, 0)
    assert jobs["8"].elapsed == "0:00"
    runs = read_sacct(sacct_json(sacct_run(9, "alice", "COMPLETED", None, None, time="soon", tres=[1])))
    assert (runs[0].gpus, runs[0].start, runs[0].end) == (0, None, None)


# What a user controls in Slurm's records: any text at all, including lines and fields of Slurm's formats.
USER_TEXT = st.text(max_size=300) | st.sampled_from([
    "x\n900001|alice|RUNNING|1:00|1|gres:gpu:4|node1|y", "a\nUserId=alice(10001) JobState=RUNNING Gres=gpu:4",
    "|" * 50, "=" * 50, "x" * 100_000, '"},{"job_id": 900001, "user_name": "alice"', "\0\r\n\t"])


@settings(max_examples=300, deadline=None)
@given(name=USER_TEXT, comment=USER_TEXT, workdir=USER_TEXT, output=USER_TEXT)
def test_text_a_user_controls_is_only_itself(name, comment, workdir, output):
    user_fields = {"name": name, "comment": comment, "current_working_directory": workdir,
                   "standard_output": output, "command": name}
    jobs = read_squeue(squeue_json(squeue_job(7, "bob", uid=10002, **user_fields),
                                   squeue_job(8, "alice", gpus_per_node=1)), NOW)
    assert list(jobs) == ["7", "8"] and jobs["7"].name == name
    assert (jobs["7"].user, jobs["7"].gpus, jobs["7"].state) == ("bob", 0, "RUNNING")
    assert [h.gpus for h in gpu_holders(users_jobs(jobs, "alice"), SLURM_SERVERS)] == [1]
    runs = read_sacct(sacct_json(sacct_run(7, "bob", "COMPLETED", datetime(2026, 11, 22, 19), None, name=name,
                                           working_directory=workdir, comment={"job": comment})))
    assert [(r.job_id, r.user, r.gpus, r.name) for r in runs] == [("7", "bob", 0, name)]


def test_a_pending_array_claims_what_may_start_beside_its_running_tasks():
    """One quota rule (portal.quota.array_claim) for Slurm's queue and the dashboard's own count: a sweep of 4
    trials, 2 at once, of 1 GPU each holds 2 GPUs however many of its tasks have started."""
    array = next(j for j in real_squeue()["jobs"] if j["name"] == "arr")  # Slurm's own entry for 0-3%2

    def claimed(started: int) -> list[int]:
        tasks = [squeue_job(10 + t, "alice", gpus_per_node=1, array_job_id=4, array_task_id=t)
                 for t in range(started)]
        rest = {**array, "array_task_string": f"{started}-3%2", "user_name": "alice", "user_id": 10001}
        jobs = read_squeue(squeue_json(*tasks, rest), NOW)
        return [h.gpus for h in gpu_holders(users_jobs(jobs, "alice"), SLURM_SERVERS)]
    assert claimed(0) == [2]
    assert claimed(1) == [1, 1]
    assert claimed(2) == [1, 1]  # the pending rest waits for the throttle: it claims nothing more
    assert sum(claimed(2)) == array_claim(1, 4, 0, 2) == 2  # what the dashboard counts for a sweep it just submitted
    unthrottled = read_squeue(squeue_json({**array, "array_task_string": "0-15:4", "array_max_tasks": 0}), NOW)
    assert unthrottled["4"].gpus == 4  # 0, 4, 8, 12: every pending task may start
    odd = read_squeue(squeue_json({**array, "array_task_string": "x-3%2"}), NOW)
    assert odd["4"].gpus == 1  # not an array string of Slurm's: one task's, as Slurm's own entry says


def test_an_answer_names_its_format_and_another_version_is_refused_by_name():
    """Slurm 22.05 names its format in meta.plugin.type; 23.02 and later in meta.plugin.data_parser (the shape of
    24.11.5's `meta`, from its data_parser v0.0.42 OPENAPI_META). A version this reader does not read is a clear
    error naming what it met and what it reads, never a queue without jobs."""
    assert data_parser_of(json.loads(REAL_SQUEUE.read_text())) == "v0.0.38"
    assert data_parser_of(json.loads(REAL_SACCT.read_text())) == "v0.0.38"  # "openapi/dbv0.0.38"
    newer = json.loads(squeue_json(squeue_job(8, "alice", gpus_per_node=1)))
    newer["meta"] = {"plugin": {"type": "", "name": "", "data_parser": "data_parser/v0.0.42",
                                "accounting_storage": "accounting_storage/slurmdbd"},
                     "client": {"source": "/dev/pts/0", "user": "alice", "group": "users"}, "command": ["squeue"],
                     "slurm": {"version": {"major": "24", "micro": "5", "minor": "11"}, "release": "24.11.5",
                               "cluster": "dsportal"}}
    assert data_parser_of(newer) == "v0.0.42"
    with pytest.raises(SlurmAnswerError) as refused:
        read_squeue(json.dumps(newer), NOW)
    assert str(refused.value) == ("squeue's answer is of data_parser v0.0.42, from Slurm 24.11.5; this portal reads "
                                  "v0.0.38 (Slurm 22.05)")
    with pytest.raises(SlurmAnswerError, match=r"sacct's answer is of data_parser v0\.0\.42"):
        read_sacct(json.dumps(newer))
    for meta in ({}, {"plugin": {"type": "openapi/v0.0.38x"}}, {"plugin": {"data_parser": ["v0.0.38"]}}, None):
        unnamed = {**newer, "meta": meta}
        assert data_parser_of(unnamed) == ""
        with pytest.raises(SlurmAnswerError, match=r"of data_parser \(none named\)"):
            read_squeue(json.dumps(unnamed), NOW)
