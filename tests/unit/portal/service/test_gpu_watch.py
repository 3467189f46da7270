"""The dashboard's GPU watch carried out: the scheduler's running holders and the nodes' readings in; mail for a
warning, a stop or a flag; the hub's stop for a server, the owner's cancel for a job (only where the site says);
nothing decided while the hub does not answer; a failed stop is logged and asked for again later."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from portal.config import PortalConfig
from portal.gpus.agent import write
from portal.gpus.readings import GpuReading, NodeReading
from portal.jobmail import NoAddress
from portal.scheduler.cluster import QueuedJob
from portal.scheduler.snapshot import ClusterSnapshot
from portal.service import gpu_watch as gpu_watch_module
from portal.service.gpu_watch import GpuWatcher, notice
from portal.service.hub import HubUnavailable
from portal.service.prometheus import REGISTRY

SERVER = QueuedJob("7", "alice", "RUNNING", "1:00", 1, 1, "None", gpus=1, server=True)
JOB = QueuedJob("8", "alice", "RUNNING", "1:00", 2, 1, "None", gpus=2)
IDLE_MODELS = {"alice": {"name": "alice", "groups": ["short-idle"]}, "bob": {"name": "bob", "groups": []}}


class Cluster:
    def __init__(self, *jobs: QueuedJob):
        self.jobs = jobs

    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(0.0, {job.id: job for job in self.jobs})


class Hub:
    def __init__(self) -> None:
        self.stopped: list[str] = []
        self.down = self.refuse = False

    async def roster(self) -> dict[str, dict]:
        if self.down:
            raise HubUnavailable("the hub answered GET users with 503")
        return IDLE_MODELS

    async def stop_server(self, name: str) -> None:
        if self.refuse:
            raise HubUnavailable("the hub answered DELETE users/alice/server with 500")
        self.stopped.append(name)


class Board:
    def __init__(self) -> None:
        self.cancelled: list[tuple[str, str]] = []

    def cancel(self, user, job_id):
        self.cancelled.append((user.name, job_id))


def reading(folder: Path, at: float, busy: float | None) -> None:
    gpus = (GpuReading(0, busy=busy, holder="7", user="alice"), GpuReading(1, busy=busy, holder="8", user="alice"))
    folder.mkdir(mode=0o700, exist_ok=True)
    write(folder, NodeReading("tnode1", at, 10.0, "standin", gpus))


@pytest.fixture
def watcher(tmp_path, monkeypatch):
    cfg = PortalConfig(state_dir=tmp_path, gpu_idle_s={"short-idle": 60}, default_gpu_idle_s=0, gpu_idle_grace_s=120)
    monkeypatch.setattr(gpu_watch_module, "owner_address", lambda user, cfg: f"{user}@dsportal.local")
    now, mailed = [0.0], []
    made = GpuWatcher(cfg, Cluster(SERVER, JOB).snapshot, Hub(), Board(), ThreadPoolExecutor(1),
                      mail=lambda message, cfg: mailed.append(message), clock=lambda: now[0])
    made.now, made.mailed = now, mailed
    yield made
    made.executor.shutdown()


def at_times(watcher: GpuWatcher, times, busy) -> list[tuple[str, str]]:
    """A pass after each reading, at the reading's time, as the timer runs it (a failed pass is logged)."""
    found = []
    for at in times:
        watcher.now[0] = at
        reading(watcher.folder, at, busy)
        events = watcher.watch.history(None)
        asyncio.run(watcher._tick())
        found += [(e.holder, e.act) for e in reversed(watcher.watch.history(None)[:-len(events) or None])]
    return found


