"""portal.service.views and the admin's usage: the board's views of several users answer from each user's part
read in time, with a stalled user's rows marked stale or his records named unread, never waiting for his reads
(issue 49, item 7). bob's reads stall on an event the test holds, as reads of a FIFO would wait for a writer."""

from __future__ import annotations

import json
import tempfile
import threading
from datetime import datetime
from pathlib import Path

import pytest
from tornado.testing import AsyncHTTPTestCase

from portal.config import PortalConfig
from portal.jobs import Job, UnreadableJob, UnreadableRecord
from portal.scheduler.usage import UsageReport
from portal.service.app import make_app
from portal.service.base import PortalHandler
from portal.service.board import JobBoard, Refresher
from portal.service.hub_user import HubUser
from portal.service.parts import PartsLate
from tests.unit.helpers import CountingAPI, FakeDirectory, identify_from_test_header, slurm_cache, squeue_free

DEADLINE_S = 2.0  # the board's part deadline here: a view with a stalled part waits this long, once
ADMIN = HubUser("admin", ("portal-admins",), admin=True)
ALICE, BOB = HubUser("alice", ("datascientists",)), HubUser("bob", ("datascientists",))
EVERYONE = [ADMIN, ALICE, BOB]


class StallingAPI(CountingAPI):
    """The jobs API, where every read of bob's waits while `bob_stalls` is clear; `squatted`: job ids where bob's
    home holds a broken record."""

    def __init__(self, tmp):
        super().__init__(tmp)
        self.bob_stalls = threading.Event()
        self.bob_stalls.set()
        self.bob_reads = 0
        self.squatted: set[str] = set()

    def _bob(self, user):
        if user == "bob":
            self.bob_reads += 1
            assert self.bob_stalls.wait(30), "the test never let bob's reads go on"

    def job_entries(self, user, groups, cfg):
        self._bob(user)
        return super().job_entries(user, groups, cfg)

    def get(self, job_id, user, groups, cfg, check=True):
        self._bob(user)
        if user == "bob" and job_id in self.squatted:
            raise UnreadableRecord(UnreadableJob(job_id, "bob", f"/home/bob/jobs/{job_id}", "a fifo"))
        return super().get(job_id, user, groups, cfg, check)


@pytest.fixture
def board(tmp_path):
    now = [0.0]
    api = StallingAPI(tmp_path)
    board = JobBoard(PortalConfig(), slurm_cache(PortalConfig(), squeue_free, clock=lambda: now[0]),
                     api=api, rescan_s=10, refresher=Refresher(execute=lambda task: task()), clock=lambda: now[0])
    board.part_deadline_s = DEADLINE_S
    board.now = now
    yield board
    api.bob_stalls.set()
    board.stop()


def settled(board, user: str) -> None:
    pause = threading.Event()
    for _ in range(300):
        if board._parts.in_use(user) == 0:
            return
        pause.wait(0.05)
    raise AssertionError(f"{user}'s part is still being read")


def test_an_admins_list_answers_without_a_stalled_user_and_marks_him(board):
    api = board.api
    api.add("alice", "9", "COMPLETED")
    api.add("bob", "12", "COMPLETED")
    api.bob_stalls.clear()  # his home does not answer
    listed = board.job_list(ADMIN, EVERYONE)
    assert [(row["user"], row["id"], row["stale"]) for row in listed["jobs"]] == [("alice", "9", "")]
    assert listed["late"] == [{"user": "bob", "stale": False, "note": (
        f"bob's jobs are unreadable now (not read within {DEADLINE_S:g} s); shown once they answer")}]
    api.bob_stalls.set()
    settled(board, "bob")
    fresh = board.job_list(ADMIN, EVERYONE)
    assert [(row["user"], row["id"], row["stale"]) for row in fresh["jobs"]] == [("bob", "12", ""),
                                                                               ("alice", "9", "")]
    assert fresh["late"] == []
    assert board.job_rows(ALICE) == [row for row in fresh["jobs"] if row["user"] == "alice"]  # her own: as before


def test_a_users_rows_read_before_his_files_stalled_are_shown_stale(board):
    api = board.api
    api.add("alice", "9", "COMPLETED")
    api.add("bob", "12", "RUNNING")  # not in the shared squeue: its state is asked again every refresh
    board.job_list(ADMIN, EVERYONE)
    board.now[0] = 5.0  # past dashboard_refresh_s: bob's job's state is due again, and bob's reads stall now
    stall, stalled = threading.Event(), []
    original = api.fake_scheduler.state

    def stalled_state(record, user):
        if record.user == "bob":
            stalled.append(record.id)
            assert stall.wait(30)
        return original(record, user)
    api.fake_scheduler.state = stalled_state
    try:
        listed = board.job_list(ADMIN, EVERYONE)
    finally:
        stall.set()
    bobs = [row for row in listed["jobs"] if row["user"] == "bob"]
    assert [row["id"] for row in bobs] == ["12"] and bobs[0]["state"] == "RUNNING"
    assert bobs[0]["stale"] == f"stale: bob's jobs as read 5 s ago (not read within {DEADLINE_S:g} s)"
    assert listed["late"] == [{"user": "bob", "stale": True, "note": bobs[0]["stale"]}]
    assert [row["stale"] for row in listed["jobs"] if row["user"] == "alice"] == [""]
    assert stalled == ["12"]  # his part did ask again: it is late, not skipped


