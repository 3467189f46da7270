"""Services of the box: how each starts, when it is ready, and stopping it by its recorded PID.

Every service runs in the foreground of a session of its own (no daemonizing), so the PID this module records is
the service's own; `deploy/daemons.py` (shared with the Kubernetes box) checks and signals it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from daemons import SurvivedKill, port_in_use, running_pid, tail, terminate

from parts.layout import BoxError, Layout

STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL


def _nothing(lay: Layout) -> None:
    return None


@dataclass(frozen=True)
class Service:
    name: str
    program: str  # basename that must appear in /proc/PID/cmdline, so a recycled PID is not mistaken
    prepare: Callable[[Layout], None]
    command: Callable[[Layout], list[str]]
    ready: Callable[[Layout], str | None]  # None when ready, else why not yet
    timeout: float
    ports: Callable[[Layout], list[tuple[str, int]]] = lambda lay: []
    user: str | None = None
    env: Callable[[Layout], dict[str, str]] = lambda lay: dict(os.environ)
    cwd: Callable[[Layout], Path] = lambda lay: lay.root
    extra_logs: Callable[[Layout], list[Path]] = lambda lay: []
    # Once ready (every `up`, also when it ran already): work that needs it running; returns a line to show or "".
    after_start: Callable[[Layout], str] = lambda lay: ""
    # After its PID is gone: what else of it must go (a node's jobs live in its namespace, not below slurmd).
    after_stop: Callable[[Layout], None] = field(default=_nothing)


def start_service(svc: Service, lay: Layout) -> list[str]:
    """Start one service unless it runs already, wait until it is ready; the lines to show."""
    svc.prepare(lay)
    pid = running_pid(lay.pid_file(svc.name), svc.program)
    if pid:
        wait_ready(svc, lay, None)
        lines = [f"{svc.name}: already running (pid {pid})"]
    else:
        lines = [_start(svc, lay)]
    extra = svc.after_start(lay)
    return lines + ([extra] if extra else [])


def _start(svc: Service, lay: Layout) -> str:
    for host, port in svc.ports(lay):
        if port_in_use(host, port):
            raise BoxError(f"{svc.name}: port {host}:{port} is already in use by another process")
    started = time.monotonic()
    proc = launch(svc, lay)
    lay.pid_file(svc.name).write_text(f"{proc.pid}\n")
    try:
        wait_ready(svc, lay, proc)
    except BoxError:
        if proc.poll() is None:  # once reaped, its PID may already be another process's
            _terminate(svc, proc.pid)
        lay.pid_file(svc.name).unlink(missing_ok=True)
        svc.after_stop(lay)
        raise
    return f"{svc.name}: started (pid {proc.pid}) in {time.monotonic() - started:.1f} s"


def launch(svc: Service, lay: Layout) -> subprocess.Popen[bytes]:
    """Start the service in the foreground of its own session, detached from this script.

    A service with its own user (munged, MariaDB) is started as that user by Popen rather than runuser, which
    would stay in between as the recorded PID."""
    log = open(lay.log_file(svc.name), "ab")
    log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} box.py starts {svc.name}\n".encode())
    log.flush()
    user = {"user": svc.user, "group": svc.user, "extra_groups": []} if svc.user else {}
    try:
        return subprocess.Popen(svc.command(lay), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=svc.cwd(lay), env=svc.env(lay),
                                start_new_session=True, **user)  # type: ignore[call-overload]
    except OSError as err:
        raise BoxError(f"{svc.name}: cannot start {svc.command(lay)[0]}: {err}") from err
    finally:
        log.close()


def wait_ready(svc: Service, lay: Layout, proc: subprocess.Popen[bytes] | None) -> None:
    deadline = time.monotonic() + svc.timeout
    while True:
        reason = svc.ready(lay)
        if reason is None:
            return
        if proc is not None and proc.poll() is not None:
            raise BoxError(failure(svc, lay, f"exited with status {proc.returncode} before it was ready"))
        if time.monotonic() > deadline:
            raise BoxError(failure(svc, lay, f"not ready within {svc.timeout:.0f} s ({reason})"))
        time.sleep(0.3)


def failure(svc: Service, lay: Layout, what: str) -> str:
    logs = [lay.log_file(svc.name), *svc.extra_logs(lay)]
    tails = "\n".join(f"--- last lines of {log}:\n{tail(log, 30)}" for log in logs if log.exists())
    return f"{svc.name} {what}; read {', '.join(map(str, logs))}\n{tails}"


def _terminate(svc: Service, pid: int) -> bool:
    """SIGTERM, then SIGKILL to it and everything below it after STOP_TIMEOUT; True when it had to be killed.

    Its descendants too: the hub's proxy and services run in sessions of their own, and would outlive it."""
    try:
        return terminate(pid, STOP_TIMEOUT, with_descendants=True)
    except SurvivedKill as err:
        raise BoxError(f"{svc.name}: {err}") from err


def stop_service(svc: Service, lay: Layout) -> str:
    pid_file = lay.pid_file(svc.name)
    pid = running_pid(pid_file, svc.program)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        svc.after_stop(lay)
        return f"{svc.name}: not running"
    killed = _terminate(svc, pid)
    pid_file.unlink(missing_ok=True)
    svc.after_stop(lay)
    return f"{svc.name}: {f'killed after {STOP_TIMEOUT:.0f} s' if killed else 'stopped'} (pid {pid})"


def service_pid(svc: Service, lay: Layout) -> int | None:
    return running_pid(lay.pid_file(svc.name), svc.program)


class Lock:
    """One box.py at a time per state dir."""

    def __init__(self, lay: Layout) -> None:
        self.path = lay.run / "box.lock"

    def __enter__(self) -> None:
        self.file = open(self.path, "w")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise BoxError(f"another box.py is working on this state dir ({self.path})") from err

    def __exit__(self, *exc: object) -> None:
        self.file.close()
