"""Services of a box: how each starts, when it is ready, and stopping it by its recorded PID. Shared by the cluster
in a box (deploy/local/box.py) and the Kubernetes box (deploy/kubernetes/kubebox.py), with the two helpers every
part of either box uses: running a command and writing a generated file (and a secret, once).

Every service runs in the foreground of a session of its own (no daemonizing), so the PID this module records is
the service's own; `daemons.py` checks and signals it. A box hands its state dir as a `Place`: where each
service's PID file and log go, and its lock. Both boxes import it as `deploy.supervise`: they run as modules of the
`deploy` package (`python -m deploy.local.box`, `python -m deploy.kubernetes.kubebox`) from the repository root.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.daemons import SurvivedKill, ephemeral_note, port_in_use, running_pid, tail, terminate

STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL


class BoxError(RuntimeError):
    """Something the box cannot do; the message says what failed and where to look."""


class Place:
    """A box's state dir as supervision sees it: run/NAME.pid, log/NAME.log and the box's lock in run/."""

    script = "box"  # the box's command, for messages ("box.py"); its lock is run/<script without .py>.lock

    @property
    def root(self) -> Path:
        raise NotImplementedError

    @property
    def lock_file(self) -> Path:
        return self.root / "run" / f"{Path(self.script).stem}.lock"

    def pid_file(self, service: str) -> Path:
        return self.root / "run" / f"{service}.pid"

    def log_file(self, service: str) -> Path:
        return self.root / "log" / f"{service}.log"


def _nothing(place: Any) -> None:
    return None


@dataclass(frozen=True)
class Service:
    name: str
    program: str  # basename that must appear in /proc/PID/cmdline, so a recycled PID is not mistaken
    prepare: Callable[[Any], None]  # each box passes its own Place (Layout, KubeBox) to these callables
    command: Callable[[Any], list[str]]
    ready: Callable[[Any], str | None]  # None when ready, else why not yet
    timeout: float
    ports: Callable[[Any], list[tuple[str, int]]] = lambda place: []
    user: str | None = None
    env: Callable[[Any], dict[str, str]] = lambda place: dict(os.environ)
    cwd: Callable[[Any], Path] = lambda place: place.root
    extra_logs: Callable[[Any], list[Path]] = lambda place: []
    # Once ready (every `up`, also when it ran already): work that needs it running; returns a line to show or "".
    after_start: Callable[[Any], str] = lambda place: ""
    # After its PID is gone: what else of it must go (a node's jobs live in its namespace, not below slurmd).
    after_stop: Callable[[Any], None] = field(default=_nothing)
    # Started beside the services after it, waited for at the end (start_services): nothing after it needs it.
    beside: bool = False


def flags(**values: object) -> list[str]:
    """Command-line options `--name=value`, one per keyword (underscores become dashes), in the order given."""
    return [f"--{name.replace('_', '-')}={value}" for name, value in values.items()]


def start_service(svc: Service, place: Place) -> list[str]:
    """Start one service unless it runs already, wait until it is ready; the lines to show."""
    return await_service(svc, place, begin_service(svc, place))


def start_services(services: list[Service], place: Place) -> Iterator[str]:
    """Start each service in order, each ready before the next starts, except those marked `beside`: such a
    service (nothing after it needs it at its start: the MLflow server, which takes 10-30 s) is launched in its turn
    and waited for after the rest; the lines to show, as they come."""
    waiting = []
    for svc in services:
        if svc.beside:
            waiting.append((svc, begin_service(svc, place)))
        else:
            yield from start_service(svc, place)
    for svc, begun in waiting:
        yield from await_service(svc, place, begun)


def begin_service(svc: Service, place: Place) -> tuple[subprocess.Popen[bytes], float] | int:
    """The service launched (its process, when), or the PID it already runs with."""
    svc.prepare(place)
    pid = running_pid(place.pid_file(svc.name), svc.program)
    if pid:
        return pid
    try:
        for host, port in svc.ports(place):
            if port_in_use(host, port):
                raise BoxError(f"{svc.name}: port {host}:{port} is already in use by another process"
                               f"{ephemeral_note(port)}")
        started = time.monotonic()
        proc = launch(svc, place)
    except BaseException:
        svc.after_stop(place)  # undo what `prepare` did outside the box (exim4's line in trusted_configs)
        raise
    place.pid_file(svc.name).write_text(f"{proc.pid}\n")
    return proc, started


def await_service(svc: Service, place: Place, begun: tuple[subprocess.Popen[bytes], float] | int) -> list[str]:
    """Once it is ready: the lines to show (and its after_start's)."""
    if isinstance(begun, int):
        wait_ready(svc, place, None)
        lines = [f"{svc.name}: already running (pid {begun})"]
    else:
        proc, started = begun
        try:
            wait_ready(svc, place, proc)
        except BoxError:
            if proc.poll() is None:  # once reaped, its PID may already be another process's
                _terminate(svc, proc.pid)
            place.pid_file(svc.name).unlink(missing_ok=True)
            svc.after_stop(place)
            raise
        notes = [(port, ephemeral_note(port)) for _, port in svc.ports(place)]
        hazards = "".join(f"; warning: port {port}{note}" for port, note in notes if note)
        lines = [f"{svc.name}: started (pid {proc.pid}) in {time.monotonic() - started:.1f} s{hazards}"]
    extra = svc.after_start(place)
    return lines + ([extra] if extra else [])


def launch(svc: Service, place: Place) -> subprocess.Popen[bytes]:
    """Start the service in the foreground of its own session, detached from this script.

    A service with its own user (munged, MariaDB) is started as that user by Popen rather than runuser, which
    would stay in between as the recorded PID."""
    log = open(place.log_file(svc.name), "ab")
    log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {place.script} starts {svc.name}\n".encode())
    log.flush()
    user = {"user": svc.user, "group": svc.user, "extra_groups": []} if svc.user else {}
    try:
        return subprocess.Popen(svc.command(place), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=svc.cwd(place), env=svc.env(place),
                                start_new_session=True, **user)  # type: ignore[call-overload]
    except OSError as err:
        raise BoxError(f"{svc.name}: cannot start {svc.command(place)[0]}: {err}") from err
    finally:
        log.close()


def wait_ready(svc: Service, place: Place, proc: subprocess.Popen[bytes] | None) -> None:
    deadline = time.monotonic() + svc.timeout
    while True:
        reason = svc.ready(place)
        if reason is None:
            return
        if proc is not None and proc.poll() is not None:
            raise BoxError(failure(svc, place, f"exited with status {proc.returncode} before it was ready"))
        if time.monotonic() > deadline:
            raise BoxError(failure(svc, place, f"not ready within {svc.timeout:.0f} s ({reason})"))
        time.sleep(0.3)


def failure(svc: Service, place: Place, what: str) -> str:
    logs = [place.log_file(svc.name), *svc.extra_logs(place)]
    tails = "\n".join(f"--- last lines of {log}:\n{tail(log, 30)}" for log in logs if log.exists())
    return f"{svc.name} {what}; read {', '.join(map(str, logs))}\n{tails}"


def _terminate(svc: Service, pid: int) -> bool:
    """SIGTERM, then SIGKILL to it and everything below it after STOP_TIMEOUT; True when it had to be killed.

    Its descendants too: the hub's proxy and services run in sessions of their own, and would outlive it."""
    try:
        return terminate(pid, STOP_TIMEOUT, with_descendants=True)
    except SurvivedKill as err:
        raise BoxError(f"{svc.name}: {err}") from err


def stop_service(svc: Service, place: Place) -> str:
    pid_file = place.pid_file(svc.name)
    pid = running_pid(pid_file, svc.program)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        svc.after_stop(place)
        return f"{svc.name}: not running"
    killed = _terminate(svc, pid)
    pid_file.unlink(missing_ok=True)
    svc.after_stop(place)
    return f"{svc.name}: {f'killed after {STOP_TIMEOUT:.0f} s' if killed else 'stopped'} (pid {pid})"


def service_pid(svc: Service, place: Place) -> int | None:
    return running_pid(place.pid_file(svc.name), svc.program)


class Lock:
    """One box script at a time per state dir."""

    def __init__(self, place: Place) -> None:
        self.path, self.script = place.lock_file, place.script

    def __enter__(self) -> None:
        self.file = open(self.path, "w")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            self.file.close()
            raise BoxError(f"another {self.script} is working on this state dir ({self.path})") from err

    def __exit__(self, *exc: object) -> None:
        self.file.close()


def run(cmd: list[str], what: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; on failure raise BoxError naming `what` and the command's output."""
    try:
        return subprocess.run(cmd, check=True, text=True, capture_output=True, **kwargs)
    except FileNotFoundError as err:
        raise BoxError(f"{what}: {cmd[0]} is not installed") from err
    except subprocess.CalledProcessError as err:
        output = (err.stderr or err.stdout or "").strip()
        raise BoxError(f"{what}: `{' '.join(cmd)}` exited {err.returncode}: {output}") from err


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a generated file; leave it (and its mtime) alone when the content is already right."""
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        tmp.touch(mode=mode)  # a file with a password is never readable by others, not even for a moment
        tmp.write_text(text)
        tmp.replace(path)
    os.chmod(path, mode)


def make_once(path: Path, text: str) -> None:
    """A secret made on a service's first start: `text` in a new file of mode 0600; an existing one is kept."""
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
