"""The dashboard's shared Slurm snapshot: the queue from squeue's JSON, and one squeue per refresh interval for
everyone."""

from __future__ import annotations

import threading

import pytest

from portal.config import PortalConfig
from portal.scheduler import snapshot as cluster_module
from portal.scheduler.kubernetes.client import REQUEST_TIMEOUT_S
from portal.scheduler.kubernetes.scheduler import KubernetesScheduler
from portal.scheduler.slurm.errors import SlurmError
from portal.scheduler.snapshot import ClusterCache
from tests.slurm_answers import squeue_job, squeue_json
from tests.unit.helpers import slurm_cache

FORGED = "x\n900001|alice|RUNNING|1:00|1|gres:gpu:4|localhost|y"  # a job name that forged a row (issue 25)
SQUEUE = squeue_json(
    squeue_job(42, "alice", gpus_per_node=2),
    squeue_job(43, "bob", "PENDING", nodes=2, reason="Resources", name="spawner-jupyterhub", uid=10002),
    squeue_job(44, "alice", "PENDING", gpus_per_node=1, reason="Priority", name="my|job"),
    squeue_job(45, "alice", "COMPLETED", gpus_per_node=4, end_time=1_795_587_100),  # plain squeue leaves it out
    squeue_job(46, "bob", "RUNNING", name=FORGED, uid=10002, comment="UserId=alice(10001) JobState=RUNNING"),
)
PARTITIONS = "PartitionName=gpu AllowGroups=ALL Default=YES MaxTime=04:00:00 Nodes=localhost State=UP\n"
NODES = ("NodeName=localhost CPUTot=8 RealMemory=20000 Gres=gpu:4 GresUsed=gpu:2(IDX:0-1) State=MIXED "
         "Partitions=gpu\n")


class FakeSlurm:
    def __init__(self, fail: bool = False):
        self.calls: list[list[str]] = []
        self.fail = fail

    def __call__(self, argv):
        self.calls.append(list(argv))
        if self.fail:
            raise SlurmError("slurm_load_jobs error: Unable to contact slurm controller")
        if argv[0] == "squeue":
            return SQUEUE
        return PARTITIONS if argv[2] == "partition" else NODES


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_queue_is_what_squeue_lists_with_gpus_and_names_as_data():
    queue = slurm_cache(PortalConfig(), FakeSlurm()).snapshot().queue
    assert list(queue) == ["42", "43", "44", "46"]  # the ended job is not queued
    assert (queue["42"].user, queue["42"].state, queue["42"].gpus_per_node, queue["42"].gpus) == (
        "alice", "RUNNING", 2, 2)
    assert (queue["43"].nodes, queue["43"].gpus, queue["43"].reason) == (2, 0, "Resources")
    assert (queue["44"].gpus_per_node, queue["44"].name) == (1, "my|job")  # a name may hold any separator
    assert (queue["46"].user, queue["46"].gpus, queue["46"].name) == ("bob", 0, FORGED)  # no job 900001 of alice's


def test_snapshot_is_shared_within_the_interval_and_refreshed_after_it():
    slurm, clock = FakeSlurm(), Clock()
    cache = slurm_cache(PortalConfig(dashboard_refresh_s=2), slurm, clock=clock)
    first = cache.snapshot()
    for _ in range(50):
        assert cache.snapshot() is first
    assert cache.squeue_calls == 1
    clock.now += 2.5
    assert cache.snapshot() is not first
    assert cache.squeue_calls == 2
    assert [c[0] for c in slurm.calls].count("squeue") == 2