def test_an_admins_lookup_asks_the_jobs_known_owner_alone_and_never_waits_for_a_stalled_user(board):
    api = board.api
    api.add("alice", "9", "COMPLETED")
    board.job_list(ADMIN, EVERYONE)  # the admin's list has read every user's records: job 9 is alice's
    api.bob_stalls.clear()
    reads = api.bob_reads
    job = board.get(ADMIN, "9", EVERYONE)
    assert isinstance(job, Job) and job.owner == "alice" and api.bob_reads == reads  # bob was not asked
    with pytest.raises(PartsLate, match=r"job 404: not found among the users whose records answered; not answered "
                                        r"in time: bob \(not read within"):
        board.get(ADMIN, "404", EVERYONE)


def test_a_broken_record_named_like_another_users_job_never_hides_that_job(board):
    api = board.api
    api.add("alice", "9", "COMPLETED")
    api.squatted.add("9")  # bob made ~/jobs/<cluster>/9 with a FIFO for job.json
    job = board.get(ADMIN, "9", [ADMIN, BOB, ALICE])  # bob listed first
    assert isinstance(job, Job) and job.owner == "alice"
    api.squatted.add("31")
    assert isinstance(board.get(ADMIN, "31", [ADMIN, BOB, ALICE]), UnreadableJob)  # nobody else has it: shown


class SlowAccountingAPI(StallingAPI):
    def __init__(self, tmp):
        super().__init__(tmp)
        self.accounting_answers = threading.Event()
        self.accounting_answers.set()

    def usage(self, user, groups, cfg, everyone):
        assert self.accounting_answers.wait(30)
        return UsageReport(datetime(2026, 11, 23), per_user={"alice": 2.0})


def test_an_admins_usage_answers_within_its_deadline_while_accounting_is_slow(tmp_path):
    now = [0.0]
    api = SlowAccountingAPI(tmp_path)
    board = JobBoard(PortalConfig(), slurm_cache(PortalConfig(), squeue_free, clock=lambda: now[0]), api=api,
                     refresher=Refresher(execute=lambda task: task()), clock=lambda: now[0])
    board.part_deadline_s = DEADLINE_S
    try:
        api.accounting_answers.clear()
        first = board.usage(ADMIN, EVERYONE)
        assert first["gpu_hours"] is None and "did not answer in time" in first["history_unavailable"]
        assert {q["user"] for q in first["quotas"]} == {"admin", "alice", "bob"}  # from squeue: at once
        api.accounting_answers.set()
        settled(board, "admin")
        assert board.usage(ADMIN, EVERYONE)["gpu_hours"] == 2.0
        now[0] = 1000.0  # the report is due again, and accounting is slow again
        api.accounting_answers.clear()
        stale = board.usage(ADMIN, EVERYONE)
        assert stale["gpu_hours"] == 2.0 and "did not answer now" in stale["history_stale"]
    finally:
        api.accounting_answers.set()
        board.stop()


class AdminPagesTest(AsyncHTTPTestCase):
    """The admin's page, live rows and API while bob's reads stall: what they say of him (X-Test-User stands in for
    the hub's OAuth, as in test_api)."""

    def get_app(self):
        self.api = StallingAPI(Path(tempfile.mkdtemp()))
        cfg = PortalConfig()
        cluster = slurm_cache(cfg, squeue_free)
        self.board = JobBoard(cfg, cluster, api=self.api)
        self.board.part_deadline_s = DEADLINE_S
        return make_app(cfg, prefix="/services/portal/", hub_base_url="/", cluster=cluster, board=self.board,
                        directory=FakeDirectory(), notebooks_dir=Path(tempfile.mkdtemp()))

    def setUp(self):
        self._identity = PortalHandler.get_current_user, PortalHandler.identify
        PortalHandler.get_current_user = lambda handler: {"name": handler.request.headers["X-Test-User"]}
        PortalHandler.identify = identify_from_test_header
        super().setUp()

    def tearDown(self):
        self.api.bob_stalls.set()
        PortalHandler.get_current_user, PortalHandler.identify = self._identity
        super().tearDown()

    def get(self, path):
        return self.fetch(f"/services/portal/{path}", headers={"X-Test-User": "admin"})

    def test_the_admins_list_page_and_lookup_say_whose_records_are_late(self):
        self.api.add("alice", "9", "COMPLETED")
        self.api.add("bob", "12", "COMPLETED")
        self.api.bob_stalls.clear()
        listed = json.loads(self.get("api/jobs").body)
        assert [row["id"] for row in listed["jobs"]] == ["9"] and [e["user"] for e in listed["late"]] == ["bob"]
        for path in ("jobs", "jobs?part=rows"):
            page = self.get(path).body.decode()
            assert 'data-late-user="bob"' in page and "bob&#39;s jobs are unreadable now" in page, page[-2000:]
            assert 'data-job="9"' in page and 'data-job="12"' not in page
        missing = self.get("api/jobs/404")
        assert missing.code == 503 and "not answered in time: bob" in json.loads(missing.body)["error"]
        self.api.bob_stalls.set()
        settled(self.board, "bob")
        page = self.get("jobs").body.decode()
        assert 'data-job="12"' in page and "late-users" not in page
        assert json.loads(self.get("api/jobs/12").body)["user"] == "bob"
