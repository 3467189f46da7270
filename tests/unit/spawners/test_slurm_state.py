"""The hub's startup check after a crash: Slurm's saved state says a server's job is RUNNING, and its port decides
in milliseconds whether the server is still there (real sockets on loopback; Slurm's answer as in the box). And a
start that a hub restart interrupted: the next hub cancels its job at the first poll."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest
from jupyterhub.objects import Server

from spawners.slurm import PortalSlurmSpawner
from spawners.slurm_state import refused
from tests.unit.helpers import spawner_answering


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: the kernel refuses connections to it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def listening():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def restored_spawner(port: int, checking: bool) -> PortalSlurmSpawner:
    """A spawner as the restarted hub loads it: job 42 RUNNING in Slurm, its server's address from the hub's db."""
    spawner = spawner_answering(PortalSlurmSpawner, ["RUNNING node1 None"])
    spawner.server = Server(ip="127.0.0.1", port=port)
    spawner._check_pending = checking  # what JupyterHub 6.1.1's startup check sets; the spawner reads `pending`
    return spawner


def test_a_server_whose_port_refuses_is_reported_stopped_by_the_startup_check(caplog):
    port = closed_port()
    assert asyncio.run(restored_spawner(port, checking=True).poll()) == 1
    assert f"Slurm job 42 is RUNNING, but its server at 127.0.0.1:{port} is gone (Connection refused)" in caplog.text


def test_a_server_that_answers_stays(listening):
    assert asyncio.run(restored_spawner(listening, checking=True).poll()) is None


def test_the_hubs_periodic_polls_do_not_knock():
    """Only the startup check knocks: between them, a server's port says nothing new that Slurm would not."""
    assert asyncio.run(restored_spawner(closed_port(), checking=False).poll()) is None


def test_no_answer_in_time_is_not_a_refusal():
    """A busy node is not a dead one: the hub's own check (http_timeout) decides then. A listening socket whose
    backlog is full and never accepted leaves a connect hanging."""
    assert asyncio.run(refused("127.0.0.1", closed_port(), 1.0)) == "Connection refused"
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        fillers = []
        with contextlib.suppress(TimeoutError):  # the kernel queues a connection or two, then leaves them hanging
            while len(fillers) < 16:
                fillers.append(socket.create_connection(("127.0.0.1", port), timeout=0.3))
        try:
            assert asyncio.run(refused("127.0.0.1", port, 0.3)) == ""
        finally:
            for filler in fillers:
                filler.close()


def commands_of(spawner: PortalSlurmSpawner) -> list[str]:
    """Every command the spawner runs from now on (each answered with nothing, as scancel answers)."""
    ran = []

    async def run_command(cmd, input=None, env=None):
        ran.append(cmd)
        return ""

    spawner.run_command = run_command
    return ran


def test_a_start_that_a_hub_restart_interrupted_is_cancelled_by_the_next_hub_and_only_by_it(caplog):
    this_hub = spawner_answering(PortalSlurmSpawner, ["PENDING n/a Resources"])
    this_hub.start_unfinished = True  # as submit_batch_script leaves it while the start waits for the job
    assert asyncio.run(this_hub.poll()) is None  # a start of this hub's own goes on
    saved = this_hub.get_state()
    assert saved["start_unfinished"] and saved["job_id"] == "42"

    next_hub = spawner_answering(PortalSlurmSpawner, [])
    ran = commands_of(next_hub)
    next_hub.load_state(saved)  # what a hub does once, when it makes the spawner from its database
    assert asyncio.run(next_hub.poll()) == 1  # stopped: the user starts again
    assert len(ran) == 1 and ran[0].endswith(" scancel 42"), ran
    assert next_hub.get_state() == {} and asyncio.run(next_hub.poll()) == 1 and len(ran) == 1
    assert ("start of alice: Slurm job 42 was still starting when the hub restarted; cancelled, as a start cannot "
            "be resumed") in caplog.text
