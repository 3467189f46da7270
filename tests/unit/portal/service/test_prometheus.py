"""The portal's Prometheus endpoint (portal.service.prometheus, portal.service.operations): only a token with
read:metrics reads it; per-user series only for a reader who may list every user; GPU-seconds from the ledger's
totals by the group whose quota applies; the queue by state and program; refusals and the watch's events counted
with labels of few values."""

from __future__ import annotations

import dataclasses
import runpy
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.testing import AsyncHTTPTestCase

from portal import prometheus_access
from portal.config import PortalConfig
from portal.config_values import ConfigError
from portal.errors import SchedulerError
from portal.gpus.agent import write
from portal.gpus.ledger import Ledger
from portal.gpus.readings import GpuReading, NodeReading
from portal.records.spec import JobSpecError
from portal.scheduler.cluster import QueuedJob
from portal.scheduler.snapshot import ClusterSnapshot
from portal.service.app import make_app
from portal.service.base import PortalHandler
from portal.service.board import JobBoard, SubmitInProgress
from portal.service.operations import METRICS_REFUSED, MetricsHandler
from portal.service.prometheus import REGISTRY, exposition, may_read, program_of
from portal.service.refusals import reason_of, refusal_logged
from tests.unit.helpers import FakeDirectory, FakeJobsAPI, TestHeaderUser, slurm_cache, squeue_free

REPO = Path(__file__).resolve().parents[4]
GROUPS = {"alice": ("datascientists", "gpu-users"), "bob": ("datascientists",)}
QUEUE = {"7": QueuedJob("7", "alice", "RUNNING", "1:00", 1, 1, "None", name="spawner-jupyterhub", gpus=1,
                        server=True),
         "8": QueuedJob("8", "alice", "RUNNING", "1:00", 2, 1, "None", name="chexnet", gpus=2),
         "9": QueuedJob("9", "bob", "PENDING", "0:00", 1, 1, "Resources", name="chexnet-torch-sweep", gpus=1,
                        partition="gpu"),  # submitted: 5 minutes before each test's scrape (`queue`)
         "10": QueuedJob("10", "bob", "PENDING", "0:00", 1, 1, "Priority", name="my $(job)", gpus=1),
         "11_0": QueuedJob("11_0", "bob", "RUNNING", "2:00", 1, 1, "None", name="chexnet-torch-sweep", gpus=1,
                           trials_running=1)}


def queue() -> dict[str, QueuedJob]:
    """QUEUE with its waiting sweep submitted 5 minutes ago, 2 of its trials waiting."""
    return {**QUEUE, "9": dataclasses.replace(QUEUE["9"], submitted=int(time.time()) - 300, trials_waiting=2)}


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of an exposition."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text.decode()) for s in family.samples}


def ledger_with_readings(folder: Path) -> None:
    """alice: one GPU busy 50 % for 10 s, then idle 10 s; bob: one GPU unknown for 10 s."""
    folder.mkdir(mode=0o700, exist_ok=True)
    now = time.time()
    for at, busy in ((now - 10, 50.0), (now, 0.0)):
        write(folder, NodeReading("n1", at, 10.0, "standin", (GpuReading(0, busy=busy, holder="8", user="alice"),
                                                               GpuReading(1, busy=None, holder="9", user="bob"))))
        Ledger(folder).count(at)


@pytest.mark.parametrize(("identity", "expected"), [
    ({"name": "alice", "scopes": ["access:services!service=portal"]}, (False, False)),
    ({"name": "prometheus", "kind": "service", "scopes": ["read:metrics"]}, (True, False)),
    ({"name": "prometheus", "kind": "service", "scopes": ["read:metrics", "read:users"]}, (True, True)),
    ({"name": "admin", "admin": True, "scopes": ["read:metrics"]}, (True, True)),
    ({"name": "admin", "admin": True}, (False, True)),  # an admin's cookie holds no read:metrics: refused
])
def test_only_read_metrics_reads_and_only_who_may_list_users_sees_them(identity, expected):
    assert may_read(identity) == expected


def test_a_jobs_program_is_one_of_the_registered_or_other_or_unknown_where_the_queue_does_not_say():
    names = ("chexnet", "chexnet-torch")
    assert [program_of(n, names) for n in ("chexnet", "chexnet-torch-sweep", "my $(job)", "chexnet-sweep-sweep",
                                           "training")] == ["chexnet", "chexnet-torch", "other", "other", "unknown"]


