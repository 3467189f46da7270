"""Idle GPUs given back on the Slurm box (issue 63, docs/gpus.md), with the test box's short settings: its group
gpu-idle-watched is warned after 10 s of idle GPUs and stopped 10 s after the warning, read every 5 s. Three servers
of that group at once, each holding a GPU: mallory's, left idle, is warned (on the GPUs page, by mail) and stopped
by the hub; bob's, left idle, is warned and kept by him (not by another user), and outlives its deadline; alice's,
whose GPU works (a step of its job keeps a CPU busy: the stand-in's reading of the FAKE GPU), runs on, never warned."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import pytest

from portal.runas import RUNUSER
from tests.conftest import TEST_SETTINGS, WATCHED_GROUP, Mailbox, jobs_of, page_error, wait_for
from tests.integration.helpers import accounts, browser, in_group, portal_client

USERS = ("alice", "bob", "mallory")
# The watch's own pace (the test box's settings): a reading every EVERY_S (a holder's first is unknown), a pass as
# often; IDLE_S idle, then GRACE_S. A stop is the hub's stop of the Slurm job, within its own wait.
EVERY_S, GRACE_S = TEST_SETTINGS["gpu_read_every_s"], TEST_SETTINGS["gpu_idle_grace_s"]
IDLE_S = TEST_SETTINGS["gpu_idle_s"][WATCHED_GROUP]
WARNED_WITHIN_S = IDLE_S + 3 * EVERY_S + 30
STOPPED_WITHIN_S = GRACE_S + 2 * EVERY_S + 60


@pytest.fixture
def watched(cluster, hub, admin):
    """alice, bob and mallory in the watched group; bob and mallory in gpu-users for a GPU each (alice is), synced
    into Slurm's associations; mallory in datascientists too, to log in. Their servers stopped and the directory and
    accounts as they were, after."""
    with ExitStack() as groups:
        groups.enter_context(in_group(cluster, WATCHED_GROUP, USERS, gid=10199))
        groups.enter_context(in_group(cluster, "gpu-users", ("bob", "mallory")))
        groups.enter_context(in_group(cluster, "datascientists", ("mallory",)))
        try:
            assert accounts(cluster, "sync").returncode == 0
            yield {user: hub.login(user) for user in USERS}  # a login reads their groups anew
        finally:
            with ThreadPoolExecutor(len(USERS)) as stops:  # at once: each waits for its Slurm job to end
                list(stops.map(lambda user: hub.server(admin, user) and hub.stop(admin, user), USERS))
    wait_for(lambda: not any(jobs_of(user) for user in USERS), 60, what="the watched users' servers to end")
    assert accounts(cluster, "sync").returncode == 0


def gpus(client) -> dict:
    answer = client.get(f"{client.base}gpus", timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def warnings(client) -> list[dict]:
    return gpus(client)["warnings"]


def history_since(client, started: float) -> list[str]:
    """The user's GPU events since `started`, newest first (the test box's history holds earlier sessions' too)."""
    return [event["act"] for event in gpus(client)["history"] if event["at"] >= started]


def subjects(mailbox: Mailbox) -> list[str]:
    return [str(message["Subject"]).split(":")[0] for message in mailbox.messages()]


def test_idle_servers_are_warned_one_kept_one_stopped_and_a_busy_one_runs_on(cluster, hub, admin, watched):
    started = time.time()
    mail = {user: Mailbox(user) for user in USERS}
    for session in watched.values():
        response = hub.spawn_form(session, partition="gpu", gpus=1, cpus=1, memory_gb=2, runtime="01:00:00")
        assert response.status_code == 302, page_error(response)
    for user in USERS:
        hub.wait_ready(admin, user)
    (alice_job,) = [line.split()[0] for line in jobs_of("alice")]
    # alice's server works: a step of its job keeps a CPU busy, as a training started from its notebook would.
    busy = subprocess.Popen([RUNUSER, "-u", "alice", "--", "env", f"SLURM_CONF={cluster.slurm_conf_path}", "srun",
                             f"--jobid={alice_job}", "--overlap", "python3", "-c", "while True: pass"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/tmp")
    try:
        client = {user: portal_client(hub, user) for user in USERS}
        bob, mallory = client["bob"], client["mallory"]
        (warned,) = wait_for(lambda: warnings(bob), WARNED_WITHIN_S, interval=1, what="bob's warning")
        # Within his grace: mallory cannot keep bob's server; he can.
        refused = mallory.post(f"{mallory.base}gpus/keep", json={"holder": warned["holder"]}, timeout=30)
        kept = bob.post(f"{bob.base}gpus/keep", json={"holder": warned["holder"]}, timeout=30)
        assert refused.status_code == 404, refused.text  # only its owner keeps it
        assert kept.status_code == 200 and kept.json()["act"] == "keep", kept.text
        assert warned["server"] and warned["deadline"] - warned["warned_at"] == GRACE_S, warned

        wait_for(lambda: hub.server(admin, "mallory") is None, STOPPED_WITHIN_S, interval=2,
                 what="mallory's idle server to be stopped")
        assert history_since(mallory, started) == ["stop", "warn"]
        page = browser(hub, "mallory").get(f"{hub.url}/services/portal/gpus", timeout=30).text
        assert 'data-act="stop"' in page and "its GPUs did nothing for 10 s" in page
        # A pass after his first deadline (his idle clock restarted at the keep: his next is a warning and a grace on).
        wait_for(lambda: time.time() > warned["deadline"] + EVERY_S + 2 or None, 60, what="bob's deadline to pass")
        assert hub.server(admin, "bob") is not None and "stop" not in history_since(bob, started)
        wait_for(lambda: len(mail["mallory"].messages()) >= 2 or None, 60, what="mallory's two messages")
        assert subjects(mail["mallory"]) == ["Your JupyterLab server's GPUs are idle",
                                             "Your JupyterLab server was stopped"]
        assert subjects(mail["bob"])[0] == "Your JupyterLab server's GPUs are idle"
        # alice's server worked all along: never warned, still running.
        assert warnings(client["alice"]) == [] and history_since(client["alice"], started) == []
        assert subjects(mail["alice"]) == [] and hub.server(admin, "alice") is not None
        assert busy.poll() is None, busy.stderr.read() if busy.stderr else ""  # it ended: what srun said
    finally:
        busy.kill()
        busy.wait(timeout=30)
