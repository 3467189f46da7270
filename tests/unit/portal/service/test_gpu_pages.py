"""The GPUs page and its API: a user sees and keeps only their own warned server; an admin's history lists
everyone's; bad input names the field; a flagged job's page says so."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

from tornado.testing import AsyncHTTPTestCase

from portal.config import PortalConfig
from portal.errors import SchedulerError
from portal.gpus.agent import write
from portal.gpus.idle import Rule
from portal.gpus.ledger import Ledger
from portal.gpus.readings import GpuReading, NodeReading
from portal.gpus.watch import Holder, Watch
from portal.scheduler.cluster import QueuedJob
from portal.scheduler.snapshot import ClusterCache, ClusterSnapshot
from portal.service.app import make_app
from portal.service.board import JobBoard
from tests.unit.helpers import FakeDirectory, FakeJobsAPI, TestHeaderUser, slurm_cache, squeue_free

RULE = Rule(idle_after_s=60, grace_s=120)


def idle_passes(watch: Watch, holders: list[Holder], times: range) -> None:
    for at in times:
        gpus = tuple(GpuReading(i, busy=0.0, holder=h.id, user=h.user) for i, h in enumerate(holders))
        watch.once(holders, {"n1": NodeReading("n1", at, 10.0, "standin", gpus)}, lambda h: RULE)


class GpuPagesTest(TestHeaderUser, AsyncHTTPTestCase):
    def get_app(self):
        self.tmp = Path(self.tmp_dir)
        self.api = FakeJobsAPI(self.tmp)
        cfg = PortalConfig()
        cluster = slurm_cache(cfg, squeue_free)
        self.board = JobBoard(cfg, cluster, api=self.api)
        app = make_app(cfg, prefix="/services/portal/", hub_base_url="/", cluster=cluster, board=self.board,
                       directory=FakeDirectory())
        app.settings["gpu_readings"] = self.tmp / "gpus"
        self.watch = Watch(self.tmp / "gpus")
        app.settings["gpu_watch"] = SimpleNamespace(watch=self.watch)
        return app

    def call(self, method, path, user="alice", body=None):
        return self.fetch(f"/services/portal/{path}", method=method, headers={"X-Test-User": user},
                          follow_redirects=False, allow_nonstandard_methods=True,
                          body=None if body is None else (body if isinstance(body, str) else json.dumps(body)))

    def test_a_warned_server_is_on_its_users_page_and_only_they_keep_it(self):
        idle_passes(self.watch, [Holder("7", "alice", True), Holder("8", "bob", True)], range(0, 70, 10))
        mine = json.loads(self.call("GET", "api/gpus").body)
        assert [w["holder"] for w in mine["warnings"]] == ["7"] and mine["warnings"][0]["deadline"] == 180
        assert [(e["holder"], e["act"]) for e in mine["history"]] == [("7", "warn")]  # hers only
        page = self.call("GET", "gpus").body.decode()
        assert 'data-holder="7"' in page and "Keep it" in page and 'data-holder="8"' not in page
        refused = self.call("POST", "api/gpus/keep", user="bob", body={"holder": "7"})
        assert refused.code == 404 and json.loads(refused.body)["field"] == "holder"
        kept = self.call("POST", "gpus", body="holder=7")
        assert (kept.code, kept.headers["Location"]) == (302, "/services/portal/gpus?kept=7")
        assert json.loads(self.call("GET", "api/gpus").body)["warnings"] == []
        assert 'id="kept"' in self.call("GET", "gpus?kept=7").body.decode()
        everyone = json.loads(self.call("GET", "api/gpus", user="admin").body)["history"]
        assert {(e["user"], e["act"]) for e in everyone} == {("alice", "keep"), ("alice", "warn"), ("bob", "warn")}

    def test_bad_input_names_the_field(self):
        for body in ({"holder": 7}, {}, {"holder": "a b"}, "[1]"):
            answer = self.call("POST", "api/gpus/keep", body=body)
            assert answer.code == 400, (body, answer.body)
        page = self.call("POST", "gpus", body="holder=x&other=1")
        assert page.code == 400 and "other" in page.body.decode()
        assert 'id="kept"' not in self.call("GET", "gpus?kept=<b>").body.decode()

    def test_a_flagged_jobs_page_says_so(self):
        self.api.add("alice", "9", "RUNNING")
        assert 'id="gpu-flag"' not in self.call("GET", "jobs/9").body.decode()
        idle_passes(self.watch, [Holder("9", "alice", False)], range(0, 70, 10))
        page = self.call("GET", "jobs/9").body.decode()
        assert 'id="gpu-flag"' in page and "A rank that hangs, or an input that stalled?" in page

    def test_the_lab_reads_its_own_servers_gpus_node_by_node_and_no_one_elses(self):
        now = time.time()
        queue = {"7": QueuedJob("7", "alice", "RUNNING", "1:00", 2, 1, "None", gpus=2, server=True),
                 "8": QueuedJob("8", "bob", "RUNNING", "1:00", 1, 1, "None", gpus=1, server=True),
                 "9": QueuedJob("9", "alice", "RUNNING", "1:00", 1, 1, "None", gpus=1)}  # her job: not her server
        self._app.settings["cluster"] = ClusterCache(PortalConfig(), read=lambda: ClusterSnapshot(now, queue))
        folder = self.tmp / "gpus"
        folder.mkdir(mode=0o700, exist_ok=True)
        write(folder, NodeReading("n1", now, 10.0, "standin", (
            GpuReading(0, busy=37.0, memory_used_mib=1200, memory_total_mib=16384, holder="7", user="alice"),
            GpuReading(1, busy=90.0, holder="8", user="bob"), GpuReading(2, busy=80.0, holder="9", user="alice"))))
        write(folder, NodeReading("n2", now, 10.0, "nvml", (GpuReading(0, holder="7", user="alice"),),
                                  error="NVML: driver not loaded"))
        mine = json.loads(self.call("GET", "api/gpus").body)["server_gpus"]
        assert [(g["node"], g["index"], g["busy"], g["memory_used_mib"], g["source"], g["error"]) for g in mine] == [
            ("n1", 0, 37.0, 1200, "standin", ""), ("n2", 0, None, None, "nvml", "NVML: driver not loaded")]
        page = self.call("GET", "gpus").body.decode()
        rows = page[page.index('id="server-gpus"'):]
        assert '<td>37 %</td>' in rows and "1200 of 16384 MiB" in rows and "FAKE GPU" in rows
        assert "unknown (NVML: driver not loaded)" in rows and 'data-index="1"' not in rows and "90 %" not in rows
        assert json.loads(self.call("GET", "api/gpus", user="carol").body)["server_gpus"] == []
        assert 'id="no-server-gpus"' in self.call("GET", "gpus", user="carol").body.decode()

        def down() -> ClusterSnapshot:
            raise SchedulerError("squeue: slurmctld is not answering")
        self._app.settings["cluster"] = ClusterCache(PortalConfig(), read=down)
        answer = self.call("GET", "api/gpus")  # whose server is which job, unknown: no GPUs shown, the rest is
        assert answer.code == 200 and json.loads(answer.body)["server_gpus"] == []

    def test_without_a_watch_the_page_says_it_does_not_watch(self):
        self._app.settings["gpu_watch"] = None
        assert json.loads(self.call("GET", "api/gpus").body) == {"watched": False, "warnings": [], "history": [],
                                                                 "server_gpus": []}
        assert 'id="unwatched"' in self.call("GET", "gpus").body.decode()

    def test_the_usage_page_shows_busy_gpu_hours_beside_the_held_ones(self):
        ledger = Ledger(self.tmp / "gpus")
        (self.tmp / "gpus").mkdir(mode=0o700, exist_ok=True)
        for at in (3600.0, 7200.0, 10800.0):  # an hour's reading each, its GPU half busy
            write(self.tmp / "gpus", NodeReading("n1", at, 3600.0, "standin", (GpuReading(0, busy=50.0, holder="7",
                                                                                         user="alice"),)))
        ledger.count(now=10800.0)
        self._app.settings["gpu_watch"] = SimpleNamespace(watch=self.watch, ledger=ledger)
        row = {"user": "alice", "kind": "job", "state": "RUNNING", "start": "2026-12-01T10:00:00", "end": None,
               "nodes": "n1", "gpus": 1, "gpu_hours": 3.0}
        usage = {"quotas": [], "history_unavailable": "", "week_start": "2026-11-30", "gpu_hours": 4.0,
                 "per_user": {}, "jobs": [{**row, "job_id": "7"}, {**row, "job_id": "9", "gpu_hours": 1.0}]}
        self.board.usage = lambda user, everyone=(): usage
        page = self.call("GET", "usage").body.decode()
        assert '<strong id="gpu-hours-busy">1.50</strong> busy' in page and '<span id="efficiency">50 %</span>' in page
        seven, nine = page[page.index('data-job="7"'):], page[page.index('data-job="9"'):]
        assert '<td class="busy">1.500</td>' in seven and '<td class="efficiency">50 %</td>' in seven
        assert '<td class="busy">-</td>' in nine and '<td class="efficiency">unknown</td>' in nine
        jobs = json.loads(self.call("GET", "api/usage").body)["jobs"]
        assert [(j["job_id"], j["busy_gpu_hours"], j["efficiency"]) for j in jobs] == [("7", 1.5, 0.5),
                                                                                       ("9", None, None)]
