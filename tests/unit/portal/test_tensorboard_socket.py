"""Each user's TensorBoard is reachable only through their server's proxy: the proxy's entry (portal.notebook) asks
jupyter-server-proxy for a Unix socket, and the launcher (portal.tensorboard_socket), started for real as that entry
says, answers there, with the socket 0600 in a 0700 directory, another user refused, and no TCP listener in its
process tree. It refuses a socket directory that is not the current user's alone."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from tempfile import mkdtemp

import pytest
from jupyter_server_proxy.config import ServerProcess
from jupyter_server_proxy.unixsock import UnixResolver
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
from tornado.simple_httpclient import SimpleAsyncHTTPClient

from portal.notebook import PROXY_NAME, tensorboard_proxy
from portal.runas import RUNUSER
from portal.tensorboard_socket import NotStarted, check_private_directory, remove_stale_socket
from tests.conftest import REPO
from tests.listeners import process_tree, tcp_listeners

BASE_URL = "/user/alice/"
RUN = "dsportal/7/tensorboard"  # a job's run, as named below ~/jobs
TAG = "throughput/images_per_sec"
START_TIMEOUT_S = 60.0  # TensorBoard imports TensorFlow first: seconds on a loaded machine
TCP_WORDS = ("{port}", "--port", "--host", "--bind_all", "127.0.0.1", "localhost", "0.0.0.0")


class UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket, as jupyter-server-proxy's client speaks to it (Host: localhost)."""

    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=10)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.socket_path))


def get(path: Path, url: str) -> tuple[int, bytes]:
    connection = UnixConnection(path)
    try:
        connection.request("GET", url)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def get_as_the_proxy(path: Path, url: str) -> tuple[int, bytes]:
    """GET as jupyter-server-proxy's handler does for `unix_socket` (ProxyHandler.proxy): its resolver, tornado's
    simple client."""
    async def fetch():
        client = SimpleAsyncHTTPClient(force_instance=True, resolver=UnixResolver(str(path)))
        try:
            return await client.fetch(f"http://localhost{url}", raise_error=False)
        finally:
            client.close()
    response = asyncio.run(fetch())
    return response.code, response.body


def write_scalar(logdir: Path, tag: str, value: float) -> None:
    """One scalar in an event file, as a training's rank 0 writes it (without importing TensorFlow here)."""
    logdir.mkdir(parents=True)
    with open(logdir / f"events.out.tfevents.{int(time.time())}.tnode1", "wb") as out:
        records = RecordWriter(out)
        records.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        records.write(event_pb2.Event(wall_time=time.time(), step=1, summary=summary).SerializeToString())


