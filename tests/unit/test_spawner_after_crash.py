"""The hub's startup check after a crash: Slurm's saved state says a server's job is RUNNING, and its port decides
in milliseconds whether the server is still there (real sockets on loopback; Slurm's answer as in the box)."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest
from jupyterhub.objects import Server

from spawners.slurm import PortalSlurmSpawner
from spawners.slurm_state import refused
from tests.unit.test_slurm_unavailable import spawner_answering


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
    spawner._check_pending = checking
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
