"""The dashboard's one watch of the portal's jobs (issue 43): it counts the changes per namespace from the list's
resourceVersion, a restart is a new epoch, an error event ends the epoch, no credentials end the watch; and the
board lists a user's jobs again only when their namespace's stamp moved."""

from __future__ import annotations

import json
import threading

import pytest

from portal.scheduler.kubernetes.errors import KubernetesError
from portal.scheduler.kubernetes.watch import JobsWatch, WatchError, WatchStamp, events
from portal.scheduler.registry import scheduler_for


class Response:
    """What the client answers with _preload_content=False: the body whole (`data`) or in chunks (`stream`)."""

    def __init__(self, body: bytes, chunk: int = 7):
        self.data, self.chunk = body, chunk
        self.closed = self.released = False

    def stream(self, amt: int = 65536, decode_content: bool = False):
        for start in range(0, len(self.data), self.chunk):
            yield self.data[start:start + self.chunk]

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released = True


def event(kind: str, namespace: str, version: str) -> dict:
    return {"type": kind, "object": {"metadata": {"namespace": namespace, "name": "k8s-1", "resourceVersion": version}}}


def stream_of(*found: dict) -> Response:
    return Response(b"".join(json.dumps(e).encode() + b"\n" for e in found))


class Lister:
    """The API server's LIST (the list's version) and then its WATCHes (each a stream of events), recorded."""

    def __init__(self, *watches: Response, version: str = "100"):
        self.watches, self.version, self.asked = list(watches), version, []

    def __call__(self, resource_version, watch):
        self.asked.append((resource_version, watch))
        if not watch:
            return Response(json.dumps({"metadata": {"resourceVersion": self.version}, "items": []}).encode())
        return self.watches.pop(0)


def test_events_are_whole_lines_however_the_stream_is_cut():
    found = [event("ADDED", "a", "1"), event("DELETED", "b", "2")]
    assert list(events(stream_of(*found))) == found


def test_changes_are_counted_per_namespace_from_the_lists_version():
    first = stream_of(event("ADDED", "dsportal-u-alice", "101"), event("MODIFIED", "dsportal-u-alice", "102"),
                      {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "150"}}})
    lister = Lister(first)
    watch = JobsWatch(lister)
    assert watch.stamp("dsportal-u-alice") is None  # not running yet: the board lists every rescan
    version = watch._list()
    before = watch.stamp("dsportal-u-alice")
    assert before == WatchStamp(1, 0) and before.same_as(watch.stamp("dsportal-u-alice"))
    assert watch._watch(version) == "150"  # a bookmark moves the version on without a change
    assert lister.asked == [(None, False), ("100", True)]
    assert watch.stamp("dsportal-u-alice") == WatchStamp(1, 2) and not before.same_as(watch.stamp("dsportal-u-alice"))
    assert watch.stamp("dsportal-u-bob") == WatchStamp(1, 0)
    assert first.closed and first.released
    watch._list()  # a restart: every earlier stamp differs
    assert not before.same_as(watch.stamp("dsportal-u-bob")) and watch.stamp("dsportal-u-bob") == WatchStamp(2, 0)


def test_an_error_event_ends_the_epoch():
    gone = stream_of({"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}})
    watch = JobsWatch(Lister(gone))
    with pytest.raises(WatchError, match="410 Expired: too old"):
        watch._watch(watch._list())
    assert gone.closed


def test_a_failing_watch_gives_no_stamp_and_is_tried_again():
    calls = []
    watch = JobsWatch(lambda resource_version, watch: calls.append(watch) or (_ for _ in ()).throw(OSError("down")))
    waits = []
    watch._stop.wait = lambda seconds: (waits.append(seconds), watch.stop())[-1]  # one retry, then stop
    watch._run()
    assert calls == [False] and waits == [1.0] and watch.failures == 1
    assert watch.stamp("dsportal-u-alice") is None


def test_no_credentials_end_the_watch_for_good(caplog):
    def lister(resource_version, watch):
        raise KubernetesError("no credentials for the Kubernetes API from k8s_kubeconfig /nowhere")

    watch = JobsWatch(lister)
    thread = threading.Thread(target=watch._run)
    thread.start()
    thread.join(5)
    assert not thread.is_alive() and watch.stamp("dsportal-u-alice") is None
    assert "not watching the portal's jobs: no credentials" in caplog.text


class JobsAPI:
    """portal.jobs as the board calls it on Kubernetes: one listing of the user's Jobs per call, counted."""

    def __init__(self):
        self.listed = 0

    def jobs(self, user, groups, cfg):
        from portal.jobs import UnreadableJob

        self.listed += 1
        return [UnreadableJob("k8s-20261128-101010-abcdef", user, "Job k8s-20261128-101010-abcdef", "a fake")]


def test_the_board_lists_a_users_jobs_again_only_when_their_namespaces_stamp_moved():
    from portal.config import PortalConfig
    from portal.scheduler.snapshot import ClusterCache
    from portal.service.board import JobBoard, Refresher
    from portal.service.hub_user import HubUser

    cfg = PortalConfig(scheduler="kubernetes", k8s_gpu_types=("t4",))
    now, stamps, api = [0.0], {"alice": WatchStamp(1, 0)}, JobsAPI()
    board = JobBoard(cfg, ClusterCache(cfg, scheduler_for(cfg)), api=api, rescan_s=10,
                     refresher=Refresher(execute=lambda task: task()), clock=lambda: now[0],
                     dir_stamp=lambda user: stamps.get(user))
    alice = HubUser("alice", ("gpu-users",))
    for step in range(4):
        now[0] = step * 11.0
        assert [job.id for job in board._jobs_of(alice)] == ["k8s-20261128-101010-abcdef"]
    assert api.listed == 1  # her namespace's jobs unchanged: listed once
    stamps["alice"] = WatchStamp(1, 1)  # a Job made from her notebook
    now[0] = 50.0
    board._jobs_of(alice)
    assert api.listed == 2
    del stamps["alice"]  # the watch stopped: every rescan lists
    for step in range(2):
        now[0] = 61.0 + step * 11.0
        board._jobs_of(alice)
    assert api.listed == 4
