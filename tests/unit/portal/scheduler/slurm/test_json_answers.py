"""Slurm's answers as data (portal.scheduler.slurm.json_answers): the real answers of Slurm 22.05 and 24.11 (each of
its data_parser versions), the fields a user controls read as nothing but themselves in every version, and an answer
that is not Slurm's, or of a version without a reader, refused rather than guessed at."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.quota import array_claim
from portal.scheduler.cluster import duration_text, gpu_holders, users_jobs
from portal.scheduler.slurm.data_parsers import number as read_number
from portal.scheduler.slurm.json_answers import (
    SlurmAnswerError,
    data_parser_of,
    exit_code,
    read_sacct,
    read_squeue,
)
from tests.slurm_answers import (
    REAL_SACCT,
    REAL_SQUEUE,
    SLURM_22_05,
    SLURM_24_11,
    SLURM_26_05,
    STARTED,
    VERSIONS,
    exit_status,
    number,
    real_answer,
    real_squeue,
    sacct_json,
    sacct_run,
    squeue_job,
    squeue_json,
)

NOW = STARTED + 3723  # 1:02:03 after the jobs started
every_version = pytest.mark.parametrize("version", VERSIONS)


def test_the_real_squeue_answer():
    jobs = read_squeue(REAL_SQUEUE.read_text(), now=1_795_587_900)
    assert list(jobs) == ["1", "2", "3", "4"]
    forged, two_nodes, per_job, array = jobs.values()
    assert (forged.user, forged.uid, forged.state, forged.gpus) == ("root", 0, "CANCELLED", 0)
    assert forged.name.startswith("x\n900001|alice|RUNNING") and not forged.queued
    assert (two_nodes.state, two_nodes.nodes, two_nodes.gpus_per_node, two_nodes.gpus) == ("RUNNING", 2, 2, 4)
    assert (two_nodes.node_list, two_nodes.elapsed) == ("node[1-2]", "0:58")
    assert (per_job.state, per_job.reason, per_job.gpus_per_node, per_job.gpus) == ("PENDING", "Resources", 0, 3)
    assert (per_job.submitted, per_job.partition) == (1_795_587_841, "gpu")
    # sbatch --array=0-3%2 of 1 GPU each, none started: its pending entry claims what may start at once, 2 tasks
    assert (array.reason, array.gpus, array.elapsed) == ("Priority", 2, "0:00")
    assert "900001" not in jobs
    # What the pages show of it, read here once: the reason in words, and whether what holds its GPUs is worth naming
    assert (per_job.reason_words, per_job.waits_for_resources) == (
        "waiting for GPUs, CPUs or memory to free up (Slurm: Resources)", True)
    assert (two_nodes.reason_words, two_nodes.waits_for_resources, two_nodes.server) == ("", False, False)


def test_the_real_sacct_answer():
    runs = read_sacct(REAL_SACCT.read_text())
    assert [(r.job_id, r.user, r.state, r.gpus, r.nodes) for r in runs] == [
        ("1", "root", "CANCELLED", 0, "node1"), ("2", "root", "CANCELLED", 4, "node[1-2]"),
        ("3", "root", "CANCELLED", 0, ""), ("4", "root", "CANCELLED", 0, "")]  # Slurm's "None assigned"
    assert runs[1].start == datetime.fromtimestamp(1_795_587_842) and runs[2].start is None
    assert read_sacct(REAL_SACCT.read_text(), user="alice") == []  # sacct's -u is ignored: the reader keeps hers


# release: (its answers, its versions, its nodes' prefix)
RELEASES = {"22.05": (SLURM_22_05, ("v0.0.38",), "xnode"),
            "24.11": (SLURM_24_11, ("v0.0.40", "v0.0.41", "v0.0.42"), "vnode"),
            "26.05": (SLURM_26_05, ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"), "wnode")}


def real_answers(release: str, command: str) -> list[str]:
    path, versions, _ = RELEASES[release]
    return [(path / f"{command}-{version}.json").read_text() for version in versions]


def minute_after_start(release: str) -> int:
    """101 s after the captured jobs started (their start_time, in whichever shape the release writes it)."""
    answer = json.loads(real_answers(release, "squeue")[0])
    return 101 + next(read_number(job["start_time"]) for job in answer["jobs"] if job["name"] == "gpujob")


@pytest.mark.parametrize(("release", "version"), [(r, v) for r, (_, vs, _) in RELEASES.items() for v in vs])
def test_the_real_answers_of_each_release(release, version):
    """What 22.05.8, 24.11.5 and 26.05.3 answered about the same jobs (tests/capture_slurm_answers.py) in each of
    their versions: one-word states or lists of them, numbers or {set, infinite, number}, the exit code as a wait
    status or an object. From 23.11 squeue lists only the jobs that wait or run."""
    path, _, nodes = RELEASES[release]
    now = minute_after_start(release)
    captured = json.loads((path / "capture.json").read_text())["jobs"]
    named = {what.split(",")[0]: job_id for job_id, what in captured.items()}
    jobs = read_squeue((path / f"squeue-{version}.json").read_text(), now=now)
    two_nodes, array, held, requeued = (jobs[named[what]] for what in (
        "running on 2 nodes", "array of 4 one-GPU tasks", "held", "requeued while running"))
    assert (two_nodes.state, two_nodes.nodes, two_nodes.gpus_per_node, two_nodes.gpus) == ("RUNNING", 2, 1, 2)
    assert (two_nodes.node_list, two_nodes.elapsed, two_nodes.exit_code) == (f"{nodes}[1-2]", "1:41", "")
    assert (held.state, held.reason, held.gpus) == ("PENDING", "JobHeldUser", 1)  # --gpus=1: per job
    assert (held.reason_words, held.waits_for_resources) == ("the job is held (Slurm: JobHeldUser)", False)
    assert (requeued.state, requeued.reason, requeued.restarts) == ("PENDING", "BeginTime", 1)
    assert requeued.expected_start > now  # Slurm holds a requeued job back for a while
    # when each was submitted and where, whichever shape the release writes them in (the queue's waits)
    assert held.partition == "gpu" and 0 < held.submitted <= now
    # 0-3%2 with tasks 0 and 1 running: the pending rest may start none beside them
    assert (array.state, array.reason, array.gpus) == ("PENDING", "JobArrayTaskLimit", 0)
    tasks = [job for job in jobs.values() if job.name == "arr" and job.state == "RUNNING"]
    assert [job.gpus for job in tasks] == [1, 1]
    forged = next(job for job in jobs.values() if job.name.startswith("x\n900001"))
    assert (forged.user, forged.gpus, "900001" in jobs) == ("alice", 0, False)
    if release == "22.05":  # its squeue lists the jobs it remembers, ended ones too, with their exit codes
        ended = [jobs[named["completed"]], jobs[named["failed"]]]
        assert [(j.state, j.exit_code, j.queued) for j in ended] == [("COMPLETED", "0:0", False),
                                                                      ("FAILED", "3:0", False)]
    else:
        assert named["completed"] not in jobs and named["failed"] not in jobs
    runs = {run.job_id: run for run in read_sacct((path / f"sacct-{version}.json").read_text())}
    assert [(runs[named[w]].state, runs[named[w]].gpus) for w in ("completed", "failed", "running on 2 nodes",
                                                                  "requeued while running")] == [
        ("COMPLETED", 0), ("FAILED", 0), ("RUNNING", 2), ("REQUEUED", 0)]  # ["PENDING", "REQUEUED"]: 22.05's word
    assert runs[named["running on 2 nodes"]].end is None and runs[named["completed"]].end is not None


@pytest.mark.parametrize("release", RELEASES)
def test_every_version_of_the_same_jobs_reads_the_same(release):
    """A release's versions describe one queue: read, they are one list of QueuedJobs, and one list of runs."""
    now = minute_after_start(release)
    first, *others = (read_squeue(answer, now=now) for answer in real_answers(release, "squeue"))
    assert len(first) == (9 if release == "22.05" else 7) and all(other == first for other in others)
    sacct = [read_sacct(answer) for answer in real_answers(release, "sacct")]
    assert len(sacct[0]) == 7 and all(other == sacct[0] for other in sacct[1:])


