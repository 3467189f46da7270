"""The dashboard's handlers and job board, with portal.jobs, Slurm and the hub replaced by fakes: who sees which
job, the shapes of the JSON API, and errors as users see them (status, message, field; never a traceback)."""

from __future__ import annotations

import asyncio
import json
import pwd
import re
import threading
import time
from pathlib import Path
from unittest import mock

from tornado.testing import AsyncHTTPTestCase

from portal.config import PortalConfig
from portal.gpus.agent import write
from portal.gpus.readings import GpuReading, NodeReading
from portal.jobs import Job
from portal.records.spec import JobSpec
from portal.service.api import cluster_answer
from portal.service.app import ACTION_WORKERS, make_app
from portal.service.board import JobBoard
from tests.unit.helpers import FakeDirectory, FakeJobsAPI, TestHeaderUser, slurm_cache, squeue_free

COUNTERS = ("squeue_calls", "scontrol_calls", "user_slurm_calls", "runuser_calls", "hub_calls")


def test_the_cluster_answer_adds_the_counters_for_an_admin_only():
    view, counters = {"gpus": 4, "refresh_s": 2.0}, {"squeue_calls": 3, "runuser_calls": {"cat": 9}}
    assert cluster_answer(view, counters, admin=False) == {"gpus": 4, "refresh_s": 2.0}
    assert cluster_answer(view, counters, admin=True) == {**view, **counters}
    assert view == {"gpus": 4, "refresh_s": 2.0}  # the view itself is left as it was


