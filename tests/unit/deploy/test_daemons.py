"""deploy/daemons.py against real processes: what box.py and kubebox.py rely on to find and stop their daemons."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from deploy import daemons

# A daemon that ignores SIGTERM and has a child in a session of its own, as the hub's proxy is.
STUBBORN = ("import os, signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True); "
            "print(child.pid, flush=True); time.sleep(60)")


def test_running_pid_names_a_live_process_running_the_program(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    pid_file = tmp_path / "sleep.pid"
    try:
        pid_file.write_text(f"{sleeper.pid}\n")
        deadline = time.monotonic() + 5  # a loaded machine may show the child's new command line a moment late
        while daemons.running_pid(pid_file, "sleep") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert daemons.running_pid(pid_file, "sleep") == sleeper.pid
        assert daemons.running_pid(pid_file, "slapd") is None  # a recycled PID is not the daemon
    finally:
        sleeper.kill()
        sleeper.wait()
    assert daemons.running_pid(pid_file, "sleep") is None
    assert daemons.running_pid(tmp_path / "absent.pid", "sleep") is None


def test_port_in_use_sees_a_listener() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert daemons.port_in_use("127.0.0.1", port)
    assert not daemons.port_in_use("127.0.0.1", port)


def test_tail(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(50)))
    assert daemons.tail(log, 2) == "line 48\nline 49"
    assert daemons.tail(tmp_path / "absent.log", 2) == f"({tmp_path / 'absent.log'} cannot be read)"


def test_terminate_stops_with_sigterm() -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    assert daemons.terminate(sleeper.pid, 5) is False
    assert daemons.terminate(sleeper.pid, 5) is False  # already gone


def test_terminate_kills_a_stubborn_process_and_its_descendants() -> None:
    stubborn = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True)
    with stubborn.stdout:
        child = int(stubborn.stdout.readline())
    try:
        assert daemons.terminate(stubborn.pid, 0.5, with_descendants=True) is True
        assert daemons.wait_gone(child, 5)
    finally:
        for pid in (stubborn.pid, child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_port_in_the_kernels_range_for_outgoing_connections_is_named_so(tmp_path: Path) -> None:
    narrowed = tmp_path / "ip_local_port_range"
    narrowed.write_text("40000\t50000\n")
    assert daemons.ephemeral_ports(narrowed) == range(40000, 50001)
    assert daemons.ephemeral_ports(tmp_path / "missing") == range(32768, 61000)  # the kernel's default
    ports = daemons.ephemeral_ports()
    assert daemons.ephemeral_note(ports.start - 1) == ""
    assert f"choose a port below {ports.start}" in daemons.ephemeral_note(ports.start)


def test_no_box_of_the_tests_or_the_demo_listens_where_outgoing_connections_take_their_ports() -> None:
    """A CI run lost a box's slapd to a client that held 36636: every fixed port the tests and the demo give a
    daemon lies below the kernel's range."""
    from portal.config import PortalConfig
    from tests.conftest import REPO, TEST_SETTINGS
    from tests.kubernetes import conftest as kube
    from tests.slurm_versions.conftest import release_settings

    ports = {name: value for name, value in TEST_SETTINGS.items() if name.endswith("_port")}
    for release in ("24.11", "26.05"):
        ports |= {f"{release} {n}": v for n, v in release_settings(release)[1].items() if n.endswith("_port")}
    demo = PortalConfig()
    ports |= {name: getattr(demo, name) for name in vars(demo) if name.endswith("_port") and getattr(demo, name)}
    ports |= {"dashboard (demo)": demo.dashboard_service_port, "MLflow (demo)": demo.hub_port + 95}
    ports |= {f"kube {name}": value for name, value in kube.DIRECTORY_PORTS.items()}
    ports |= {"kube api (and etcd, MLflow after it)": kube.KUBE_API_PORT + 3}
    source = (REPO / "tests" / "integration" / "test_directory.py").read_text()  # a test module: read, not imported
    ports |= {f"test_directory {i}": int(p) for i, p in enumerate(re.findall(r'_port": (\d+) \+ PORT_OFFSET', source))}
    assert len(ports) > 20
    low = daemons.ephemeral_ports().start
    assert {name: port for name, port in ports.items() if port >= low} == {}