@every_version
def test_a_users_jobs_are_hers_that_wait_or_run(version):
    v = {"version": version}
    jobs = read_squeue(squeue_json(
        squeue_job(1, "alice", gpus_per_node=1, **v), squeue_job(2, "bob", gpus_per_node=2, uid=10002, **v),
        squeue_job(3, "alice", "COMPLETED", gpus_per_node=4, end_time=number(version, STARTED + 60), **v),
        squeue_job(4, "alice", "PENDING", gpus_per_node=2, nodes=2, **v), **v), NOW)
    assert [job.id for job in users_jobs(jobs, "alice")] == ["1", "4"]
    holders = gpu_holders(users_jobs(jobs, "alice"))
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


@every_version
def test_a_week_without_jobs_is_no_jobs_not_an_error_and_any_other_error_is_one(version):
    """sacct --json answers a time without jobs with an error "Nothing found with query" (found on the Slurm box,
    2026-12-06: a user's Usage page and budget said accounting was unavailable)."""
    nothing = {"description": "Nothing found", "error_number": 9003, "error": "Nothing found with query",
               "source": "slurmdb_jobs_get"}
    answer = json.loads(sacct_json(version=version))
    assert read_sacct(json.dumps({**answer, "errors": [nothing], "jobs": []})) == []
    with pytest.raises(SlurmAnswerError, match="Unable to contact"):
        read_sacct(json.dumps({**answer, "errors": [nothing, {"error": "Unable to contact", "error_number": 1}]}))


