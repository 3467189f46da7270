"""The experiments page and its API (portal.service.experiment_handlers) over the board's reads
(portal.service.experiment_reads), with portal.jobs, Slurm and the hub replaced by fakes: alice compares two single
jobs and a sweep's trials; bob never sees or opens her runs; the admin opens her comparison's link; names and tags
are hers alone; hostile arguments and files are answered in words."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

from tornado.testing import AsyncHTTPTestCase

from portal.config import PortalConfig
from portal.records.spec import JobSpec
from portal.service.app import make_app
from portal.service.base import PortalHandler
from portal.service.board import JobBoard
from portal.service.run_labels import RunLabels
from programkit.model_card import CARD_FILE
from tests import special_files
from tests.cards import a_card
from tests.unit.helpers import FakeDirectory, FakeJobsAPI, TestHeaderUser, slurm_cache, squeue_free

SWEEP = {"space": {"lr": {"low": 1e-8, "high": 1e-2, "log": True}}, "trials": 3}


def epochs_file(directory: Path, *lines: tuple[int, float, float]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "epochs.jsonl").write_text("".join(
        json.dumps({"epoch": e, "logdir": "/l", "images_per_sec": 50.0 * e, "seconds": 600.0,
                    "scalars": {"auroc/mean": mean, "loss/val": loss, "auroc/Cardiomegaly": mean + 0.1}}) + "\n"
        for e, mean, loss in lines))


class ExperimentsTest(TestHeaderUser, AsyncHTTPTestCase):
    def get_app(self):
        self.tmp = Path(self.tmp_dir)
        self.api = FakeJobsAPI(self.tmp)
        cfg = PortalConfig()
        self.board = JobBoard(cfg, slurm_cache(cfg, squeue_free), api=self.api)
        self.board.run_labels = RunLabels(self.tmp / "state" / "run-labels.sqlite3")
        first = self.api.add("alice", "42", spec=JobSpec(gpus_per_node=2, data_dir="/d", batch_size=16))
        second = self.api.add("alice", "43", spec=JobSpec(gpus_per_node=2, data_dir="/d", batch_size=32))
        sweep = self.api.add("alice", "50", sweep=SWEEP)
        self.api.add("bob", "60")
        epochs_file(Path(first.job_dir) / "checkpoints", (1, 0.6, 0.5), (2, 0.8, 0.3), (3, 0.7, 0.35))
        epochs_file(Path(second.job_dir) / "checkpoints", (1, 0.65, 0.45))
        epochs_file(Path(sweep.job_dir) / "trials" / "0" / "checkpoints", (1, 0.6, 0.4), (2, 0.85, 0.3))
        card = a_card()
        (Path(first.job_dir) / "checkpoints" / CARD_FILE).write_text(json.dumps(card))
        card["code"]["git_commit"] = "0123abcd"
        (Path(second.job_dir) / "checkpoints" / CARD_FILE).write_text(json.dumps(card))
        return make_app(cfg, prefix="/services/portal/", hub_base_url="/", cluster=self.board.cluster,
                        board=self.board, directory=FakeDirectory(), notebooks_dir=self.tmp)

    def call(self, path, user="alice", method="GET", body=None, headers=None):
        return self.fetch(f"/services/portal/{path}", method=method, follow_redirects=False, body=body,
                          headers={"X-Test-User": user, **(headers or {})}, allow_nonstandard_methods=True)

    def answer(self, path, user="alice", code=200):
        response = self.call(path, user)
        assert response.code == code, response.body
        return json.loads(response.body)

    def test_alice_lists_her_single_jobs_and_each_trial_of_her_sweep_and_filters_them(self):
        runs = self.answer("api/experiments")["runs"]
        assert sorted(r["run"] for r in runs) == ["42", "43", "50:0", "50:1", "50:2"]
        assert {r["owner"] for r in runs} == {"alice"}
        assert [r["run"] for r in self.answer("api/experiments?where=batch_size%3D32")["runs"]] == ["43"]
        assert [r["run"] for r in self.answer("api/experiments?where=lr%3C0.0001")["runs"]] == ["50:1"]
        assert self.answer("api/experiments?state=PENDING")["runs"][0]["run"] == "50:2"
        page = self.call("experiments").body.decode()
        assert 'value="50:1"' in page and 'aria-label="Compare sweep 50, task 1"' in page and "Experiments" in page

    def test_alice_compares_two_single_jobs_and_a_sweeps_trial(self):
        shown = self.answer("api/experiments/compare?runs=42,43,50:0")
        assert [r["run"] for r in shown["runs"]] == ["42", "43", "50:0"]
        # The trial's lr is the single jobs' default, which their cards record: no difference, so not shown.
        assert [h["name"] for h in shown["hyperparameters"]] == ["batch_size"], shown["hyperparameters"]
        every = {h["name"]: h for h in self.answer("api/experiments/compare?runs=42,43,50:0&all=1")["hyperparameters"]}
        assert every["lr"]["text"] == ["0.001 (default)", "0.001 (default)", "0.001"], every["lr"]
        mean = next(m for m in shown["metrics"] if m["key"] == "auroc/mean")["runs"]
        assert (mean[0]["best"], mean[0]["best_epoch"], mean[0]["final"], mean[0]["final_epoch"]) == (0.8, 2, 0.7, 3)
        assert shown["lineage_differences"] == ["git commit"]
        assert shown["runs"][2]["lineage"]["note"].startswith("no model card yet")
        assert shown["runs"][0]["wall_time"]["gpu_hours"] == 1.0  # 2 GPUs x 3 epochs of 10 minutes
        cardio = next(r for r in shown["per_class_auroc"] if r["class"] == "Cardiomegaly")
        assert cardio["paper"] == 0.9248 and [round(v, 2) for v in cardio["runs"]] == [0.9, 0.75, 0.95]
        assert shown["tensorboard"][0]["url"].startswith("/user/alice/tensorboard/?runFilter=")
        assert shown["series"]["loss/val"][0]["points"] == [[1, 0.5], [2, 0.3], [3, 0.35]]
        page = self.call("experiments/compare?runs=42,43,50:0").body.decode()
        for part in ('id="params"', 'data-param="batch_size"', "best 0.8 (epoch 2)", "final 0.7 (epoch 3)",
                     'id="per-class"', "Differs between runs: git commit", "Mean AUROC per epoch",
                     "no model card yet", 'scope="col"'):
            assert part in page, part
        assert 'data-param="template"' not in page
        assert 'data-param="template"' in self.call("experiments/compare?runs=42,43&all=1").body.decode()

    def test_bob_gets_404_for_her_runs_on_the_page_the_comparison_and_the_api_and_never_lists_them(self):
        assert [r["run"] for r in self.answer("api/experiments", "bob")["runs"]] == ["60"]
        for path in ("api/experiments/compare?runs=42", "api/experiments/compare?runs=60,50:0",
                     "experiments/compare?runs=42,43"):
            response = self.call(path, "bob")
            assert response.code == 404, (path, response.body)
            assert b"0.8" not in response.body and b"alice" not in response.body
        page = self.call("experiments", "bob").body.decode()
        assert 'data-run="60"' in page and 'data-run="42"' not in page and 'data-run="50:0"' not in page

    def test_the_admin_opens_alices_comparison_link_and_lists_everyones_runs(self):
        shown = self.answer("api/experiments/compare?runs=42,50:0", "admin")
        assert [r["owner"] for r in shown["runs"]] == ["alice", "alice"]
        assert self.call("experiments/compare?runs=42,50:0", "admin").code == 200
        owners = {r["owner"] for r in self.answer("api/experiments", "admin")["runs"]}
        assert owners == {"alice", "bob"}

    def test_names_and_tags_are_set_by_the_owner_alone_with_xsrf_from_the_page(self):
        body = json.dumps({"run": "50:1", "name": "tiny lr", "tags": ["lr-study"]})
        assert self.call("api/experiments/label", method="POST", body=body).code == 200
        assert self.call("api/experiments/label", "bob", method="POST", body=body).code == 404
        assert self.call("api/experiments/label", "admin", method="POST", body=body).code == 404
        run = next(r for r in self.answer("api/experiments?tag=lr-study")["runs"])
        assert (run["run"], run["name"], run["tags"], run["label"]) == ("50:1", "tiny lr", ["lr-study"], "tiny lr")
        assert [r["run"] for r in self.answer("api/experiments?q=TINY")["runs"]] == ["50:1"]
        PortalHandler.check_xsrf_cookie = self.real_xsrf_check  # the page's form: refused without its _xsrf
        refused = self.call("experiments/label", method="POST", body="run=42&name=x")
        assert refused.code == 403 and b"_xsrf" in refused.body
        page = self.call("experiments")  # the form's token, and the cookie it belongs to
        token = re.search(r'name="_xsrf" value="([^"]+)"', page.body.decode()).group(1)
        cookie = next(c.split(";")[0] for c in page.headers.get_list("Set-Cookie") if c.startswith("_xsrf="))
        posted = self.call("experiments/label", method="POST", body=f"run=42&name=base&tags=a,b&_xsrf={token}",
                           headers={"Cookie": cookie})
        assert posted.code == 302, posted.body
        assert self.answer("api/experiments?q=base")["runs"][0]["tags"] == ["a", "b"]

    def test_hostile_arguments_are_400_naming_the_field(self):
        for path, field in (("api/experiments/compare", "runs"), ("api/experiments/compare?runs=../bob", "runs"),
                            ("api/experiments/compare?runs=" + "1," * 3000, "runs"),
                            ("api/experiments/compare?runs=50", "runs"), ("api/experiments/compare?runs=42:1", "runs"),
                            ("api/experiments/compare?runs=50:7", "runs"),
                            ("api/experiments/compare?runs=42&all=yes", "all"),
                            ("api/experiments?where=" + quote("lr<'1'"), "where"),
                            ("api/experiments?since=2026-02-30", "since"), ("api/experiments?q=a&q=b", "q"),
                            ("api/experiments?state=" + "A" * 5000, "state")):
            response = self.call(path)
            assert response.code == 400, (path, response.body)
            assert json.loads(response.body)["field"] == field, (path, response.body)
        page = self.call("experiments?where=lr%3C%3C1")
        assert page.code == 400 and b"where" in page.body
        for body, field in (("[]", "label"), ('{"run": "42", "name": "a\\nb"}', "name"),
                            ('{"run": "42", "tags": ["Bad Tag"]}', "tags"), ('{"run": 42}', "run"),
                            ('{"run": "42", "owner": "bob"}', "owner"), ('{"run": "42,43"}', "run")):
            response = self.call("api/experiments/label", method="POST", body=body)
            assert (response.code, json.loads(response.body).get("field")) == (400, field), (body, response.body)

    def test_a_fifo_or_a_link_as_the_epoch_record_and_a_garbage_card_are_said_in_words(self):
        record = Path(self.api.owned["alice"][1].job_dir) / "checkpoints"
        (record / "epochs.jsonl").unlink()
        special_files.fifo(record / "epochs.jsonl")
        (Path(self.api.owned["alice"][0].job_dir) / "checkpoints" / CARD_FILE).write_text('{"format": 5}')
        shown = self.answer("api/experiments/compare?runs=42,43")
        assert shown["runs"][1]["epochs_problem"].startswith("its per-epoch record is not read: a fifo")
        assert shown["runs"][0]["lineage"]["note"].startswith("its model card is unreadable: ")
        (record / "epochs.jsonl").unlink()
        special_files.device_link(record / "epochs.jsonl")
        self.board._metrics = type(self.board._metrics)(0.0, self.board._clock)  # read again
        shown = self.answer("api/experiments/compare?runs=43")
        assert "symbolic link" in shown["runs"][0]["epochs_problem"]
        assert shown["metrics"][0]["runs"][0]["note"] == shown["runs"][0]["epochs_problem"]