def test_concurrent_requests_cost_one_squeue():
    slurm = FakeSlurm()
    cache = slurm_cache(PortalConfig(dashboard_refresh_s=60), slurm)
    threads = [threading.Thread(target=cache.snapshot) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.squeue_calls == 1


def test_snapshot_dict_counts_free_and_used_gpus():
    cache = slurm_cache(PortalConfig(), FakeSlurm())
    data = cache.snapshot().to_dict()
    assert (data["gpus"], data["free_gpus"], data["jobs_running"], data["jobs_pending"]) == (4, 2, 2, 2)
    assert data["nodes"][0]["used_gpus"] == 2
    assert data["partitions"] == [{"name": "gpu", "default": True, "max_minutes": 240, "nodes": ["localhost"]}]


def test_slurm_down_is_an_error_not_a_stale_answer():
    slurm, clock = FakeSlurm(), Clock()
    cache = slurm_cache(PortalConfig(dashboard_refresh_s=2), slurm, clock=clock)
    cache.snapshot()
    slurm.fail, clock.now = True, clock.now + 3
    with pytest.raises(SlurmError, match="Unable to contact"):
        cache.snapshot()


class FakeCore:
    """CoreV1Api's call of the snapshot, answering as the API server would; it records what was asked."""

    def __init__(self, pods: list[dict], nodes: list[dict] | None = None):
        self.pods, self.nodes, self.asked = pods, nodes or [], []

    def list_pod_for_all_namespaces(self, **query):
        self.asked.append(query)
        return {"items": self.pods}

    def list_node(self, **query):
        self.asked.append({"nodes": query})
        return {"items": self.nodes}


def test_on_kubernetes_the_pools_come_from_the_settings_and_the_queue_from_the_users_pods():
    server = {"metadata": {"name": "jupyter-alice", "namespace": "dsportal-u-alice", "labels": {}},
              "status": {"phase": "Running", "startTime": "2026-11-26T10:00:00Z"},
              "spec": {"nodeName": "kube-node1",
                       "containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}
    core = FakeCore([server])
    cfg = PortalConfig(scheduler="kubernetes", k8s_gpu_types=("t4", "a100"))
    scheduler = KubernetesScheduler(cfg)
    scheduler._apis = lambda user: (None, core, None)  # the API server's answers, as the client returns them
    cache = ClusterCache(cfg, scheduler)
    snapshot = cache.snapshot()
    assert [p["name"] for p in snapshot.to_dict()["partitions"]] == ["t4", "a100"]
    assert snapshot.to_dict()["partitions"][0]["default"] and snapshot.to_dict()["jobs_running"] == 1
    assert (snapshot.queue["jupyter-alice"].user, snapshot.queue["jupyter-alice"].gpus) == ("alice", 2)
    timeout = {"_request_timeout": REQUEST_TIMEOUT_S}  # every call bounded (client.api_call)
    assert core.asked == [{"field_selector": "status.phase!=Succeeded,status.phase!=Failed", **timeout},
                          {"nodes": timeout}]
    assert cache.squeue_calls == 0


def held_slurm(cache, slurm):
    """Make the cache's Slurm answer only once `release` is set; `asking` is set when a thread asks."""
    asking, release = threading.Event(), threading.Event()

    read = cache._read

    def slow_read():
        asking.set()
        release.wait(10)
        return read()
    cache._read = slow_read
    return asking, release


def test_while_one_thread_asks_slurm_the_others_get_the_last_answer_not_a_wait():
    slurm, clock = FakeSlurm(), Clock()
    cache = slurm_cache(PortalConfig(dashboard_refresh_s=2), slurm, clock=clock)
    first = cache.snapshot()
    asking, release = held_slurm(cache, slurm)
    clock.now += 3  # past the interval: the next caller asks Slurm
    asker = threading.Thread(target=cache.snapshot)
    asker.start()
    assert asking.wait(10)
    assert cache.snapshot() is first  # served at once while squeue runs
    clock.now += cluster_module.STALE_GRACE_S  # too old to serve: this caller waits for the answer
    waiter = threading.Thread(target=cache.snapshot)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()
    release.set()
    asker.join(10)
    waiter.join(10)
    assert cache.squeue_calls == 2


def test_after_a_failure_the_last_answer_is_not_served_while_slurm_is_asked_again():
    slurm, clock = FakeSlurm(), Clock()
    cache = slurm_cache(PortalConfig(dashboard_refresh_s=2), slurm, clock=clock)
    cache.snapshot()
    cache._failure = (clock.now, SlurmError("squeue: Slurm is not answering"))  # the last ask failed
    clock.now += 3
    asking, release = held_slurm(cache, slurm)
    asker = threading.Thread(target=cache.snapshot)
    asker.start()
    assert asking.wait(10)
    waiter = threading.Thread(target=cache.snapshot)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # waits for the new answer instead of taking the one from before the failure
    release.set()
    asker.join(10)
    waiter.join(10)