@pytest.mark.parametrize("fields", [
    {"job_id": "12"}, {"job_id": -1}, {"job_id": True}, {"job_id": 1.5}, {"job_id": None},
    {"user_name": "alice\n12|bob"}, {"user_name": ""}, {"user_name": "al ice"}, {"user_name": 7},
    {"user_id": None}, {"user_id": "10001"}, {"job_state": "running"}, {"job_state": "RUNNING\nPENDING"},
    {"job_state": None}, {"job_state": ["running"]}, {"job_state": ["REQUEUED"]}, {"job_state": [["RUNNING"]]},
    {"job_state": {"current": "RUNNING"}}, {"job_state": []},
])
@every_version
def test_a_job_record_that_is_not_slurms_is_left_out(fields, version):
    jobs = read_squeue(squeue_json({**squeue_job(7, "alice", version=version), **fields},
                                   squeue_job(8, "alice", version=version), version=version), NOW)
    assert list(jobs) == ["8"]


@every_version
def test_one_record_per_job_id(version):
    jobs = read_squeue(squeue_json(squeue_job(7, "alice", gpus_per_node=1, version=version),
                                   squeue_job(7, "alice", gpus_per_node=4, name="second", version=version),
                                   version=version), NOW)
    assert (len(jobs), jobs["7"].gpus, jobs["7"].name) == (1, 1, "chexnet")


@every_version
def test_counts_that_are_not_whole_numbers_count_nothing(version):
    v = {"version": version}
    jobs = read_squeue(squeue_json(
        squeue_job(7, "alice", node_count=number(version, -2), tres_req_str="cpu=1,gres/gpu=1e9",
                   tres_per_node="gres:gpu:x", **v),
        squeue_job(8, "alice", start_time="yesterday", exit_code="0", **v),
        squeue_job(9, "alice", node_count=True, start_time={"set": True, "infinite": True, "number": 5},
                   end_time=[1], **v),
        squeue_job(10, "alice", node_count={"set": "yes", "infinite": False, "number": 2},
                   start_time={"set": True, "infinite": False, "number": 2.5}, **v), **v), NOW)
    assert (jobs["7"].nodes, jobs["7"].gpus, jobs["7"].gpus_per_node) == (0, 1, 0)
    assert jobs["8"].elapsed == "0:00" and jobs["8"].exit_code == ""
    assert (jobs["9"].nodes, jobs["9"].elapsed) == (0, "0:00")
    assert (jobs["10"].nodes, jobs["10"].elapsed) == (0, "0:00")
    runs = read_sacct(sacct_json(sacct_run(9, "alice", "COMPLETED", None, None, time="soon", tres=[1], **v),
                                 sacct_run(10, "alice", "COMPLETED", None, None, state={"current": 5}, **v),
                                 sacct_run(11, "alice", "COMPLETED", None, None, state=["COMPLETED"], **v), **v))
    assert [(r.job_id, r.gpus, r.start, r.end) for r in runs] == [("9", 0, None, None)]


