"""Idle GPUs given back on the Kubernetes box (issue 63, docs/gpus.md), by the hub in a pod as a site runs it: each
node's GPU reader (deploy/kubernetes/kubeparts/gpus.py) reads the pods that hold its FAKE GPUs, and the dashboard in
the hub's pod watches them with the test box's short settings (its group gpu-idle-watched: warned after 10 s of idle
GPUs, stopped 10 s after, read every 5 s). Two servers of that group at once, each holding a GPU: alice's, left
idle, is warned (on the GPUs page) and stopped by the hub, her pod deleted; bob's, whose GPU works (a process in his
pod keeps a CPU busy: the stand-in's reading of its FAKE GPU), runs on, never warned, and his lab's answer shows his
GPU at work (alice's, none). The rule, the keep and the mail are the same code as on Slurm
(tests/integration/test_gpu_watch.py); the pod hub has no mail relay."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes.stream import stream

from deploy.kubernetes.kubeparts import gpus as gpus_part
from portal.gpus.readings import IDLE_BELOW, NodeReading
from tests.conftest import TEST_SETTINGS, WATCHED_GROUP, page_error, wait_for
from tests.integration.helpers import in_group, portal_client
from tests.kubernetes.conftest import gpu_readers, kubebox

pytestmark = pytest.mark.integration
USERS = ("alice", "bob")
EVERY_S, GRACE_S = TEST_SETTINGS["gpu_read_every_s"], TEST_SETTINGS["gpu_idle_grace_s"]
IDLE_S = TEST_SETTINGS["gpu_idle_s"][WATCHED_GROUP]
SPAWN_S = 150  # the hub's own start_timeout (values.yaml leaves the default, 120 s), and its verdict
WARNED_WITHIN_S = IDLE_S + 3 * EVERY_S + 30
STOPPED_WITHIN_S = GRACE_S + 2 * EVERY_S + 90  # the hub's stop: KubeSpawner deletes the pod and waits for it
BURN = "nohup timeout 600 sh -c 'while :; do :; done' >/dev/null 2>&1 &"  # a CPU at work, for 10 minutes at most


@pytest.fixture
def watched(pod_hub, directory, kube):
    """The nodes' GPU readers running (only for this test: tests/kubernetes/conftest.py), alice and bob in the
    watched group, bob in gpu-users for a GPU (alice is); their servers stopped, the readers too and the directory
    as it was, after."""
    admin = pod_hub.login("admin")
    with gpu_readers(kube.box), in_group(directory, WATCHED_GROUP, USERS, gid=10199), \
            in_group(directory, "gpu-users", ("bob",)):
        try:
            yield {user: pod_hub.login(user) for user in USERS}  # a login reads their groups anew
        finally:
            with ThreadPoolExecutor(len(USERS)) as stops:
                list(stops.map(lambda user: pod_hub.api(admin, "DELETE", f"users/{user}/server"), USERS))


def gpus(client) -> dict:
    answer = client.get(f"{client.base}gpus", timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def history_since(client, started: float) -> list[str]:
    return [event["act"] for event in gpus(client)["history"] if event["at"] >= started]


def server_pod(core, user: str):
    found = core.list_namespaced_pod(f"dsportal-u-{user}", field_selector=f"metadata.name=jupyter-{user}").items
    return found[0] if found and found[0].metadata.deletion_timestamp is None else None


def busy_reading(kube, node: str, holder: str) -> float:
    """The holder's GPU as its node's reader read it last (the hub's claim, root's to read)."""
    reading = NodeReading.from_json((gpus_part.readings_dir(kube.box) / f"{node}.json").read_text())
    (gpu,) = reading.held_by(holder)
    assert gpu.busy is not None, reading
    return gpu.busy


def test_an_idle_server_is_warned_and_stopped_and_a_busy_one_runs_on(pod_hub, kube, core, watched):
    started = time.time()
    for session in watched.values():
        form = pod_hub.spawn_form(session, partition="t4", gpus="1", cpus="1", memory_gb="2", runtime="01:00:00")
        assert form.status_code in (200, 302), (page_error(form), kubebox.box_hub.hub_log(core)[-4000:])
    with ThreadPoolExecutor(len(USERS)) as waits:
        events = dict(zip(USERS, waits.map(lambda user: pod_hub.client(watched[user]).progress_events(user, SPAWN_S),
                                           USERS), strict=True))
    for user in USERS:
        assert events[user][-1].get("ready"), (user, events[user], kubebox.box_hub.hub_log(core))
    bobs = server_pod(core, "bob")
    stream(core.connect_get_namespaced_pod_exec, bobs.metadata.name, "dsportal-u-bob", command=["sh", "-c", BURN],
           stderr=True, stdin=False, stdout=True, tty=False)
    alice, bob = (portal_client(pod_hub, user) for user in USERS)
    try:
        (warned,) = wait_for(lambda: gpus(alice)["warnings"], WARNED_WITHIN_S, interval=1, what="alice's warning")
        assert warned["server"] and warned["holder"] == "jupyter-alice", warned
        wait_for(lambda: server_pod(core, "alice") is None and pod_hub.server(watched["alice"], "alice") is None,
                 STOPPED_WITHIN_S, interval=2, what="alice's idle server to be stopped, its pod deleted")
        assert history_since(alice, started) == ["stop", "warn"]
        # bob's worked all along, as his node's reader read it: never warned, still running, the same pod.
        assert busy_reading(kube, bobs.spec.node_name, "jupyter-bob") >= IDLE_BELOW
        assert gpus(bob)["warnings"] == [] and history_since(bob, started) == []
        (his,) = gpus(bob)["server_gpus"]  # what his lab's status bar shows: his node's FAKE GPU, at work
        assert (his["node"], his["source"]) == (bobs.spec.node_name, "standin") and his["busy"] >= IDLE_BELOW, his
        assert gpus(alice)["server_gpus"] == []  # hers is stopped, and his is not hers to see
        assert server_pod(core, "bob").metadata.uid == bobs.metadata.uid
    except (AssertionError, TimeoutError) as err:
        raise AssertionError(f"{err}\n{kubebox.box_hub.hub_log(core)[-4000:]}") from None
