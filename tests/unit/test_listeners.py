"""tests/listeners.py, which the suites use to find what a user's processes listen on: it finds a TCP listener of a
process (IPv4 and IPv6, with its address and port) and not a connected or a Unix socket, and a process's tree."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.listeners import pids_matching, process_tree, tcp_listeners


def test_a_tcp_listener_is_found_with_its_address_and_port_and_nothing_else_is():
    # The worker is not a process of its own: a test it ran before may have left a listener (make check, 2026-12-03:
    # 0.0.0.0:1025 and [::]:1025). What this test opens is what it finds beyond those.
    before = tcp_listeners(os.getpid())
    with socket.socket() as four, socket.socket(socket.AF_INET6) as six, socket.socket(socket.AF_UNIX) as unix:
        four.bind(("127.0.0.1", 0))
        four.listen()
        six.bind(("::1", 0))
        six.listen()
        unix.bind(f"\0dsportal-listeners-{os.getpid()}")
        unix.listen()
        with socket.create_connection(four.getsockname()):
            found = tcp_listeners(os.getpid())
        expected = {("127.0.0.1", four.getsockname()[1]), ("::1", six.getsockname()[1])}
    assert found - before == expected and before <= found, (found, before)
    assert tcp_listeners(os.getpid()) == before


def test_a_process_tree_and_a_command_line_are_found():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "dsportal-listeners-probe"])
    try:
        assert child.pid in process_tree(os.getpid())
        assert pids_matching(["dsportal-listeners-probe"]) == [child.pid]
    finally:
        child.kill()
        child.wait()
