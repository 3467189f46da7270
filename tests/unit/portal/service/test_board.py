"""The board's caches with fakes: records kept and rescanned in the background, concurrent first loads
coalesced, states and metrics asked once, a job Slurm says is someone else's left out."""

from __future__ import annotations

import json
import threading
import time

import pytest

from portal.config import PortalConfig
from portal.jobs import JobNotFound, RunMetrics, UnreadableJob
from portal.service.background import REFRESH_WORKERS
from portal.service.board import (
    Coalescer,
    JobBoard,
    Refresher,
    SubmitInProgress,
    jobs_dir_stamp,
)
from portal.service.hub_user import HubUser
from portal.service.scans import DirStamp
from portal.service.summary import time_left_s, unreadable_summary
from tests.unit.helpers import CountingAPI, slurm_cache, squeue_free, write_tf1_events

ALICE = HubUser("alice", ("datascientists",))


def make_board(tmp_path, now, dir_stamp=lambda user: None):
    """A board on fakes; `dir_stamp` None: no change signal, so ~/jobs is listed again every rescan_s."""
    api = CountingAPI(tmp_path)
    board = JobBoard(PortalConfig(), slurm_cache(PortalConfig(), squeue_free, clock=lambda: now[0]),
                     api=api, rescan_s=10, refresher=Refresher(execute=lambda task: task()), clock=lambda: now[0],
                     dir_stamp=dir_stamp)
    return api, board


def test_records_are_read_once_and_rescanned_only_after_the_interval(tmp_path):
    now = [0.0]
    api, board = make_board(tmp_path, now)
    api.add("alice", "7", "RUNNING")
    api.add("alice", "9", "COMPLETED")
    for _ in range(5):
        assert [j["id"] for j in board.job_rows(ALICE)] == ["9", "7"]
    assert (api.entries_asked, sorted(api.loaded)) == (1, ["7", "9"])
    api.add("alice", "11", "PENDING", second=59)  # submitted from a notebook
    now[0] = 11
    board.job_rows(ALICE)  # due: rescanned (inline here; in the service, in the background)
    assert [j["id"] for j in board.job_rows(ALICE)] == ["11", "9", "7"]
    assert (api.entries_asked, sorted(api.loaded)) == (2, ["11", "7", "9"])  # only the new job.json read


def test_an_ended_jobs_state_is_asked_once_a_queued_ones_never(tmp_path):
    now = [0.0]
    api, board = make_board(tmp_path, now)
    api.add("alice", "7", "RUNNING")  # in the fake squeue
    api.add("alice", "9", "COMPLETED")
    for step in range(5):
        now[0] = step * 3.0
        board.job_rows(ALICE)
    assert api.fake_scheduler.asked == ["9"]


def test_a_job_slurm_says_is_someone_elses_is_left_out(tmp_path):
    now = [0.0]
    api, board = make_board(tmp_path, now)
    api.add("alice", "9", "COMPLETED")
    api.add("alice", "12", "COMPLETED")

    def state(record, user):
        if record.id == "12":
            raise JobNotFound("job 12: not found among alice's jobs")
        return "COMPLETED"
    api.fake_scheduler.state = state
    assert [j["id"] for j in board.job_rows(ALICE)] == ["9"]


def test_a_submitted_job_is_listed_at_once(tmp_path):
    now = [0.0]
    api, board = make_board(tmp_path, now)
    board.job_rows(ALICE)
    job = board.submit(ALICE, {"gpus_per_node": 0})
    assert job["id"] in [j["id"] for j in board.job_rows(ALICE)] and api.entries_asked == 1


def test_the_list_never_waits_for_metrics(tmp_path):
    now = [0.0]
    api, board = make_board(tmp_path, now)
    api.add("alice", "9", "COMPLETED")
    later: list = []
    board._refresher = Refresher(execute=later.append)  # background work held back
    assert board.job_rows(ALICE)[0]["best_mean_auroc"] is None and len(later) == 1
    board.job_rows(ALICE)
    assert len(later) == 1  # one read per job in flight, however many requests ask