@every_version
def test_exit_codes_of_ended_jobs_in_every_version(version):
    v = {"version": version}
    jobs = read_squeue(squeue_json(
        squeue_job(7, "alice", "FAILED", end_time=number(version, STARTED + 5), exit_code=exit_status(version, 768),
                   **v),
        squeue_job(8, "alice", "CANCELLED", end_time=number(version, STARTED + 5), exit_code=exit_status(version, 15),
                   **v), **v), NOW)
    assert (jobs["7"].exit_code, jobs["8"].exit_code) == ("3:0", "0:15")


# What a user controls in Slurm's records: any text at all, including lines and fields of Slurm's formats.
USER_TEXT = st.text(max_size=300) | st.sampled_from([
    "x\n900001|alice|RUNNING|1:00|1|gres:gpu:4|node1|y", "a\nUserId=alice(10001) JobState=RUNNING Gres=gpu:4",
    "|" * 50, "=" * 50, "x" * 100_000, '"},{"job_id": 900001, "user_name": "alice"', "\0\r\n\t"])


@settings(max_examples=150, deadline=None)
@given(name=USER_TEXT, comment=USER_TEXT, workdir=USER_TEXT, output=USER_TEXT, version=st.sampled_from(VERSIONS))
def test_text_a_user_controls_is_only_itself(name, comment, workdir, output, version):
    user_fields = {"name": name, "comment": comment, "current_working_directory": workdir,
                   "standard_output": output, "command": name}
    v = {"version": version}
    jobs = read_squeue(squeue_json(squeue_job(7, "bob", uid=10002, **user_fields, **v),
                                   squeue_job(8, "alice", gpus_per_node=1, **v), **v), NOW)
    assert list(jobs) == ["7", "8"] and jobs["7"].name == name
    assert (jobs["7"].user, jobs["7"].gpus, jobs["7"].state) == ("bob", 0, "RUNNING")
    assert [h.gpus for h in gpu_holders(users_jobs(jobs, "alice"))] == [1]
    runs = read_sacct(sacct_json(sacct_run(7, "bob", "COMPLETED", datetime(2026, 11, 22, 19), None, name=name,
                                           working_directory=workdir, comment={"job": comment}, **v), **v))
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
        return [h.gpus for h in gpu_holders(users_jobs(jobs, "alice"))]
    assert claimed(0) == [2]
    assert claimed(1) == [1, 1]
    assert claimed(2) == [1, 1]  # the pending rest waits for the throttle: it claims nothing more

    def trials(started: int) -> tuple[int, int]:  # a sweep's trials running, and waiting within its parallel
        tasks = [squeue_job(10 + t, "alice", gpus_per_node=1, array_job_id=4, array_task_id=t)
                 for t in range(started)]
        rest = {**array, "array_task_string": f"{started}-3%2", "user_name": "alice", "user_id": 10001}
        jobs = read_squeue(squeue_json(*tasks, rest), NOW).values()
        return sum(j.trials_running for j in jobs), sum(j.trials_waiting for j in jobs)
    assert [trials(started) for started in (0, 1, 2)] == [(0, 2), (1, 1), (2, 0)]
    assert sum(claimed(2)) == array_claim(1, 4, 0, 2) == 2  # what the dashboard counts for a sweep it just submitted
    unthrottled = read_squeue(squeue_json({**array, "array_task_string": "0-15:4", "array_max_tasks": 0}), NOW)
    assert (unthrottled["4"].gpus, unthrottled["4"].trials_waiting) == (4, 4)  # 0, 4, 8, 12: each may start
    odd = read_squeue(squeue_json({**array, "array_task_string": "x-3%2"}), NOW)
    assert odd["4"].gpus == 1  # not an array string of Slurm's: one task's, as Slurm's own entry says


