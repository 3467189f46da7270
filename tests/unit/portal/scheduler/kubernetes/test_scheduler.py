"""The dashboard on Kubernetes, without a cluster: the board asks the scheduler for its own person (the hub's user
never reaches a scheduler: issue 39's submit 500), and every scheduler's job ids are routes (its job pages 404)."""

from __future__ import annotations

import re

import pytest

from portal.config import PortalConfig
from portal.jobs import UnreadableJob
from portal.scheduler.kubernetes.client import KubeUser
from portal.scheduler.kubernetes.scheduler import KubernetesScheduler, new_k8s_id
from portal.scheduler.registry import SCHEDULERS, job_id_patterns, scheduler_class, scheduler_of_job
from portal.scheduler.snapshot import ClusterCache, ClusterSnapshot
from portal.service.app import JOB_ID
from portal.service.board import JobBoard
from portal.service.hub_user import HubUser

CFG = PortalConfig(scheduler="kubernetes", k8s_gpu_types=("t4",), gpu_quota={"gpu-users": 4})


class FakeCore:
    """CoreV1Api's namespaced pod list, as the API server answers it; it records who asked."""

    def __init__(self, pods: list[dict]):
        self.pods, self.asked = pods, []

    def list_namespaced_pod(self, namespace, **query):
        self.asked.append(namespace)
        return {"items": self.pods}


def pod(name: str, gpus: int) -> dict:
    return {"metadata": {"name": name, "namespace": "dsportal-u-alice", "labels": {}},
            "status": {"phase": "Pending"},  # a server of an hour's wall time, not started yet
            "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
                     "activeDeadlineSeconds": 3600}}


def test_the_board_hands_the_kubernetes_scheduler_its_own_person_never_the_hubs_user():
    core = FakeCore([pod("jupyter-alice", 1)])
    board = JobBoard(CFG, ClusterCache(CFG, read=lambda: ClusterSnapshot(taken_at=0.0)))
    seen = []

    def apis(user):
        seen.append(user)
        return None, core, None
    board.scheduler._apis = apis  # type: ignore[attr-defined]  (the API server's answers, without a server)
    limits = board.limits(HubUser("alice", ("datascientists", "gpu-users")))
    assert [type(user) for user in seen] == [KubeUser] and seen[0].name == "alice" and not seen[0].is_caller
    assert seen[0].groups == ("datascientists", "gpu-users")
    assert (limits.quota.limit, limits.quota.in_use, limits.partition) == (4, 1, "t4")  # her server's GPU counts
    assert limits.gpu_minutes_ahead == 60  # and its hour, charged ahead against her weekly budget
    assert core.asked == ["dsportal-u-alice"]


@pytest.mark.parametrize("job_id, scheduler", [("42", "slurm"), ("local-20261127T101010-abcdef", "local"),
                                               ("k8s-20261127-101010-abcdef", "kubernetes")])
def test_every_schedulers_job_ids_are_routes_and_name_their_scheduler(job_id, scheduler):
    assert re.fullmatch(JOB_ID, job_id)
    assert scheduler_of_job(job_id) == scheduler
    assert scheduler_of_job(new_k8s_id()) == "kubernetes"  # what a submit names


@pytest.mark.parametrize("job_id", ["0042", "42/../7", "k8s-2026-1127-abcdef", "local-x", "", "../bob",
                                    "k8s-" + "1" * 8, "42\n"])
def test_what_no_scheduler_would_name_is_no_route(job_id):
    assert not re.fullmatch(JOB_ID, job_id)
    assert scheduler_of_job(job_id) is None


def test_the_routes_come_from_the_schedulers_own_patterns():
    assert set(job_id_patterns()) == set(SCHEDULERS)
    assert KubernetesScheduler.job_ids.pattern.removeprefix("^").removesuffix(r"\Z") in JOB_ID
    for name in SCHEDULERS:
        assert scheduler_class(name).job_ids.pattern.startswith("^")  # anchored, as a path component needs