def test_an_idle_server_is_warned_by_mail_then_stopped_by_the_hub_and_a_job_is_flagged(watcher):
    counted = [("warn", "server"), ("flag", "job"), ("stop", "server")]
    before = [REGISTRY.get_sample_value("dsportal_gpu_watch_events_total", {"act": a, "kind": k}) or 0
              for a, k in counted]
    events = at_times(watcher, range(1000, 1200, 10), 0.5)
    assert events == [("7", "warn"), ("8", "flag"), ("7", "stop")]
    assert [REGISTRY.get_sample_value("dsportal_gpu_watch_events_total", {"act": a, "kind": k})
            for a, k in counted] == [b + 1 for b in before]  # the operators' counter (portal.service.prometheus)
    assert watcher.directory.stopped == ["alice"] and watcher.board.cancelled == []
    subjects = [m["Subject"] for m in watcher.mailed]
    assert subjects[0].startswith("Your JupyterLab server's GPUs are idle: it stops at ")
    assert subjects[1:] == ["Your job 8's GPUs are idle", "Your JupyterLab server was stopped: its GPUs were idle"]
    warn = watcher.mailed[0].get_content()
    assert "/services/portal/gpus" in warn and "Keep it" in warn and watcher.mailed[0]["To"] == "alice@dsportal.local"


def test_a_flagged_job_is_cancelled_as_its_owner_only_where_the_site_says(watcher):
    watcher.cfg = dataclasses.replace(watcher.cfg, gpu_idle_stop_jobs=True)
    at_times(watcher, range(1000, 1200, 10), 0.5)
    assert watcher.board.cancelled == [("alice", "8")]
    assert "Your job 8 was cancelled: its GPUs were idle" in [m["Subject"] for m in watcher.mailed]


def test_a_training_server_is_left_alone_and_an_unwatched_user_never_warned(watcher):
    assert at_times(watcher, range(1000, 1400, 10), 80.0) == []
    watcher.snapshot = Cluster(dataclasses.replace(SERVER, user="bob")).snapshot  # default_gpu_idle_s 0: never
    assert at_times(watcher, range(1400, 1800, 10), 0.5) == []
    assert watcher.mailed == [] and watcher.directory.stopped == []


def test_nothing_is_decided_while_the_hub_does_not_answer_and_a_refused_stop_is_asked_again(watcher, caplog):
    watcher.directory.down = True
    assert at_times(watcher, range(1000, 1200, 10), 0.5) == []
    assert caplog.text.count("gpu watch: the pass failed: the hub answered GET users with 503") == 1
    watcher.directory.down, watcher.directory.refuse = False, True
    assert ("7", "stop") in at_times(watcher, range(1200, 1400, 10), 0.5)
    assert "stopping 7 of alice failed: the hub answered DELETE" in caplog.text
    watcher.directory.refuse = False
    at_times(watcher, range(1400, 1600, 10), 0.5)  # RETRY_STOP_S after the refused one
    assert watcher.directory.stopped == ["alice"]


def test_no_address_is_a_line_of_the_log_and_no_mail(watcher, monkeypatch, caplog):
    def none(user, cfg):
        raise NoAddress(f"the directory has no `mail` for {user}")
    monkeypatch.setattr(gpu_watch_module, "owner_address", none)
    at_times(watcher, range(1000, 1100, 10), 0.5)
    assert watcher.mailed == [] and "no mail to alice about 7: the directory has no `mail`" in caplog.text


def test_a_warnings_mail_names_the_page_and_the_deadline():
    from portal.gpus.watch import Event
    event = Event(100.0, "7", "alice", True, "warn", "its GPUs have done nothing", deadline=3700.0)
    message = notice(event, PortalConfig(), "alice@x.org", "http://hub/services/portal/gpus")
    assert message["Subject"].startswith("Your JupyterLab server's GPUs are idle: it stops at ")
    assert "open http://hub/services/portal/gpus and press \"Keep it\"" in message.get_content()


def test_a_failing_pass_is_logged_once_until_it_works_again_and_no_readers_is_no_watch(watcher, caplog):
    class Down:
        def snapshot(self):
            raise RuntimeError("squeue: Unable to contact slurm controller")

    caplog.set_level(logging.INFO, "portal.service")
    reading(watcher.folder, 1000.0, 0.5)
    watcher.snapshot = Down().snapshot
    for _ in range(3):
        asyncio.run(watcher._tick())
    assert caplog.text.count("gpu watch: the pass failed: squeue: Unable to contact") == 1
    watcher.snapshot = Cluster(SERVER).snapshot
    asyncio.run(watcher._tick())
    assert "gpu watch: passes work again" in caplog.text
    watcher.folder = watcher.folder.parent / "none"  # no node's reader writes here
    watcher.snapshot = Down().snapshot
    assert asyncio.run(watcher.once()) == []
