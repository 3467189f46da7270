"""TensorBoard on a Unix socket in a directory only its owner can enter: each user's TensorBoard, reachable only
through their server's proxy (jupyter-server-proxy, behind the hub's login).

    python -m portal.tensorboard_socket --socket DIR/socket --logdir ~/jobs --path_prefix /user/alice/tensorboard

Why it exists: `tensorboard --host 127.0.0.1` is open to every process of the machine, and on a shared Slurm node
that is every other user's job: anyone there could read alice's runs, unauthenticated. TensorBoard 2.15 has no
Unix-socket flag, so this serves its app through its public Python API (`tensorboard.program.TensorBoard`
with a `server_class` of our own). TensorBoard's fast loader (`--load_fast`) is a data server on a loopback TCP port,
open to the same neighbours: here the Python loader always reads the logdir, and no TCP socket is ever opened.
The socket's directory must be a real directory of the current user's with no group or other permission (0700):
jupyter-server-proxy's `unix_socket: True` makes one (a mkdtemp) and names the socket in it.
"""

from __future__ import annotations

import argparse
import functools
import logging
import mimetypes
import os
import signal
import stat
import sys
import threading
import warnings
from pathlib import Path
from urllib.parse import quote

from werkzeug import serving

from portal.errors import PortalError
from programkit.userfiles import private_directory_problem

with warnings.catch_warnings():  # TensorBoard 2.15 imports pkg_resources, which warns at every start
    warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
    # The names, not `program`: the package hands out its modules lazily, which would import (and warn) later.
    from tensorboard.program import TensorBoard, TensorBoardServer

SOCKET_UMASK = 0o177  # the socket file 0600: its owner alone may connect (the directory is 0700 besides)
TCP_FLAGS = ("port", "host", "bind_all")  # TensorBoard's own listening flags: nothing here listens on TCP
SUN_PATH_MAX = 107  # bytes in a Unix socket's path on Linux (sockaddr_un.sun_path, less its NUL)


class NotStarted(PortalError):
    """Not started: the socket's directory or path is not the current user's alone, or a TensorBoard flag is wrong."""


def check_private_directory(directory: Path) -> None:
    """Refuse (NotStarted, naming the path) unless `directory` is a real directory (not a symlink), owned by the
    current user, with no group or other permission."""
    problem = private_directory_problem(directory)
    if problem:
        raise NotStarted(f"socket directory {directory} {problem}")


def remove_stale_socket(path: Path) -> None:
    """A socket of ours left at `path` by a TensorBoard that died is removed; anything else there is refused."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(found.st_mode) or found.st_uid != os.getuid():
        raise NotStarted(f"{path} exists and is not a socket of yours; not removed, not started")
    path.unlink()


class _RequestHandler(serving.WSGIRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as TensorBoard's own server does


class UnixSocketServer(TensorBoardServer):
    """TensorBoard's WSGI app on werkzeug's threaded server, bound to the Unix socket `path` (0600)."""

    def __init__(self, wsgi_app, flags, *, path: Path, stopped: threading.Event) -> None:
        self._path, self._stopped, self._prefix = path, stopped, flags.path_prefix
        umask = os.umask(SOCKET_UMASK)
        try:
            self._server = serving.make_server(f"unix://{path}", 0, wsgi_app, threaded=True,
                                               request_handler=_RequestHandler)
        finally:
            os.umask(umask)

    def serve_forever(self) -> None:
        try:
            self._server.serve_forever()
        finally:
            self._stopped.set()  # the launcher's main thread ends with it

    def get_url(self) -> str:
        return f"http+unix://{quote(str(self._path), safe='')}{self._prefix}/"


def serve(path: Path, tensorboard_args: list[str]) -> int:
    """Serve TensorBoard (its flags `tensorboard_args`) on the socket `path` until SIGTERM; 1 if it stops alone."""
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise NotStarted(f"socket path {path} is over {SUN_PATH_MAX} bytes, a Unix socket's limit (a shorter TMPDIR)")
    check_private_directory(path.parent)
    remove_stale_socket(path)
    stopped = threading.Event()
    board = TensorBoard(server_class=functools.partial(UnixSocketServer, path=path, stopped=stopped))
    # "false": the Python loader; the fast one serves the data on a loopback TCP port (see the module's docstring).
    try:
        board.configure(("", *tensorboard_args), load_fast="false", grpc_data_provider="")
    except ValueError as err:  # TensorBoard's FlagsError among them
        raise NotStarted(f"TensorBoard's flags: {err}") from None
    tcp = [f"--{name}" for name in TCP_FLAGS if getattr(board.flags, name, None)]
    if tcp:
        raise NotStarted(f"{', '.join(tcp)} given: this TensorBoard listens on --socket only")
    for mime, suffix in (("application/javascript", ".js"), ("font/woff2", ".woff2"), ("text/html", ".html")):
        mimetypes.add_type(mime, suffix)  # as `tensorboard` sets them: a host's own table may say otherwise
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request in the server's log
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        print(f"TensorBoard serving {board.flags.logdir} at {board.launch()}", file=sys.stderr, flush=True)
        stopped.wait()
    finally:
        path.unlink(missing_ok=True)
    print("TensorBoard stopped serving", file=sys.stderr)
    return 1


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)  # jupyter-server-proxy's stop: serve()'s finally removes the socket


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.tensorboard_socket", allow_abbrev=False,
                                     description="TensorBoard on a Unix socket in a private (0700) directory; "
                                                 "every other argument is TensorBoard's.")
    parser.add_argument("--socket", required=True, type=Path, help="the socket's path, in a 0700 directory of yours")
    args, tensorboard_args = parser.parse_known_args(argv)
    try:
        return serve(args.socket.absolute(), tensorboard_args)
    except NotStarted as err:
        print(f"tensorboard_socket: not started: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