def test_gpu_seconds_by_group_or_user_and_the_queue_by_state_program_and_wait(tmp_path):
    ledger_with_readings(tmp_path)
    cfg = PortalConfig()
    grouped = samples(exposition(cfg, tmp_path, lambda: ClusterSnapshot(0.0, queue()), GROUPS, per_user=False))
    assert grouped[("dsportal_gpu_held_seconds_total", (("group", "gpu-users"), ("scheduler", "slurm")))] == 20.0
    assert grouped[("dsportal_gpu_busy_seconds_total", (("group", "gpu-users"), ("scheduler", "slurm")))] == 5.0
    assert grouped[("dsportal_gpu_idle_seconds_total", (("group", "gpu-users"), ("scheduler", "slurm")))] == 10.0
    assert grouped[("dsportal_gpu_unknown_seconds_total", (("group", "none"), ("scheduler", "slurm")))] == 20.0
    assert not [key for key in grouped if ("user", "alice") in key[1]]  # no user's name without read:users
    jobs = {dict(labels)["program"] + "/" + dict(labels)["state"]: value
            for (name, labels), value in grouped.items() if name == "dsportal_jobs"}
    assert jobs == {"jupyterlab/RUNNING": 1, "chexnet/RUNNING": 1, "chexnet-torch/PENDING": 1, "other/PENDING": 1,
                    "chexnet-torch/RUNNING": 1}
    trials = {dict(labels)["program"] + "/" + dict(labels)["state"]: value
              for (name, labels), value in grouped.items() if name == "dsportal_sweep_trials"}
    assert trials == {"chexnet-torch/RUNNING": 1, "chexnet-torch/PENDING": 2}  # bob's sweep: 1 running, 2 may start
    assert grouped[("dsportal_scheduler_up", (("scheduler", "slurm"),))] == 1
    gpu, unsaid = (("kind", "job"), ("partition", "gpu"), ("scheduler", "slurm")), \
        (("kind", "job"), ("partition", ""), ("scheduler", "slurm"))
    assert (grouped[("dsportal_queue_pending", gpu)], grouped[("dsportal_queue_pending", unsaid)]) == (1, 1)
    assert 299 <= grouped[("dsportal_queue_oldest_wait_seconds", gpu)] <= 310  # submitted 5 minutes ago
    assert grouped[("dsportal_queue_oldest_wait_seconds", unsaid)] == 0  # no submit time said: no wait known
    mine = samples(exposition(cfg, tmp_path, lambda: ClusterSnapshot(0.0, queue()), GROUPS, per_user=True))
    assert mine[("dsportal_gpu_held_seconds_total", (("group", "gpu-users"), ("scheduler", "slurm"),
                                                     ("user", "alice")))] == 20.0

    def down() -> ClusterSnapshot:
        raise SchedulerError("squeue: slurmctld is not answering")
    unanswered = samples(exposition(cfg, tmp_path, down, GROUPS, per_user=False))
    assert unanswered[("dsportal_scheduler_up", (("scheduler", "slurm"),))] == 0
    assert not [key for key in unanswered if key[0] == "dsportal_jobs"]


def test_a_refusal_is_counted_by_a_reason_of_few_values():
    assert reason_of(JobSpecError("time_limit", "too much")) == "time_limit"
    assert reason_of(JobSpecError("x" * 50 + "<script>", "unknown field")) == "other-field"  # the user's own name
    assert reason_of(SubmitInProgress("busy")) == "SubmitInProgress"
    before = REGISTRY.get_sample_value("dsportal_refusals_total", {"action": "submit", "reason": "time_limit"}) or 0
    with pytest.raises(JobSpecError), refusal_logged("submit", "submit by alice"):
        raise JobSpecError("time_limit", "this job can cost up to 16 GPU-hours")
    assert REGISTRY.get_sample_value("dsportal_refusals_total", {"action": "submit", "reason": "time_limit"}) == \
        before + 1


class Roster(FakeDirectory):
    async def roster(self):
        return {name: {"name": name, "groups": list(groups)} for name, groups in GROUPS.items()}