def test_concurrent_calls_for_one_key_share_one_run():
    coalescer = Coalescer()
    release = threading.Event()
    results = []

    def slow():
        release.wait(5)
        return "scanned"

    threads = [threading.Thread(target=lambda: results.append(coalescer.run("alice", slow))) for _ in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    release.set()
    for thread in threads:
        thread.join(5)
    assert results == ["scanned"] * 8 and coalescer.runs == 1
    assert coalescer.run("alice", lambda: "again") == "again" and coalescer.runs == 2


def test_an_error_reaches_every_waiter_and_is_not_kept():
    coalescer = Coalescer()

    def broken():
        raise JobNotFound("gone")
    for _ in range(2):
        try:
            coalescer.run("k", broken)
        except JobNotFound:
            pass
        else:
            raise AssertionError("the error was swallowed")
    assert coalescer.run("k", lambda: 1) == 1


def test_the_refresher_runs_one_task_per_key_at_once():
    held: list = []
    refresher = Refresher(execute=held.append)
    assert refresher.start("k", lambda: None) and not refresher.start("k", lambda: None)
    held.pop()()  # the task ends
    assert refresher.start("k", lambda: None)


def test_a_user_has_one_background_task_at_once_and_others_are_not_held_up():
    held: list = []
    refresher = Refresher(execute=held.append)
    assert refresher.start(("metrics", "bob", "7"), lambda: None, owner="bob")  # bob's slow file: a worker
    assert not refresher.start(("metrics", "bob", "8"), lambda: None, owner="bob")  # not a second one
    assert not refresher.start(("scan", "bob"), lambda: None, owner="bob")
    assert refresher.start(("metrics", "alice", "9"), lambda: None, owner="alice")  # alice's starts
    held.pop(0)()  # bob's ends
    assert refresher.start(("metrics", "bob", "8"), lambda: None, owner="bob")


def stamp(fields, changed_s, read_s):
    return DirStamp(fields, int(changed_s * 1e9), int(read_s * 1e9))


def test_an_unchanged_home_is_not_listed_again(tmp_path):
    now, stamps = [0.0], [stamp((1, 2, 3), 100, 200)]
    api, board = make_board(tmp_path, now, dir_stamp=lambda user: stamps[0])
    api.add("alice", "9", "COMPLETED")
    board.job_rows(ALICE)
    for step in range(1, 4):
        now[0] = step * 11.0
        board.job_rows(ALICE)
    assert api.entries_asked == 1  # ~/jobs the same: no process run as alice
    stamps[0] = stamp((1, 2, 4), 240, 250)  # a job directory made from a notebook
    api.add("alice", "11", "PENDING", second=59)
    now[0] = 50.0
    board.job_rows(ALICE)
    assert api.entries_asked == 2 and [j["id"] for j in board.job_rows(ALICE)][0] == "11"


def test_a_stamp_read_in_the_same_second_as_a_change_is_not_trusted(tmp_path):
    now = [0.0]
    racy = stamp((1, 2, 3), 199.5, 200)  # a change in the same tick could follow unseen
    api, board = make_board(tmp_path, now, dir_stamp=lambda user: racy)
    board.job_rows(ALICE)
    now[0] = 11.0
    board.job_rows(ALICE)
    assert api.entries_asked == 2
    assert not racy.same_as(racy) and stamp((1,), 1, 5).same_as(stamp((1,), 1, 9))
    assert not stamp((1,), 1, 5).same_as(None)


def test_the_stamp_reads_the_home_its_jobs_dir_and_the_clusters_without_following_links(tmp_path, monkeypatch):
    found = jobs_dir_stamp("root", "dsportal")
    assert found is not None and len(found.fields) == 9 and found.read_at_ns > found.newest_change_ns
    assert jobs_dir_stamp("no-such-user-here", "dsportal") is None
    # A job made in the cluster's directory changes the stamp; one made in another cluster's does not.
    home = tmp_path / "home"
    (home / "jobs" / "dsportal").mkdir(parents=True)
    (home / "jobs" / "other").mkdir()
    monkeypatch.setattr("portal.service.scans.pwd.getpwnam", lambda name: type("Entry", (), {"pw_dir": str(home)}))
    before = jobs_dir_stamp("alice", "dsportal")
    (home / "jobs" / "other" / "7").mkdir()
    assert jobs_dir_stamp("alice", "dsportal").fields == before.fields
    (home / "jobs" / "dsportal" / "7").mkdir()
    assert jobs_dir_stamp("alice", "dsportal").fields != before.fields


def test_a_submitted_job_is_pending_without_asking_until_a_squeue_asked_after_it(tmp_path):
    now = [0.0]
    api, board = make_board(tmp_path, now)
    board.job_rows(ALICE)  # the shared answer, asked at 0
    now[0] = 0.5
    job = board.submit(ALICE, {"gpus_per_node": 0})
    assert job["state"] == "PENDING" and api.fake_scheduler.asked == []
    now[0] = 1.0
    assert [j["state"] for j in board.job_rows(ALICE) if j["id"] == job["id"]] == ["PENDING"]
    assert api.fake_scheduler.asked == []  # the answer from before the submit cannot show it: not asked for
    now[0] = 3.0  # a new answer, asked after the submit, does not show it: now Slurm is asked
    board.job_rows(ALICE)
    assert api.fake_scheduler.asked == [job["id"]]


def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true"
        time.sleep(0.01)


def test_two_racing_submits_of_one_user_are_one_quota_decision_after_the_other(tmp_path):
    """Alice holds 2 of her 4 GPUs and sends two submits of 2 GPUs at once (issue 25: both were accepted). The
    second is refused while the first is being decided; sent again, it is checked against the first's GPUs. Bob's
    submit goes on beside hers."""
    now = [0.0]
    api, board = make_board(tmp_path, now)
    alice, bob = HubUser("alice", ("datascientists", "gpu-users")), HubUser("bob", ("datascientists", "gpu-users"))
    api.add("alice", "7", "RUNNING")  # 2 GPUs in the fake squeue
    api.submits_held = threading.Event()
    first = threading.Thread(target=board.submit, args=(alice, {"gpus_per_node": 2}))
    first.start()
    wait_until(lambda: api.submitting == 1)
    with pytest.raises(SubmitInProgress, match="alice's previous submit is still being decided"):
        board.submit(alice, {"gpus_per_node": 2})
    other = threading.Thread(target=board.submit, args=(bob, {"gpus_per_node": 1}))
    other.start()
    wait_until(lambda: api.submitting == 2)  # bob's submit is under way beside alice's
    api.submits_held.set()
    for thread in (first, other):
        thread.join(10)
    api.submits_held = None
    board.submit(alice, {"gpus_per_node": 2})
    alices = [limits for limits in api.limits_given if limits.quota.described()[:1] == ("job 7",)]
    assert [limits.quota.in_use for limits in alices] == [2, 4]  # the one sent again saw the first's 2 GPUs


def test_limits_come_from_the_shared_answer_with_this_services_submits_and_cancels(tmp_path):
    now = [0.0]
    api, board = make_board(tmp_path, now)
    gpu_user = HubUser("alice", ("datascientists", "gpu-users"))
    api.add("alice", "7", "RUNNING")  # 2 GPUs in the fake squeue
    before = board.limits_now(gpu_user)
    assert (before.partition, before.nodes, before.gpus_per_node, before.cpus_per_node) == ("gpu", 1, 4, 8)
    assert (before.quota.limit, before.quota.in_use, before.quota.described()) == (4, 2, ("job 7",))
    now[0] = 0.5
    job = board.submit(gpu_user, {"gpus_per_node": 2})
    assert api.limits_given == [before]  # what the submit was checked against; no command as alice
    after = board.limits_now(gpu_user)
    assert (after.quota.in_use, after.quota.described()) == (4, ("job 7", f"job {job['id']}"))  # the fake's 2 GPUs
    board.cancel(gpu_user, "7")
    assert board.limits_now(gpu_user).quota.described() == (f"job {job['id']}",)
    now[0] = 3.0  # an answer asked after both: it alone counts (the fake squeue still lists job 7)
    assert board.limits_now(gpu_user).quota.described() == ("job 7",)
    assert board.limits_now(HubUser("bob", ("datascientists",))).quota.in_use == 0


def test_a_cancel_refused_on_a_kept_record_answers_from_the_record_as_it_is_now(tmp_path):
    now = [0.0]
    api, board = make_board(tmp_path, now)
    api.add("alice", "9", "RUNNING")
    board.job_rows(ALICE)  # job 9's record is kept
    api.owned["alice"].clear()  # its directory is gone; Slurm now says job 9 is not hers

    def refused(record, user):
        raise JobNotFound(f"job {record.id}: not in Slurm's queue for alice")
    api.fake_scheduler.cancel = refused
    with pytest.raises(JobNotFound) as err:
        board.cancel(ALICE, "9")
    assert str(err.value) == "job 9: not found among alice's jobs"  # as any job that does not exist


def test_a_stop_drops_the_queued_background_reads_and_lets_the_running_finish():
    refresher = Refresher()
    release, running, ran = threading.Event(), threading.Semaphore(0), []

    def slow() -> None:
        running.release()
        release.wait(10)
        ran.append("slow")
    for i in range(REFRESH_WORKERS):
        refresher.start(("slow", i), slow)
    for _ in range(REFRESH_WORKERS):
        assert running.acquire(timeout=10)  # every worker is busy: what comes next queues
    for i in range(20):
        refresher.start(("queued", i), lambda i=i: ran.append(i))
    refresher.stop()
    release.set()
    refresher._pool.shutdown(wait=True)
    assert ran == ["slow"] * REFRESH_WORKERS  # the queued 20 never ran: a stop waits for the running only


def test_the_submit_form_offers_the_limits_a_submit_is_checked_against_without_asking_as_the_user(tmp_path):
    now = [0.0]
    api, board = make_board(tmp_path, now)

    def as_the_user(*_, **__):
        raise AssertionError("three Slurm commands as the user for a form")
    api.limits = as_the_user
    gpu_user = HubUser("alice", ("datascientists", "gpu-users"))
    assert board.limits(gpu_user) == board.limits_now(gpu_user) and board.limits(gpu_user).quota.limit == 4


# --- what a row shows of a run's progress (issue 14), from real event files in the job's logdir ---


def test_a_running_jobs_row_has_its_series_pace_and_time_left_and_an_ended_ones_no_time_left(tmp_path):
    now = [0.0]
    api, board = make_board(tmp_path, now)
    running, ended = api.add("alice", "7", "RUNNING"), api.add("alice", "9", "COMPLETED")  # 7: in the squeue
    for job in (running, ended):  # two of five epochs, 90 s apart
        write_tf1_events(job.record.logdir, {1: (1000.0, 40.0, 0.5), 2: (1090.0, 44.0, 0.75)})
    row = board.summary(running)
    assert (row["state"], row["epochs"], row["epochs_done"], row["epoch_seconds"]) == ("RUNNING", 5, 2, 90.0)
    assert row["series"] == {"images_per_sec": [40.0, 44.0], "mean_auroc": [0.5, 0.75]}  # float32-exact
    assert row["time_left_s"] == 3 * 90.0 and json.loads(json.dumps(row)) == row
    done = board.summary(ended)
    assert (done["state"], done["time_left_s"], done["series"]["images_per_sec"]) == ("COMPLETED", None, [40.0, 44.0])


def test_a_broken_records_row_has_the_same_keys_with_nothing_in_them(tmp_path):
    api, board = make_board(tmp_path, [0.0])
    broken = unreadable_summary(UnreadableJob("5", "alice", str(tmp_path), "not JSON"))
    assert broken.keys() == board.summary(api.add("alice", "9")).keys()
    assert (broken["series"], broken["epochs"], broken["time_left_s"]) == (
        {"images_per_sec": [], "mean_auroc": []}, None, None)


@pytest.mark.parametrize("state, done, pace, left", [
    ("RUNNING", 2, 60.0, 180.0), ("RUNNING", 1, None, None), ("PENDING", 0, None, None),
    ("COMPLETED", 5, 60.0, None), ("RUNNING", 7, 60.0, 0.0)])  # 7 of 5: a job resumed with fewer epochs
def test_time_left_is_the_epochs_to_go_at_the_pace_so_far_while_running(state, done, pace, left):
    assert time_left_s(state, 5, RunMetrics(epochs_done=done, epoch_seconds=pace)) == left
    assert time_left_s(state, 5, None) is None