class DashboardTest(TestHeaderUser, AsyncHTTPTestCase):
    """Requests name their user in X-Test-User, standing in for the hub's OAuth (tested in integration)."""

    def get_app(self):
        self.tmp = Path(self.tmp_dir)
        self.api = FakeJobsAPI(self.tmp)
        cfg = PortalConfig()
        self.cluster = slurm_cache(cfg, squeue_free)
        board = JobBoard(cfg, self.cluster, api=self.api)
        notebooks = self.tmp / "notebooks"
        notebooks.mkdir()
        (notebooks / "01-explore.ipynb").write_text("{}")
        app = make_app(cfg, prefix="/services/portal/", hub_base_url="/", cluster=self.cluster, board=board,
                       directory=FakeDirectory(), notebooks_dir=notebooks)
        app.settings["gpu_readings"] = self.tmp / "gpus"  # never the machine's box's (its state_dir's)
        return app

    def call(self, method, path, user="alice", body=None):
        headers = {"X-Test-User": user} if user else {}
        response = self.fetch(f"/services/portal/{path}", method=method, headers=headers, follow_redirects=False,
                              body=None if body is None else (body if isinstance(body, str) else json.dumps(body)),
                              allow_nonstandard_methods=True)
        return response

    def test_post_a_spec_gives_201_and_the_job(self):
        response = self.call("POST", "api/jobs", body={"template": "chexnet", "gpus_per_node": 2})
        assert response.code == 201, response.body
        job = json.loads(response.body)
        assert (job["user"], job["state"], job["gpus_per_node"]) == ("alice", "PENDING", 2)
        assert job["links"]["tensorboard"].startswith("/user/alice/tensorboard/?runFilter=")

    def test_a_request_that_acts_is_decided_on_the_hubs_word_now_not_the_rosters(self):
        """A group just given or taken (the quota, the weekly budget) counts at the next submit or cancel."""
        asked = []

        class Recording(FakeDirectory):
            async def user(self, name, fresh=False):
                asked.append((name, fresh))
                return await super().user(name, fresh)
        self._app.settings["directory"] = Recording()
        assert self.call("GET", "api/jobs").code == 200
        assert self.call("POST", "api/jobs", body={"template": "chexnet", "gpus_per_node": 1}).code == 201
        assert asked == [("alice", False), ("alice", True)]

    def test_invalid_specs_are_400_naming_the_field(self):
        response = self.call("POST", "api/jobs", user="bob", body={"gpus_per_node": 4})
        assert response.code == 400
        assert json.loads(response.body)["field"] == "gpus_per_node"
        for body, field in (("not json", "spec"), ("[1]", "spec"), ({"epochs": "many"}, "epochs")):
            response = self.call("POST", "api/jobs", body=body)
            assert (response.code, json.loads(response.body)["field"]) == (400, field), response.body

    def test_each_submit_and_cancel_is_one_log_line_with_the_user_the_job_and_the_reason(self):
        with self.assertLogs("portal.service", level="INFO") as logged:
            submitted = self.call("POST", "api/jobs", body={"template": "chexnet", "gpus_per_node": 2})
            job_id = json.loads(submitted.body)["id"]
            self.call("POST", "api/jobs", user="bob", body={"template": "chexnet", "gpus_per_node": 4})
            self.call("DELETE", f"api/jobs/{job_id}", user="admin")
            self.call("DELETE", f"api/jobs/{job_id}")
        lines = [record.getMessage() for record in logged.records if " by " in record.getMessage()]
        assert lines == [
            f"submit by alice: job {job_id} on slurm, 1 node(s) x 2 GPU(s), 5 epoch(s)",
            "submit by bob refused (JobSpecError): gpus_per_node: 4 is out of range; allowed: 0-0",
            f"cancel of job {job_id} by admin refused (JobAccessError): job {job_id} is alice's: admins see every "
            "user's jobs but cancel only their own (alice cancels it, or a Slurm operator with scancel)",
            f"cancel of job {job_id} by alice: cancelled on slurm",
        ], lines

    def test_each_refused_or_failed_request_logs_who_asked_what_the_status_and_why(self):
        with self.assertLogs("portal.service", level="INFO") as logged:
            self.call("GET", "api/jobs/99", user="bob")  # none of his: 404
            self.call("POST", "api/jobs", body={"epochs": "many\nforged line"})  # 400, the field's words
        lines = [(r.levelname, r.getMessage()) for r in logged.records if " for " in r.getMessage()]
        assert lines[0] == ("INFO", "GET /services/portal/api/jobs/99 for bob: 404 job 99: not found among bob's "
                                    "jobs"), lines
        assert lines[1][0] == "INFO" and lines[1][1].startswith(
            "POST /services/portal/api/jobs for alice: 400 epochs: ") and "\n" not in lines[1][1], lines

    def test_a_reason_is_logged_on_one_line_whatever_it_holds(self):
        from portal.inputs import LOGGED_REASON_CHARS, one_line
        assert one_line("sbatch: error: x\nsubmit by alice: job 1 on slurm\r\n") == \
            "sbatch: error: x; submit by alice: job 1 on slurm"
        assert len(one_line("y" * 10_000)) == LOGGED_REASON_CHARS + 3

    def test_a_user_sees_only_their_own_jobs_and_anothers_id_is_404(self):
        self.api.add("alice", "7", "RUNNING")
        self.api.add("bob", "8")
        mine = json.loads(self.call("GET", "api/jobs").body)["jobs"]
        assert [(j["id"], j["state"]) for j in mine] == [("7", "RUNNING")]
        assert re.fullmatch(r"2:[0-5]\d", mine[0]["elapsed"]), mine  # squeue's format, counted from its start
        assert self.call("GET", "api/jobs/8").code == 404
        assert self.call("DELETE", "api/jobs/8").code == 404
        assert self.api.fake_scheduler.cancelled == []
        assert self.call("GET", "api/jobs/not-an-id").code == 404

    def test_the_job_page_shows_a_card_of_any_wrong_shape_as_unreadable_saying_why(self):
        """The cards of issue 40 (a list for data.counts, say, was a 500) and, for each field, a card with it of
        another JSON type (tests/cards.py), and each with null where the reader takes null: the page is 200, for
        the owner and an admin, and shows the card or why it is unreadable."""
        from markupsafe import escape

        from portal.scheduler.home import ModelCardError, checked_card
        from programkit.model_card import CARD_FILE
        from tests.cards import a_card, replaced, wrong_type_cards

        path = self.api.add("alice", "9").record.checkpoint_dir / CARD_FILE  # COMPLETED: its card is shown
        path.parent.mkdir()
        reported = [json.dumps(a_card()), '{"format": "dsportal-model-card-1"}',  # ... and the five of issue 40
                    *(json.dumps(replaced(a_card(), field, value)) for field, value in (
                        ("data.counts", [1]), ("checkpoint.files", 5), ("code.git_commit", 12345), ("data", 7)))]
        variants = {(field, kind == "null"): json.dumps(card) for field, kind, card in wrong_type_cards(a_card())}
        for text in (*reported, *variants.values()):
            path.write_text(text)
            try:
                checked_card(text, "9")
                shown = '<code>ckpt-3.index</code>'
            except ModelCardError as err:
                shown = f'<p class="alert alert-warning">{escape(err)}</p>'
            for user in ("alice", "admin") if text in reported else ("alice",):
                page = self.call("GET", "jobs/9", user=user)
                assert page.code == 200 and shown in page.body.decode(), (text, user, page.code)

    def test_an_admin_sees_every_users_jobs_and_cancels_only_their_own(self):
        self.api.add("alice", "7", "RUNNING")
        self.api.add("bob", "8")
        listed = json.loads(self.call("GET", "api/jobs", user="admin").body)["jobs"]
        assert sorted((j["user"], j["id"]) for j in listed) == [("alice", "7"), ("bob", "8")]
        assert json.loads(self.call("GET", "api/jobs/8", user="admin").body)["user"] == "bob"
        # Cancelled as alice, it was recorded as alice's own cancel (issue 25): the portal never acts as her.
        refused = self.call("DELETE", "api/jobs/7", user="admin")
        assert refused.code == 403 and "job 7 is alice's: admins see every user's jobs but cancel only their own" \
            in json.loads(refused.body)["error"]
        assert self.call("POST", "jobs/7/cancel", user="admin").code == 403
        assert self.api.fake_scheduler.cancelled == []
        page = self.call("GET", "jobs", user="admin").body
        assert b'id="cancel-7"' not in page and b"jobs/7/cancel" not in page  # no button that would be refused
        assert b'id="cancel"' not in self.call("GET", "jobs/7", user="admin").body
        assert self.call("DELETE", "api/jobs/7", user="alice").code == 204  # hers to cancel
        assert self.api.fake_scheduler.cancelled == ["7"]

    def test_slurm_down_is_503_with_a_message_and_no_traceback(self):
        self.api.slurm_down = True
        response = self.call("GET", "api/jobs")
        body = json.loads(response.body)
        assert response.code == 503 and "Slurm is unavailable" in body["error"]
        page = self.call("GET", "jobs")
        assert page.code == 503 and b"Slurm is unavailable" in page.body and b"Traceback" not in page.body

    def test_anonymous_pages_redirect_to_login_and_the_api_refuses(self):
        assert self.call("GET", "jobs", user=None).code == 302
        assert self.call("GET", "api/jobs", user=None).code == 403

    def test_cluster_api_and_page(self):
        data = json.loads(self.call("GET", "api/cluster", user="admin").body)
        assert (data["gpus"], data["free_gpus"], data["squeue_calls"]) == (4, 2, 1)
        self.call("GET", "cluster")
        self.call("GET", "api/jobs")
        assert self.cluster.squeue_calls == 1  # every request within the interval shares one squeue

    def test_the_cluster_page_shows_admins_the_held_gpus_whose_and_idle_since_when(self):
        (self.tmp / "gpus").mkdir()
        now = time.time()
        for at, busy in ((now - 600, 80.0), (now - 300, 0.0), (now - 10, 0.0)):
            write(self.tmp / "gpus", NodeReading("tnode1", at, 10.0, "standin", gpus=(
                GpuReading(0, busy=busy, holder="5", user="alice"), GpuReading(1, busy=90.0, holder="6", user="bob"),
                GpuReading(2, busy=0.0))))
        page = self.call("GET", "cluster", user="admin").body.decode()
        table = page[page.index('id="held-gpus"'):]
        idle, busy = table.split('data-holder="5"')[1], table.split('data-holder="6"')[1]
        assert "alice" in idle and "idle for 5 min" in idle.split("</tr>")[0], idle[:400]  # since the reading at -300 s
        assert "bob" in busy and "90 %" in busy.split("</tr>")[0] and "idle for" not in busy.split("</tr>")[0]
        assert table.count("data-holder=") == 2  # the free GPU is no one's
        assert 'id="held-gpus"' not in self.call("GET", "cluster", user="bob").body.decode()  # admins only

    def test_a_body_over_the_limit_gets_the_dashboards_own_413_before_any_work(self):
        from portal.inputs import MAX_BODY_BYTES

        for path in ("api/jobs", "api/settings"):
            answer = self.call("POST", path, body="x" * (2 * 1024 * 1024))
            assert answer.code == 413 and answer.headers["Content-Type"] == "application/json", (path, answer.code)
            said = json.loads(answer.body)
            assert said["field"] == "body" and f"allowed: at most {MAX_BODY_BYTES}" in said["error"], said
        assert self.api.limits_given == []  # nothing was submitted, nor a quota asked

    def test_beyond_the_rate_a_user_gets_429_with_retry_after_and_others_are_served(self):
        limits = self._app.settings["rate_limits"]
        now = limits.clock()
        # The clock stands still: on a loaded machine the bucket refilled while the burst was sent (got 200).
        with mock.patch.object(limits, "clock", lambda: now):
            for _ in range(limits.burst):
                assert limits.take("bob") == 0  # his burst, spent
            answer = self.call("GET", "api/jobs", user="bob")
        assert answer.code == 429 and int(answer.headers["Retry-After"]) >= 1, (answer.code, answer.headers)
        said = json.loads(answer.body)["error"]
        # The text's wait is the header's (it said "try again in 0.0 s" beside Retry-After: 1).
        assert "too many requests from bob" in said and f"try again in {answer.headers['Retry-After']} s" in said, \
            (said, answer.headers["Retry-After"])
        assert self.call("GET", "api/jobs").code == 200  # alice's own bucket
        assert self.call("GET", "jobs", user="bob").code == 200  # pages are not rate limited, only the API

    def test_the_clusters_internal_counters_are_for_admins_only(self):
        mine = json.loads(self.call("GET", "api/cluster").body)
        admins = json.loads(self.call("GET", "api/cluster", user="admin").body)
        assert set(admins) - set(mine) == set(COUNTERS)
        assert (mine["gpus"], mine["free_gpus"], mine["refresh_s"]) == (4, 2, admins["refresh_s"])
        assert {k: v for k, v in admins.items() if k not in COUNTERS} == mine  # the same view of the cluster

    def test_an_ended_jobs_state_is_asked_once_and_a_queued_ones_comes_from_squeue(self):
        self.api.add("alice", "7", "RUNNING")
        self.api.add("alice", "9", "COMPLETED")
        for _ in range(3):
            self.call("GET", "api/jobs")
        assert self.api.fake_scheduler.asked == ["9"]

    def test_a_reused_job_id_is_a_new_job_to_the_caches(self):
        old = self.api.add("alice", "9", "COMPLETED")
        assert json.loads(self.call("GET", "api/jobs/9").body)["state"] == "COMPLETED"
        # Slurm's ids start again (a rebuilt cluster): job 9 is now another job, which runs.
        self.api.owned["alice"].remove(old)
        self.api.add("alice", "9", "RUNNING", second=30)
        assert json.loads(self.call("GET", "api/jobs/9").body)["state"] == "RUNNING"

    def test_the_job_page_shows_its_gpus_on_each_node_and_no_one_elses(self):
        self.api.add("alice", "7", "RUNNING")
        (self.tmp / "gpus").mkdir()
        for at, busy in ((time.time() - 20, 10.0), (time.time() - 10, 90.0)):
            for node, holders in (("tnode1", ("7", "8")), ("tnode2", ("7",))):
                write(self.tmp / "gpus", NodeReading(node, at, 10.0, "standin", gpus=tuple(
                    GpuReading(i, busy=busy if holder == "7" else 3.0, memory_used_mib=64, holder=holder,
                               user="alice" if holder == "7" else "bob") for i, holder in enumerate(holders))))
        page = self.call("GET", "jobs/7?part=figures").body.decode()
        gpus = page[page.index('id="gpus"'):]
        assert 'data-node="tnode1"' in gpus and 'data-node="tnode2"' in gpus and "90 % busy" in gpus, gpus
        assert "3 % busy" not in gpus and "FAKE GPUs" in gpus and "<svg" in gpus  # bob's GPU; the stand-in named

    def test_pages_render(self):
        self.api.add("alice", "7", "RUNNING")
        jobs = self.call("GET", "jobs")
        assert jobs.code == 200 and b'data-job="7"' in jobs.body and b"/jobs/7/cancel" in jobs.body
        job = self.call("GET", "jobs/7")
        assert job.code == 200 and b"line 99" in job.body and b"line 10\n" not in job.body
        assert b"Start your server" in job.body  # the fake hub user has no server running
        assert self.call("GET", "jobs/7/log").body.count(b"line") == 100
        templates = self.call("GET", "templates")
        assert b"/user/alice/lab/tree/notebooks/01-explore.ipynb" in templates.body
        assert b"gpus_per_node" in self.call("GET", "submit").body

    def test_a_sweeps_page_lists_its_trials_the_best_and_a_chart_per_parameter(self):
        job = self.api.add("alice", "8", "RUNNING", sweep={"trials": 3, "space": {"lr": [0.001, 1e-08]}})
        for task in (0, 1):
            Path(job.job_dir, f"trial-{task}.log").write_text(f"task {task}'s output\n")
        page = self.call("GET", "jobs/8")
        assert page.code == 200, page.body[-2000:]
        body = page.body.decode()
        assert body.count("<tr data-task=") == 3 and "pruned at epoch 2" in body
        assert "trial 0</strong> (task 0)" in body and "0.910" in body
        assert 'class="scatter"' in body and 'aria-label="final mean AUROC against lr' in body
        assert "task 0&#39;s output" in body and "(last lines of task 0)" in body  # the best trial's output
        assert self.call("GET", "jobs/8/log?task=1").body == b"task 1's output\n"
        refused = self.call("GET", "jobs/8/log?task=x")
        assert refused.code == 400 and b"task" in refused.body
        answer = json.loads(self.call("GET", "api/jobs/8").body)
        assert answer["sweep"]["best"]["trial"] == 0 and answer["sweep"]["counts"] == {
            "COMPLETED": 1, "PRUNED": 1, "PENDING": 1}
        assert [row["pruned_at"] for row in answer["sweep"]["trials"]] == [None, 2, None]
        listed = self.call("GET", "jobs").body.decode()
        assert "sweep of 3" in listed
        form = self.call("GET", "submit?from=8").body.decode()
        assert 'id="kind-sweep" value="sweep" checked' in form  # "run again with changes" of a sweep
        assert re.search(r'id="sweep_trials" name="sweep_trials" type="number"\s+value="3"', form)

    def finished_sweep(self, job_id: str, state: str = "COMPLETED") -> Job:
        """The reviewer's sweep: four trials; trial 0 best by its final value (0.960), trial 1's best epoch higher
        (0.973) than any of trial 0's; learning rates as Optuna draws them; 2:03:04 from first start to last end."""
        job = self.api.add("alice", job_id, state, sweep={"trials": 4, "pruner": "none", "space": {
            "lr": {"low": 1e-4, "high": 1e-2, "log": True}}})
        start = 1_700_000_000.0

        def trial(number, status, value, epochs, started, ended, lr):
            return {"number": number, "state": status, "params": {"lr": lr}, "value": value,
                    "epochs": dict(enumerate(epochs, start=1)), "started": started, "ended": ended}

        self.api.fake_scheduler.sweeps[job_id] = ({
            0: trial(0, "COMPLETE", 0.960, [0.95, 0.965, 0.96], start, start + 3600, 0.0006824078427098838),
            1: trial(1, "COMPLETE", 0.950, [0.94, 0.973, 0.95], start + 5, start + 3700, 0.00012345678901234),
            2: trial(2, "COMPLETE", 0.941, [0.93, 0.94, 0.941], start + 3601, start + 5000, 0.0061999999),
            3: trial(3, "COMPLETE", 0.955, [0.95, 0.95, 0.955], start + 3701, start + 7384, 0.0021000001)}, {})
        return job

    def test_a_finished_sweeps_page_says_what_best_means_and_shows_one_best_trial_everywhere(self):
        self.finished_sweep("9")
        body = self.call("GET", "jobs/9").body.decode()
        best_words = re.search(r'<p id="sweep-best"[^>]*>(.*?)</p>', body, re.S).group(1)
        assert "Best trial: <strong>trial 0</strong> (task 0)" in best_words and "so far" not in best_words
        assert "final mean AUROC <strong>0.960</strong>" in best_words and "lr=0.000682" in best_words
        assert "the value Optuna maximises" in re.search(r'<p id="sweep-best-by"[^>]*>(.*?)</p>', body, re.S).group(1)
        # the one highlighted row is the summary's trial, though trial 1's best epoch (0.973) is the highest
        assert re.findall(r'<tr data-task="(\d+)"[^>]*class="table-success"', body) == ["0"]
        assert body.count('data-best="true"') == 1 and body.count(">best</span>") == 1
        head = re.search(r"<thead>(.*?)</thead>", body[body.index('id="sweep-trials"'):], re.S).group(1)
        assert head.index("Final mean AUROC") < head.index("Best epoch's AUROC")
        assert "(ranks the trials)" in head and "ranks nothing" in body
        row_1 = re.search(r'<tr data-task="1".*?</tr>', body, re.S).group(0)
        assert re.search(r'class="objective">0.950</td><td>0.973</td>', row_1)
        # numbers to a sensible precision: never the learning rate's 19 digits
        assert "0.0006824078" not in body and "0.00012345678" not in body and "0.000123" in row_1
        chart = body[body.index('<svg class="scatter"'):body.index("</svg>")]
        assert 'class="best"' in chart and ">best</text>" in chart and 'class="x-title"' in chart
        assert "best 0.960 at lr 0.000682" in chart
        # progress and elapsed of a finished sweep: its trials, and its wall time
        figures = body[body.index('id="figures"'):body.index('id="sweep"')]
        assert "epoch 0 of" not in figures and re.search(r'id="trials_done">4</span> of 4 trials finished', figures)
        assert re.search(r'id="epochs_done">12</span> epochs run across trials', figures)
        assert re.search(r'id="elapsed">2:03:04 <small[^>]*>\(from the first trial&#39;s start to the last', figures)
        answer = json.loads(self.call("GET", "api/jobs/9").body)["sweep"]
        assert answer["best"]["task"] == 0 and answer["best_by"].startswith("the highest final mean AUROC")
        assert answer["objective"] == "final mean AUROC" and answer["best"]["params_text"] == {"lr": "0.000682"}
        assert answer["trials"][0]["params"]["lr"] == 0.0006824078427098838  # the value itself stays
        assert (answer["elapsed"], answer["elapsed_s"], answer["progress"]["trials_done"]) == ("2:03:04", 7384.0, 4)
        assert answer["started_at"] == 1_700_000_000.0 and answer["ended_at"] == 1_700_007_384.0

    def test_a_running_sweeps_page_shows_trials_done_and_time_since_its_first_trial_started(self):
        job = self.api.add("alice", "10", "RUNNING", sweep={"trials": 3, "space": {"lr": [0.001, 0.01]}})
        started = time.time() - 3725
        self.api.fake_scheduler.sweeps["10"] = ({
            0: {"number": 0, "state": "COMPLETE", "params": {"lr": 0.001}, "value": 0.9, "epochs": {1: 0.9},
                "started": started, "ended": started + 60},
            1: {"number": 1, "state": "RUNNING", "params": {"lr": 0.01}, "value": None, "epochs": {1: 0.8},
                "started": started + 61, "ended": None}}, {1: "RUNNING", 2: "PENDING"})
        body = self.call("GET", f"jobs/{job.id}?part=figures").body.decode()
        assert re.search(r'id="trials_done">1</span> of 3 trials finished, 1 running;', body)
        assert re.search(r'id="elapsed">1:02:\d\d <small[^>]*>\(since the first trial started\)', body)
        assert "Best trial so far: <strong>trial 0</strong>" in body
        assert "1 trial(s) without a final value yet (running or failed) not drawn" in body
        listed = self.call("GET", "jobs").body.decode()
        row = re.search(r'<tr data-job="10".*?</tr>', listed, re.S).group(0)
        assert "a sweep of 3 trials: its progress is on" in row and "epoch 0 of" not in row

    def test_the_form_explains_each_program_and_sends_only_the_chosen_ones_fields(self):
        form = self.call("GET", "submit").body.decode()
        assert '<option value="chexnet" selected>' in form and '<option value="chexnet-torch">' in form
        assert "DistributedDataParallel" in form and "Horovod over MPI" in form  # each explained in a line
        assert re.search(r'id="program-chexnet" data-program="chexnet">', form)  # the default's: shown
        assert re.search(r'id="program-chexnet-torch" data-program="chexnet-torch" hidden disabled>', form)
        assert 'name="chexnet-torch.amp"' in form and 'name="chexnet.fp16"' in form
        answer = self.call("POST", "submit", body="template=chexnet-torch&gpus_per_node=1&chexnet-torch.amp=bf16"
                                                  "&chexnet-torch.channels_last=on&chexnet.fp16=on")
        assert answer.code == 302, answer.body
        given = self.api.given[-1]  # the other program's fields are not sent on
        assert (given["template"], given["amp"], given["channels_last"], "fp16" in given) == (
            "chexnet-torch", "bf16", "on", False), given
        spec = JobSpec(template="chexnet-torch", data_dir="/d", options=(("amp", "bf16"), ("channels_last", "on")))
        self.api.add("alice", "9", spec=spec)
        again = self.call("GET", "submit?from=9").body.decode()  # "run again" keeps the program and its fields
        assert '<option value="chexnet-torch" selected>' in again and '<option value="bf16" selected>' in again
        assert re.search(r'id="program-chexnet-torch" data-program="chexnet-torch">', again)

    def test_the_log_tail_hides_framework_warnings_and_says_how_many(self):
        job = self.api.add("alice", "7", "RUNNING")
        noise = "WARNING:absl:`lr` is deprecated in Keras optimizer, please use `learning_rate`.\n"
        (job.record.job_dir / "output.log").write_text("epoch 1/2\n" + noise * 3 + "epoch 2/2\n")
        tail = self.call("GET", "jobs/7/log?tail=10")
        assert tail.code == 200 and tail.body == b"epoch 1/2\nepoch 2/2\n" and tail.headers["X-Log-Hidden"] == "3"
        everything = self.call("GET", "jobs/7/log?tail=10&framework=1")
        assert everything.body.count(b"WARNING:absl") == 3 and "X-Log-Hidden" not in everything.headers
        whole = self.call("GET", "jobs/7/log")  # the whole log, as written
        assert whole.body.count(b"WARNING:absl") == 3 and "X-Log-Hidden" not in whole.headers
        page = self.call("GET", "jobs/7")
        assert b'<span id="log-hidden-note">(<span id="log-hidden">3</span>' in page.body, page.body[-1500:]

    def test_only_a_job_that_ended_badly_gets_a_red_badge(self):
        for job_id, state in (("1", "FAILED"), ("2", "TIMEOUT"), ("3", "COMPLETING"), ("4", "REQUEUED")):
            self.api.add("alice", job_id, state)
        page = self.call("GET", "jobs").body.decode()
        badges = {state: kind for kind, state in re.findall(r'<span class="badge (text-bg-\w+)"[^>]*>([A-Z_]+)<', page)}
        assert {state: badges.get(state) for state in ("FAILED", "TIMEOUT", "COMPLETING", "REQUEUED")} == {
            "FAILED": "text-bg-danger", "TIMEOUT": "text-bg-danger", "COMPLETING": "text-bg-secondary",
            "REQUEUED": "text-bg-secondary"}, badges

    def test_a_job_page_follows_the_job_until_it_has_ended(self):
        """Through the states squeue passes on the way (a page that stopped at COMPLETING never showed COMPLETED)."""
        following = {}
        for job_id, state in enumerate(("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "COMPLETED", "FAILED",
                                        "CANCELLED"), start=101):
            self.api.add("alice", str(job_id), state)
            page = self.call("GET", f"jobs/{job_id}").body.decode()
            following[state] = re.search(r'<div id="job"[^>]* data-live="1"', page) is not None
        assert following == {"PENDING": True, "CONFIGURING": True, "RUNNING": True, "COMPLETING": True,
                             "COMPLETED": False, "FAILED": False, "CANCELLED": False}

    def test_the_submit_form_shows_the_field_in_error(self):
        response = self.call("POST", "submit", user="bob", body="gpus_per_node=4&epochs=1")
        assert response.code == 400
        assert b'data-field="gpus_per_node"' in response.body and b"allowed: 0-0" in response.body
        ok = self.call("POST", "submit", body="gpus_per_node=2&epochs=1&chexnet.fp16=on")
        assert ok.code == 302 and "/services/portal/jobs/" in ok.headers["Location"]

    def test_a_burst_of_submits_does_not_hold_up_the_jobs_page(self):
        self.api.submits_held = threading.Event()
        self.api.add("alice", "7", "RUNNING")
        try:
            # ACTION_WORKERS held submits of as many users fill their pool (one user holds one worker at most; the
            # test client opens at most 10 connections at once). Users with an account here: the scheduler's person
            # is a Unix account (JobUser), which the board asks for before the quota check.
            users = [account.pw_name for account in pwd.getpwall()][:ACTION_WORKERS]
            assert len(users) == ACTION_WORKERS, users
            held = [self.http_client.fetch(self.get_url("/services/portal/api/jobs"), method="POST",
                                           headers={"X-Test-User": user}, body='{"gpus_per_node": 0}',
                                           raise_error=False) for user in users]

            async def until_the_actions_pool_is_full():
                while self.api.submitting < ACTION_WORKERS:
                    await asyncio.sleep(0.01)

            self.io_loop.run_sync(until_the_actions_pool_is_full, timeout=5)
            page = self.call("GET", "jobs")  # with one pool for both it waits behind them: a timeout
            assert page.code == 200 and b'data-job="7"' in page.body
        finally:
            self.api.submits_held.set()
        for future in held:
            assert self.io_loop.run_sync(lambda f=future: f, timeout=5).code == 201

    def test_a_second_submit_while_the_first_is_decided_is_a_429_that_says_so(self):
        self.api.submits_held = threading.Event()
        try:
            first = self.http_client.fetch(self.get_url("/services/portal/api/jobs"), method="POST",
                                           headers={"X-Test-User": "bob"}, body='{"gpus_per_node": 0}',
                                           raise_error=False)

            async def until_it_is_submitting():
                while self.api.submitting < 1:
                    await asyncio.sleep(0.01)

            self.io_loop.run_sync(until_it_is_submitting, timeout=5)
            second = self.call("POST", "api/jobs", body={"gpus_per_node": 0}, user="bob")
            assert second.code == 429, second.body
            said = json.loads(second.body)["error"]
            assert "bob's previous submit is still being decided" in said, said
            assert f"try again in {second.headers['Retry-After']} s" in said, (said, second.headers)
            form = self.call("POST", "submit", body="gpus_per_node=0&epochs=1", user="bob")
            assert form.code == 429 and b"still being decided" in form.body  # the form, shown again with why
            assert f"try again in {form.headers['Retry-After']} s".encode() in form.body, form.headers
        finally:
            self.api.submits_held.set()
        assert self.io_loop.run_sync(lambda: first, timeout=5).code == 201
        # Another user's submit beside a held one: tests/unit/portal/service/test_board.py (here the fake holds
        # every submit, so hers would wait out its 10 s).
        assert self.call("POST", "api/jobs", body={"gpus_per_node": 0}, user="alice").code == 201
        assert self.call("POST", "api/jobs", body={"gpus_per_node": 0}, user="bob").code == 201  # the next is fine

    def test_a_cancelled_slurm_job_is_checked_once_and_then_listed_without_asking(self):
        self.api.add("alice", "9", "PENDING")
        assert json.loads(self.call("GET", "api/jobs").body)["jobs"][0]["state"] == "PENDING"
        self.api.checks.clear()
        assert self.call("DELETE", "api/jobs/9").code == 204
        # A job the list knows is not read again to cancel it: the cancel itself runs as the owner (the fake
        # fake scheduler stands for Slurm's refusal of anyone else's job).
        assert self.api.checks == [] and self.api.fake_scheduler.cancelled == ["9"]
        for _ in range(2):
            assert json.loads(self.call("GET", "api/jobs").body)["jobs"][0]["state"] == "CANCELLED"
        assert self.api.fake_scheduler.asked == ["9"]  # the first list's; none after the cancel

    def test_a_job_not_listed_yet_is_read_once_to_cancel_it_and_only_as_its_owner(self):
        self.api.add("alice", "9", "PENDING")
        assert self.call("DELETE", "api/jobs/9", user="bob").code == 404
        assert self.call("DELETE", "api/jobs/9").code == 204
        # the owner is asked by the cancel itself, not by get too
        assert self.api.checks == [False, False] and self.api.fake_scheduler.cancelled == ["9"]

    def test_the_cancel_form_cancels_and_returns_to_the_list(self):
        self.api.add("alice", "7", "RUNNING")
        response = self.call("POST", "jobs/7/cancel", body="")
        assert response.code == 302 and self.api.fake_scheduler.cancelled == ["7"]
        assert self.call("POST", "jobs/7/cancel", user="bob", body="").code == 404