def test_a_kubernetes_dry_run_needs_no_api_server_and_says_it_was_not_checked(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    from portal.jobs import render

    text = render({"nodes": 2, "gpus_per_node": 1, "epochs": 1}, scheduler="kubernetes", user="alice",
                  groups=["gpu-users"], cfg=CFG)
    assert text.startswith("# Checked against the configured limits") and "kind: Job" in text
    with pytest.raises(Exception, match="gpus_per_node"):  # the configured quota still holds
        render({"nodes": 2, "gpus_per_node": 4}, scheduler="kubernetes", user="alice", groups=["gpu-users"], cfg=CFG)


def test_an_unreadable_record_is_neither_a_card_nor_a_sweep():
    broken = UnreadableJob("7", "alice", "/home/alice/jobs/x/7", "not JSON")
    assert broken.plan is None
    with pytest.raises(Exception, match="not JSON|record"):
        broken.model_card(None)


def node(name: str, pool: str = "t4", gpus: str = "4", ready: str = "True", cordoned: bool = False) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia": pool}}, "spec": {"unschedulable": cordoned},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": gpus},
                       "conditions": [{"type": "Ready", "status": ready}],
                       "addresses": [{"type": "InternalIP", "address": "198.19.16.2"}]}}


def bound(name: str, node_name: str, namespace: str = "dsportal-u-alice", cpu: str = "2", memory: str = "3Gi",
          gpus: str = "2", phase: str = "Running", job: str = "") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": {"dsportal/job-id": job} if job else {}},
            "status": {"phase": phase, "startTime": "2026-11-27T10:00:00Z"},
            "spec": {"nodeName": node_name, "containers": [
                {"resources": {"requests": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus}}}]}}


@pytest.mark.parametrize("text, value", [("250m", 0.25), ("2", 2.0), ("3Gi", 3 * 2**30), ("1G", 1e9), ("512Mi", 2**29),
                                         ("1.5", 1.5), ("", 0.0), ("1e3", 0.0), ("-1", 0.0), ("3 Gi", 0.0),
                                         (None, 0.0), ({"cpu": 1}, 0.0), ("９", 0.0)])
def test_quantities_are_read_as_the_api_server_writes_them_and_anything_else_is_nothing(text, value):
    from portal.scheduler.kubernetes.nodes import quantity

    assert quantity(text) == value


def test_each_pool_has_its_nodes_with_what_their_pods_leave_free():
    from portal.scheduler.kubernetes.nodes import node_pools

    nodes = [node("kubet-node2"), node("kubet-node1"), node("other", pool="v100"), node("cpu-only", pool=""),
             node("down", ready="False"), node("cordoned", cordoned=True)]
    pods = [bound("w-1", "kubet-node1"), bound("w-2", "kubet-node1", cpu="500m", memory="1Gi", gpus="1"),
            bound("done", "kubet-node2", phase="Succeeded"), bound("unbound", "")]
    t4, v100 = node_pools(nodes, pods, "nvidia", ("t4", "v100"))
    assert (t4.name, t4.default, v100.default) == ("t4", True, False)
    assert [n.name for n in t4.nodes] == ["cordoned", "down", "kubet-node1", "kubet-node2"]
    one = {n.name: n for n in t4.nodes}["kubet-node1"]
    assert (one.gpus, one.free_gpus, one.cpus, one.free_cpus, one.memory_mb, one.free_memory_mb) == \
        (4, 1, 8, 5, 16384, 12288)
    assert {n.name: n.free_gpus for n in t4.nodes}["kubet-node2"] == 4  # an ended pod holds nothing
    assert [n.name for n in t4.usable_nodes] == ["kubet-node1", "kubet-node2"]
    assert [n.name for n in v100.nodes] == ["other"]


def test_the_start_warning_on_kubernetes_names_what_holds_the_nodes():
    from portal.records.spec import JobSpec

    core = FakeCore([])
    core.list_pod_for_all_namespaces = lambda **query: {"items": [
        bound("jupyter-alice", "kubet-node1", gpus="3"), bound("k8s-x-workers-a", "kubet-node2", gpus="3",
                                                                namespace="dsportal-u-bob", job="k8s-x")]}
    core.list_node = lambda **query: {"items": [node("kubet-node1"), node("kubet-node2")]}
    scheduler = KubernetesScheduler(CFG)
    scheduler._apis = lambda user: (None, core, None)  # type: ignore[method-assign]
    snapshot = scheduler.snapshot()
    two = JobSpec(nodes=2, gpus_per_node=2, cpus_per_task=1, memory_gb=3)
    assert scheduler.start_note(two, "alice", snapshot) == (
        "will wait for your server (job jupyter-alice) to end: kubet-node1 has 1 of 4 GPUs free; "
        "kubet-node2 has 1 of 4 GPUs free")
    assert scheduler.start_note(JobSpec(nodes=1, gpus_per_node=1, cpus_per_task=1, memory_gb=3), "alice",
                                snapshot) == ""
    assert scheduler.start_note(two, "alice", ClusterSnapshot(taken_at=0.0)) == ""  # no nodes known: cannot tell