class MetricsEndpointTest(TestHeaderUser, AsyncHTTPTestCase):
    def get_app(self):
        self.tmp = Path(self.tmp_dir)
        cfg = PortalConfig()
        cluster = slurm_cache(cfg, squeue_free)
        app = make_app(cfg, prefix="/services/portal/", hub_base_url="/", cluster=cluster,
                       board=JobBoard(cfg, cluster, api=FakeJobsAPI(self.tmp)), directory=Roster())
        app.settings["gpu_readings"] = self.tmp / "gpus"
        ledger_with_readings(self.tmp / "gpus")
        return app

    def setUp(self):
        super().setUp()
        self._identify = MetricsHandler.identify

        async def with_scopes(handler):  # the hub's model of the token: its scopes from a header here
            name = handler.request.headers.get("X-Test-User")
            return {"name": name, "scopes": handler.request.headers.get("X-Test-Scopes", "").split()} if name else None
        MetricsHandler.identify = with_scopes

    def tearDown(self):
        MetricsHandler.identify = self._identify
        super().tearDown()

    def scrape(self, user: str | None, scopes: str = ""):
        headers = {"X-Test-User": user, "X-Test-Scopes": scopes} if user else {}
        return self.fetch("/services/portal/metrics", headers=headers)

    def test_a_token_with_read_metrics_reads_the_endpoint_and_others_are_refused_saying_why(self):
        assert self.scrape(None).code == 403
        refused = self.scrape("alice")
        assert refused.code == 403 and METRICS_REFUSED in refused.body.decode()
        answer = self.scrape("prometheus", "read:metrics access:services!service=portal")
        assert answer.code == 200 and answer.headers["Content-Type"].startswith("text/plain; version=")
        found = samples(answer.body)
        assert found[("dsportal_gpu_held_seconds_total", (("group", "gpu-users"), ("scheduler", "slurm")))] == 20.0
        assert found[("dsportal_jobs", (("kind", "job"), ("program", "chexnet"), ("scheduler", "slurm"),
                                        ("state", "RUNNING")))] == 1  # squeue_free's queue: alice's job
        per_user = samples(self.scrape("prometheus", "read:metrics read:users").body)
        assert ("dsportal_gpu_held_seconds_total", (("group", "gpu-users"), ("scheduler", "slurm"),
                                                    ("user", "alice"))) in per_user


def test_the_hub_registers_the_sites_prometheus_with_read_metrics_from_a_token_only_root_reads(monkeypatch, tmp_path):
    from traitlets.config import Config

    token = tmp_path / "metrics-token"
    token.write_text("0123456789abcdef0123\n")
    token.chmod(0o644)
    with pytest.raises(ConfigError, match=r"metrics_token_file .* is mode 0644; allowed: 0600"):
        prometheus_access.metrics_token(PortalConfig(metrics_token_file=str(token)))
    token.chmod(0o600)
    monkeypatch.setenv("DSPORTAL_METRICS_TOKEN_FILE", str(token))
    config = Config()
    runpy.run_path(str(REPO / "jupyterhub_config.py"), init_globals={"get_config": lambda: config})
    (service,) = [s for s in config.JupyterHub.services if s["name"] == "prometheus"]
    (role,) = [r for r in config.JupyterHub.load_roles if r["name"] == "metrics"]
    assert service == {"name": "prometheus", "api_token": "0123456789abcdef0123"}
    assert role["scopes"] == ["read:metrics", "access:services!service=portal"] and role["services"] == ["prometheus"]
    token.write_text("short\n")
    with pytest.raises(ConfigError, match="holds no token of 16 characters or more"):
        prometheus_access.metrics_token(PortalConfig(metrics_token_file=str(token)))


class ServiceTokenTest(TestHeaderUser, AsyncHTTPTestCase):
    """A hub service's token (the site's Prometheus, named as a directory user might be) is no user's."""

    def get_app(self):
        cfg = PortalConfig()
        cluster = slurm_cache(cfg, squeue_free)
        return make_app(cfg, prefix="/services/portal/", hub_base_url="/", cluster=cluster,
                        board=JobBoard(cfg, cluster, api=FakeJobsAPI(Path(self.tmp_dir))), directory=Roster())

    def test_a_services_token_reads_no_page_and_no_api(self):
        async def service(handler):
            return {"name": "alice", "kind": "service", "scopes": ["read:metrics", "access:services!service=portal"]}
        saved, PortalHandler.identify = PortalHandler.identify, service
        try:
            for path in ("api/jobs", "jobs", "api/usage"):
                answer = self.fetch(f"/services/portal/{path}", follow_redirects=False)
                assert answer.code == 403 and b"token reads the metrics alone" in answer.body, (path, answer.body)
        finally:
            PortalHandler.identify = saved