def proxy_command(home: Path, socket_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The entry's command for a user whose home is `home`, filled in as jupyter-server-proxy fills it."""
    monkeypatch.setenv("HOME", str(home))
    return [part.format(port=0, unix_socket=socket_path, base_url=BASE_URL) for part in tensorboard_proxy()["command"]]


@dataclass
class Board:
    process: subprocess.Popen[bytes]
    socket_path: Path
    log: Path


def start(command: list[str], socket_path: Path, log: Path) -> Board:
    """The launcher, once its socket answers (any HTTP answer to `/`, jupyter-server-proxy's readiness test)."""
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    board = Board(process, socket_path, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            get(socket_path, "/")
            return board
        except (FileNotFoundError, ConnectionRefusedError):
            if process.poll() is not None or time.monotonic() > deadline:
                stop(board)
                pytest.fail(f"the launcher did not answer on {socket_path}:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)


def stop(board: Board) -> int:
    if board.process.poll() is None:
        board.process.send_signal(signal.SIGTERM)
        try:
            board.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(board.process.pid, signal.SIGKILL)
            board.process.wait()
    return board.process.returncode


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """As jupyter-server-proxy makes it for `unix_socket: True` (a mkdtemp: short, unlike pytest's, for the
    socket path's 107 bytes)."""
    directory = Path(mkdtemp(prefix="jupyter-server-proxy-"))
    yield directory
    shutil.rmtree(directory)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Board]:
    """The proxy's command, run: alice's TensorBoard over a ~/jobs holding one run."""
    home = tmp_path_factory.mktemp("home")
    write_scalar(home / "jobs" / RUN, TAG, 12.5)
    directory = Path(mkdtemp(prefix="jupyter-server-proxy-"))
    with pytest.MonkeyPatch.context() as monkeypatch:
        command = proxy_command(home, directory / "socket", monkeypatch)
    board = start(command, directory / "socket", home / "tensorboard.log")
    yield board
    stop(board)
    shutil.rmtree(directory)


def test_the_proxy_entry_asks_for_a_unix_socket_and_names_no_tcp_port():
    entry = tensorboard_proxy()
    assert entry["unix_socket"] is True and "port" not in entry
    command = entry["command"]
    assert command[command.index("--socket") + 1] == "{unix_socket}"
    assert not [part for part in command if any(word in part for word in TCP_WORDS)]
    process = ServerProcess(name=PROXY_NAME, **entry)  # jupyter-server-proxy takes it: it makes the socket's directory
    assert process.get_proxy_attributes()["requested_unix_socket"] is True


def test_tensorboard_answers_the_proxys_client_on_its_socket_under_its_prefix_with_the_run(board):
    status, body = get_as_the_proxy(board.socket_path, f"{BASE_URL}{PROXY_NAME}/data/runs")
    assert status == 200, body[:500]
    assert json.loads(body) == [RUN]
    status, body = get(board.socket_path, f"{BASE_URL}{PROXY_NAME}/data/plugin/scalars/tags")
    assert status == 200 and list(json.loads(body)) == [RUN] and list(json.loads(body)[RUN]) == [TAG]


def test_the_socket_is_0600_in_a_0700_directory_and_another_user_cannot_connect(board):
    directory, found = os.lstat(board.socket_path.parent), os.lstat(board.socket_path)
    assert stat.S_ISDIR(directory.st_mode) and stat.S_IMODE(directory.st_mode) == 0o700
    assert stat.S_ISSOCK(found.st_mode) and stat.S_IMODE(found.st_mode) == 0o600
    assert os.geteuid() == 0, "acting as another user needs root: run the tests as root"
    probe = "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])"
    bob = subprocess.run([RUNUSER, "-u", "bob", "--", sys.executable, "-c", probe, str(board.socket_path)],
                         capture_output=True, text=True, cwd="/", timeout=30)
    assert bob.returncode != 0 and "PermissionError" in bob.stderr, bob.stderr


def test_no_process_of_it_listens_on_tcp(board):
    """TensorBoard's fast loader (a data server on loopback TCP, a child process) is what it would start by default."""
    tree = process_tree(board.process.pid)
    assert board.process.pid in tree
    listening = {pid: tcp_listeners(pid) for pid in tree}
    assert not any(listening.values()), f"TCP listeners {listening}: {board.log.read_text()[-2000:]}"


def test_sigterm_ends_it_and_removes_its_socket_and_a_restart_replaces_a_stale_one(tmp_path, socket_dir, monkeypatch):
    path = socket_dir / "socket"
    with socket.socket(socket.AF_UNIX) as stale:  # one that died: its file stays
        stale.bind(str(path))
    (tmp_path / "jobs").mkdir()
    board = start(proxy_command(tmp_path, path, monkeypatch), path, tmp_path / "tensorboard.log")
    try:
        assert get(path, f"{BASE_URL}{PROXY_NAME}/data/runs") == (200, b"[]")
    finally:
        returncode = stop(board)  # jupyter-server-proxy's stop
    assert returncode == 0 and not path.exists(), board.log.read_text()[-2000:]


@pytest.mark.parametrize("mode", [0o750, 0o705, 0o711, 0o770])
def test_it_refuses_a_directory_others_may_enter(tmp_path, mode):
    directory = tmp_path / "sockets"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.raises(NotStarted, match=re.escape(f"{directory} has mode 0{mode:o}; it must be 0700")):
        check_private_directory(directory)
    directory.chmod(0o700)
    check_private_directory(directory)


def test_it_refuses_a_symlinked_directory_another_users_and_a_missing_one(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(NotStarted, match=re.escape(f"{tmp_path / 'link'} is a symlink")):
        check_private_directory(tmp_path / "link")
    assert os.geteuid() == 0, "giving a directory to another user needs root: run the tests as root"
    os.chown(real, 10002, -1)  # bob's uid in the demo directory
    with pytest.raises(NotStarted, match=re.escape(f"{real} is owned by uid 10002, not by you")):
        check_private_directory(real)
    with pytest.raises(NotStarted, match=re.escape(f"{tmp_path / 'missing'} does not exist")):
        check_private_directory(tmp_path / "missing")


def test_only_a_stale_socket_of_ones_own_is_removed(tmp_path):
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(tmp_path / "socket"))
    remove_stale_socket(tmp_path / "socket")
    assert not (tmp_path / "socket").exists()
    (tmp_path / "socket").write_text("not a socket")
    with pytest.raises(NotStarted, match="is not a socket of yours"):
        remove_stale_socket(tmp_path / "socket")
    assert (tmp_path / "socket").read_text() == "not a socket"


def test_the_launcher_exits_non_zero_with_one_line_naming_the_directory(tmp_path):
    directory = tmp_path / "sockets"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    launcher = subprocess.run([sys.executable, "-m", "portal.tensorboard_socket", "--socket", str(directory / "socket"),
                               "--logdir", str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert launcher.returncode == 2 and launcher.stdout == ""
    assert launcher.stderr == (f"tensorboard_socket: not started: socket directory {directory} has mode 0755; "
                               "it must be 0700 (no group or other permission)\n")
    assert not (directory / "socket").exists()