def test_an_answer_names_its_format_and_another_version_is_refused_by_name():
    """Slurm 22.05 names its format in meta.plugin.type, 23.02 and later in meta.plugin.data_parser. A version this
    reader does not read (here 26.05.3's real answer relabelled v0.0.46, as a later Slurm may write it) is a clear
    error naming what it met and what it reads, never a queue without jobs."""
    assert data_parser_of(json.loads(REAL_SQUEUE.read_text())) == "v0.0.38"
    assert data_parser_of(json.loads(REAL_SACCT.read_text())) == "v0.0.38"  # "openapi/dbv0.0.38"
    assert [data_parser_of(real_answer("squeue", v)) for v in VERSIONS] == list(VERSIONS)
    newer = real_answer("squeue", "v0.0.45")
    newer["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.46"
    newer["meta"]["slurm"]["release"] = "26.11.0"
    assert data_parser_of(newer) == "v0.0.46"
    with pytest.raises(SlurmAnswerError) as refused:
        read_squeue(json.dumps(newer), NOW)
    assert str(refused.value) == (
        "squeue's answer is of data_parser v0.0.46, from Slurm 26.11.0; this portal reads v0.0.38 (Slurm 22.05), "
        "v0.0.40 (Slurm 23.11 to 25.11), v0.0.41 (Slurm 24.05 to 26.05), v0.0.42 (Slurm 24.11 to 26.11), "
        "v0.0.43 (Slurm 25.05 to 27.05), v0.0.44 (Slurm 25.11 on), v0.0.45 (Slurm 26.05 on)")
    with pytest.raises(SlurmAnswerError, match=r"sacct's answer is of data_parser v0\.0\.46"):
        read_sacct(json.dumps({**real_answer("sacct", "v0.0.45"), "meta": newer["meta"]}))
    for meta in ({}, {"plugin": {"type": "openapi/v0.0.38x"}}, {"plugin": {"data_parser": ["v0.0.38"]}}, None):
        unnamed = {**newer, "meta": meta}
        assert data_parser_of(unnamed) == ""
        with pytest.raises(SlurmAnswerError, match=r"of data_parser \(none named\)"):
            read_squeue(json.dumps(unnamed), NOW)


@pytest.mark.parametrize("version", VERSIONS)
def test_what_a_job_may_still_hold_is_its_gpus_times_what_is_left_of_its_time_limit(version):
    """What the weekly budget charges ahead (QueuedJob.gpu_minutes_ahead): a waiting job's whole time limit, a
    running one's rest (whole minutes run), nothing once it is past it or has no limit (UNLIMITED); a pending
    array's every task left, beyond its throttle too."""
    def job(job_id: int, state: str, gpus: int, limit: int | None, ran_s: int = 0, **fields) -> dict:
        return squeue_job(job_id, "alice", state, gpus_per_node=gpus, started=int(NOW) - ran_s, version=version,
                          time_limit=number(version, limit) if limit is not None else {"set": True, "infinite": True,
                                                                                        "number": 0}, **fields)
    unlimited = job(5, "PENDING", 1, None) if version != "v0.0.38" else job(5, "PENDING", 1, 0xFFFFFFFF)
    jobs = read_squeue(squeue_json(job(1, "PENDING", 2, 60, nodes=2), job(2, "RUNNING", 1, 60, ran_s=25 * 60 + 59),
                                   job(3, "RUNNING", 1, 30, ran_s=45 * 60), job(4, "COMPLETED", 4, 60, ran_s=60),
                                   unlimited, version=version), NOW)
    assert {key: j.gpu_minutes_ahead for key, j in jobs.items()} == {"1": 240, "2": 35, "3": 0, "4": 0, "5": 0}
    array = next(j for j in real_squeue()["jobs"] if j["name"] == "arr")  # 0-3%2 of one GPU each, a week each
    assert read_squeue(squeue_json(array), NOW)["4"].gpu_minutes_ahead == 4 * 10080  # every task left