class Refusing:
    """The API server's answer to a user in a namespace where no role of theirs is bound: 403 for every call."""

    def __getattr__(self, name):
        def refuse(*args, **kwargs):
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=403, reason="Forbidden")
        return refuse


@pytest.mark.parametrize("exists", [False, True])
def test_a_user_without_a_namespace_has_no_jobs_and_holds_nothing_and_a_refusal_elsewhere_is_one(monkeypatch,
                                                                                               exists):
    from portal.errors import JobNotFound
    from portal.scheduler.kubernetes import scheduler as module
    from portal.scheduler.kubernetes.errors import KubernetesError

    monkeypatch.setattr(module, "namespace_exists", lambda api, cfg, user: exists)
    scheduler = KubernetesScheduler(CFG, client_for=lambda cfg, user: None)
    scheduler._apis = lambda user: (Refusing(), Refusing(), Refusing())  # type: ignore[method-assign]
    admin = scheduler.person("admin", ["admins"])
    if exists:  # her namespace is there and refuses her: that is an error to show, never "no jobs"
        with pytest.raises(KubernetesError, match="403"):
            scheduler.records(admin)
        with pytest.raises(KubernetesError, match="403"):
            scheduler.limits(admin)
        return
    assert scheduler.records(admin) == []
    assert scheduler.limits(admin).quota.in_use == 0
    with pytest.raises(JobNotFound):
        scheduler.load(admin, "k8s-20261127-101010-abcdef")


def test_a_caller_that_may_not_read_namespaces_keeps_the_refusal_it_got(monkeypatch):
    """In a user's own pod (its service account reads no namespaces), a 403 while the API server's roles load
    stays that 403, about the call made, for the notebook's watch to ask again."""
    from portal.scheduler.kubernetes import scheduler as module
    from portal.scheduler.kubernetes.errors import KubernetesError

    def refused(api, cfg, user):
        raise KubernetesError("the Kubernetes API refused namespace dsportal-u-alice: 403", status=403)
    monkeypatch.setattr(module, "namespace_exists", refused)
    scheduler = KubernetesScheduler(CFG, client_for=lambda cfg, user: None)
    scheduler._apis = lambda user: (Refusing(), Refusing(), Refusing())  # type: ignore[method-assign]
    with pytest.raises(KubernetesError, match="listing Jobs in dsportal-u-alice"):
        scheduler.records(scheduler.person("alice", ["gpu-users"]))


def test_the_dashboards_stamp_of_a_users_jobs_is_the_watchs_count_for_their_namespace(monkeypatch):
    """The board asks the scheduler for it (KeepsRecords.records_stamp, through portal.service.scans), never the
    watch itself; the watch is this process's one (watch.jobs_watch)."""
    from portal.scheduler.kubernetes import scheduler as module
    from portal.scheduler.kubernetes.watch import WatchStamp
    from portal.service.scans import change_stamps

    class Watch:
        def stamp(self, namespace: str) -> WatchStamp | None:
            return WatchStamp(epoch=1, changes=3) if namespace == CFG.user_namespace("alice") else None

    watches: list[PortalConfig] = []
    monkeypatch.setattr(module, "jobs_watch", lambda cfg: watches.append(cfg) or Watch())
    stamp = change_stamps(CFG)
    assert stamp("alice") == WatchStamp(epoch=1, changes=3) and stamp("alice").same_as(stamp("alice"))
    assert stamp("bob") is None  # not counted now: the board lists bob's jobs at every rescan
    assert watches == [CFG] * 4
