"""Who a job belongs to, and doing things as them.

A notebook calls the jobs API as its own user: commands run plainly. The dashboard runs as root and acts for
the logged-in user: every command that touches the user's files or Slurm jobs runs as that user through
`runuser`, so the kernel and Slurm enforce what the user may do (their home is 0700; `scancel` of another user's
job fails), and root never follows a path the user controls. Any other caller may act only for itself.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import grp
import math
import os
import pwd
import select
import selectors
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from portal.errors import Forbidden
from portal.runas import ENV, ISOLATED_CWD, launcher_env, runuser_argv

COMMAND_TIMEOUT_S = 60
READ_LIMIT_BYTES = 1024 * 1024  # the small files of a job (job.json, pid, exit_status): far more than they hold
READ_TIMEOUT_S = 10
TAIL_LIMIT_BYTES = 16 * 1024 * 1024  # of a log, what a page or the API returns at most
OUTPUT_LIMIT_BYTES = 64 * 1024 * 1024  # what any command run as a user may print before it is stopped
CHUNK_BYTES = 64 * 1024

# A user's file, read within bounds (read_text, tail): $1 the path, $2 how many bytes of its end (or, with $3 = 0,
# of its start). Only a regular file that is not a symlink; opened without following a link and without
# blocking (a FIFO swapped in after the check gives nothing, a device at most $2 bytes); at most $2 bytes read.
READ_BOUNDED = r"""if [ ! -e "$1" ] && [ ! -L "$1" ]; then exit 4; fi
[ -f "$1" ] && [ ! -L "$1" ] || { echo "$(stat -c %F -- "$1" 2>/dev/null || echo unreadable)" >&2; exit 3; }
skip=0
if [ "${3:-1}" = 1 ]; then
  size=$(stat -c %s -- "$1") || exit 1
  if [ "$size" -gt "$2" ]; then skip=$((size - $2)); fi
fi
exec dd if="$1" iflag=nofollow,nonblock,skip_bytes,count_bytes skip="$skip" count="$2" bs=65536 status=none
"""


# Many files read in one process (read_texts): $1 READ_BOUNDED, $2 how many bytes of each file's start, then the
# paths. Per path one line: the bytes in base64, then " <READ_BOUNDED's exit status> <its last error line, base64>".
READ_MANY = r"""R=$1; n=$2; shift 2
for f do
  { err=$( { /bin/sh -c "$R" read "$f" "$n" 0 | base64 -w0 >&3; exit "${PIPESTATUS[0]}"; } 2>&1 ); s=$?; } 3>&1
  [ "$s" = 0 ] && said= || said=$(printf %s "$err" | tail -n 1 | head -c 200 | base64 -w0)
  printf ' %s %s\n' "$s" "$said"
done
"""
READ_MANY_AT_ONCE = 128  # paths per process at most, fewer where their limits could reach OUTPUT_LIMIT_BYTES

# make_job_dir's one process: $1 the job's directory, $2 1 to keep an old one of that name (renamed), then
# (name, bytes, mode) per file, read in turn from stdin (`head -c` reads no further than it is asked), "--", and
# the command to run once all is written. Any failure after mkdir removes the directory: nothing half-made stays.
MAKE_JOB_DIR = r"""umask 077
dir=$1; replace=$2; shift 2
mkdir -p -m 700 -- "${dir%/*}" || exit 1
if [ "$replace" = 1 ] && { [ -e "$dir" ] || [ -L "$dir" ]; }; then
  mv -T -- "$dir" "$dir.replaced-$(date +%s)" || exit 1
fi
mkdir -m 700 -- "$dir" || exit 1
while [ "$#" -ge 3 ] && [ "$1" != -- ]; do
  head -c "$2" > "$dir/$1" && [ "$(stat -c %s -- "$dir/$1")" = "$2" ] && chmod "$3" -- "$dir/$1" || {
    echo "writing $dir/$1 failed" >&2; rm -rf -- "$dir"; exit 1; }
  shift 3
done
[ "$1" = -- ] || { echo "make_job_dir: bad arguments" >&2; rm -rf -- "$dir"; exit 1; }
shift
stat -c %i -- "$dir" || { rm -rf -- "$dir"; exit 1; }
if [ "$#" -gt 0 ] && ! "$@"; then rm -rf -- "$dir"; exit 3; fi
"""
THEN_FAILED = 3  # make_job_dir's exit status when everything was written but the command after it failed


class CallCounts:
    """How often each command was run, by name (thread-safe): the dashboard's performance checks read these."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))


# Commands run as another user (runuser), by the command's file name: each is a fork + exec + PAM session.
RUNUSER_CALLS = CallCounts()
_SCHEDULER_CALLS: dict[str, CallCounts] = {}  # by scheduler name (scheduler_calls)
_SCHEDULER_CALLS_LOCK = threading.Lock()


def scheduler_calls(name: str) -> CallCounts:
    """The counts of the commands that the scheduler called `name` runs as users, made on its first ask (its module
    asks once, at import) and the same ones after: the scheduler adds to them, `every_scheduler_calls` reads them."""
    with _SCHEDULER_CALLS_LOCK:
        return _SCHEDULER_CALLS.setdefault(name, CallCounts())


def every_scheduler_calls() -> dict[str, dict[str, int]]:
    """Each scheduler's counts now ({command: times}), by the name it asked `scheduler_calls` under: only the
    schedulers this process has loaded that run commands as users."""
    with _SCHEDULER_CALLS_LOCK:
        counters = sorted(_SCHEDULER_CALLS.items())
    return {name: counts.as_dict() for name, counts in counters}


class JobAccessError(Forbidden, PermissionError):
    """The caller may not act for this user."""


@dataclass(frozen=True)
class JobUser:
    name: str
    uid: int
    gid: int
    home: Path
    groups: tuple[str, ...]  # Unix group names, or what the caller (the hub, from LDAP) says

    @property
    def is_caller(self) -> bool:
        return os.geteuid() == self.uid

    def command(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
        """argv as this user: plain when the caller is the user (a notebook: their own environment, their own
        code), through runuser with only `isolated_env` when root acts for them (see portal.runas)."""
        if self.is_caller:
            assignments = [f"{k}={v}" for k, v in (env or {}).items()]
            return [ENV, *assignments, *argv] if assignments else list(argv)
        if os.geteuid() != 0:
            raise JobAccessError(f"only root may act for another user; you are uid {os.geteuid()}, not {self.name}")
        return runuser_argv(self.name, self.home, argv, env)

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, input: str | None = None,
            check: bool = True, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
        if not self.is_caller:
            RUNUSER_CALLS.add(os.path.basename(argv[0]))
        # Bytes, decoded here: text mode would turn the \r of progress bars in a job's output into line breaks.
        # The working directory is "/", never the home: a program of ours must not find the user's files first.
        raw = run_bounded(self.command(argv, env), None if input is None else input.encode(), timeout,
                          env=self._launcher_env())
        result = subprocess.CompletedProcess(raw.args, raw.returncode, raw.stdout.decode(errors="replace"),
                                             raw.stderr.decode(errors="replace"))
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, list(argv), result.stdout, result.stderr)
        return result

    def _launcher_env(self) -> dict[str, str] | None:
        return None if self.is_caller else launcher_env()  # the caller's own environment is theirs to pass on

    def start_detached(self, argv: Sequence[str], timeout: float = 30) -> None:
        """Start argv (which detaches itself, e.g. `setsid --fork`) as the user, isolated like `run`, with no
        pipe held open: the caller does not wait for what it started."""
        subprocess.run(self.command(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True, timeout=timeout, cwd=ISOLATED_CWD,
                       env=self._launcher_env())

    # Files in the user's home, touched as the user (see the module's docstring for why not as root).

    def make_dir(self, path: Path, *, exclusive: bool = False) -> None:
        """mkdir as the user, mode 0700; `exclusive`: fail when it exists (mkdir is atomic: a race-free claim)."""
        self.run(["mkdir", "-m", "700", *([] if exclusive else ["-p"]), "--", str(path)])

    def write_text(self, path: Path, text: str, *, mode: str = "600") -> None:
        # install(1) would need a source file; sh writes stdin to the path the user could write anyway.
        self.run(["/bin/sh", "-c", 'umask 077 && cat > "$1" && chmod "$2" "$1"', "sh", str(path), mode], input=text)

    def read_text(self, path: Path, limit: int = READ_LIMIT_BYTES) -> str | None:
        """The file's text (its first `limit` + 1 bytes: a caller that gets more than `limit` knows the file is
        too large), or None when it is missing or unreadable for the user. A FIFO does not hold it up for long."""
        return self.read_text_why(path, limit)[0]

    def read_text_why(self, path: Path, limit: int = READ_LIMIT_BYTES) -> tuple[str | None, str]:
        """read_text, and why it read nothing: (text, ""); (None, "") when there is no such file; (None, the
        reason) when it is not a regular file (what it is instead), cannot be read, or did not answer in time."""
        try:
            result = self.run(["/bin/sh", "-c", READ_BOUNDED, "read", str(path), str(limit + 1), "0"], check=False,
                              timeout=READ_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"not read within {READ_TIMEOUT_S} s"
        return _read_answer(result.returncode, result.stdout, result.stderr)

    def read_texts(self, paths: Sequence[Path], limit: int) -> dict[Path, tuple[str | None, str]]:
        """read_text_why of each path, up to READ_MANY_AT_ONCE of them to a process (a user's list of jobs is one
        process for their records, not one each). A process that does not answer within three times READ_TIMEOUT_S
        gives way to a read of each of its paths alone, each within its own time cap."""
        found: dict[Path, tuple[str | None, str]] = {}
        at_once = max(1, min(READ_MANY_AT_ONCE, OUTPUT_LIMIT_BYTES // (2 * (limit + 1))))  # base64: 4/3 of it
        for start in range(0, len(paths), at_once):
            some = list(paths[start:start + at_once])
            try:
                result = self.run(["/bin/bash", "-c", READ_MANY, "read", READ_BOUNDED, str(limit + 1),
                                   *map(str, some)], check=False, timeout=READ_TIMEOUT_S * 3)
                lines = result.stdout.split("\n")[:len(some)] if result.returncode == 0 else []
                answers = [answer for answer in map(_read_many_answer, lines) if answer is not None]
            except subprocess.TimeoutExpired:
                answers = []
            if len(answers) == len(some):
                found.update(zip(some, answers, strict=True))
            else:
                found.update((path, self.read_text_why(path, limit)) for path in some)
        return found

    def tail(self, path: Path, lines: int | None, max_bytes: int = TAIL_LIMIT_BYTES) -> str | None:
        """The last `lines` lines (None: all) of the file's last `max_bytes`: a log is the user's to write, one line
        of it may be gigabytes, and it may be no file at all (a FIFO, a link to /dev/zero): None then."""
        script = f'{{ {READ_BOUNDED}\n}} | tail -n "$4"' if lines is not None else READ_BOUNDED
        try:
            result = self.run(["/bin/bash", "-c", f"set -o pipefail\n{script}", "tail", str(path), str(max_bytes),
                               "1", str(lines or 0)], check=False, timeout=READ_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None
        return result.stdout if result.returncode == 0 else None

    def list_dirs_inodes(self, paths: Sequence[Path]) -> dict[Path, list[tuple[str, str]]]:
        """(name, inode) of each entry of each directory, in one process as the user (a missing one lists nothing):
        a directory removed and made again under the same name is a new inode."""
        # Each listing follows a line "/<path>": no entry's line starts with "/", since no name holds one.
        script = 'for dir in "$@"; do printf "/%s\\n" "$dir"; ls -1Ai -- "$dir" 2>/dev/null; done'
        result = self.run(["/bin/sh", "-c", script, "ls", *map(str, paths)], check=False)
        found: dict[Path, list[tuple[str, str]]] = {path: [] for path in paths}
        heads = {f"/{path}": path for path in paths}
        current = None
        for line in result.stdout.split("\n"):
            if line in heads:
                current = heads[line]
                continue
            inode, _, name = line.strip().partition(" ")
            if name and current is not None and inode.isdigit():
                found[current].append((name, inode))
        return found

    def exists(self, path: Path) -> bool:
        return self.run(["test", "-e", str(path), "-o", "-L", str(path)], check=False).returncode == 0

    def make_job_dir(self, job_dir: Path, files: Sequence[tuple[str, str, str]], *, replace: bool = False,
                     then: Sequence[str] = (), env: Mapping[str, str] | None = None) -> str:
        """A job's directory and its files in one process as the user (MAKE_JOB_DIR): ~/jobs made if missing,
        `job_dir` made (mkdir: atomic, fails when it exists; with `replace` an old directory of that name is kept,
        renamed), each (name, text, mode) written, then `then` run (scontrol release). Returns the directory's
        inode (the stamp `list_dirs_inodes` gives). If a step fails the directory is removed again and
        CalledProcessError is raised; its returncode is THEN_FAILED when only `then` failed."""
        sizes = [(name, str(len(text.encode())), mode) for name, text, mode in files]
        if any("/" in name or not name for name, _, _ in sizes):
            raise ValueError(f"make_job_dir: file names are plain names; got {[n for n, _, _ in sizes]}")
        argv = ["/bin/sh", "-c", MAKE_JOB_DIR, "sh", str(job_dir), "1" if replace else "0",
                *(field for triple in sizes for field in triple), "--", *then]
        result = self.run(argv, env=env, input="".join(text for _, text, _ in files), check=False)
        inode = result.stdout.strip()
        if result.returncode != 0 or not inode.isdigit():
            raise subprocess.CalledProcessError(result.returncode, ["make_job_dir", str(job_dir), *then],
                                                result.stdout, result.stderr)
        return inode

    def can_read_dir(self, path: str) -> bool:
        """Whether the user can list and enter the directory (asked as the user: groups and ACLs count)."""
        return self.run(["test", "-d", path, "-a", "-r", path, "-a", "-x", path], check=False).returncode == 0


def _read_many_answer(line: str) -> tuple[str | None, str] | None:
    """One path's answer from READ_MANY's line; None for a line that is not one."""
    data, _, rest = line.partition(" ")
    status, _, said = rest.partition(" ")
    if not status.isdigit():
        return None
    try:
        text, err = (base64.b64decode(part, validate=True).decode(errors="replace") for part in (data, said))
    except binascii.Error:
        return None
    return _read_answer(int(status), text, err)


def _read_answer(status: int, text: str, stderr: str) -> tuple[str | None, str]:
    """read_text_why's answer from READ_BOUNDED's exit status, output and error output."""
    if status == 0:
        return text, ""
    if status == 4:
        return None, ""
    said = stderr.strip().splitlines()[-1:] or ["unreadable"]
    if status == 3:
        return None, f"a {said[0][:60]}, not a regular file"
    return None, f"unreadable ({said[0][:120]})"


def run_bounded(argv: Sequence[str], input: bytes | None, timeout: float, env: Mapping[str, str] | None = None,
                max_output: int = OUTPUT_LIMIT_BYTES) -> subprocess.CompletedProcess:
    """subprocess.run(capture_output=True, timeout=...) for a command that may meet a user's adversarial files: it
    runs in a process group of its own, and when it ends, times out or prints more than `max_output` bytes the
    whole group is killed. (subprocess.run kills only the process it started: runuser, not the `tail` that runuser
    started, which then read /dev/zero until the machine ran out of memory.) TimeoutExpired on timeout."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ISOLATED_CWD, env=env,
                            start_new_session=True)
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    pending = memoryview(input or b"")
    deadline, printed, timed_out = time.monotonic() + timeout, 0, False
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(out_fd, selectors.EVENT_READ)
            selector.register(err_fd, selectors.EVENT_READ)
            if input is not None:
                os.set_blocking(proc.stdin.fileno(), False)
                selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
            while len(selector.get_map()) and printed <= max_output:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                for key, _ in selector.select(min(left, 1.0)):
                    if key.events & selectors.EVENT_WRITE:
                        try:
                            pending = pending[os.write(key.fd, pending[:CHUNK_BYTES]):]
                        except BrokenPipeError:
                            pending = pending[:0]
                        if not pending:
                            selector.unregister(key.fd)
                            proc.stdin.close()
                        continue
                    data = os.read(key.fd, CHUNK_BYTES)
                    if data:
                        chunks[key.fd].append(data)
                        printed += len(data)
                    else:
                        selector.unregister(key.fd)
        timed_out = timed_out or (printed <= max_output and not _exited(proc, deadline))
    finally:
        _end_group(proc)
    if timed_out:
        raise subprocess.TimeoutExpired(list(argv), timeout)
    out, err = b"".join(chunks[out_fd]), b"".join(chunks[err_fd])
    if printed > max_output:
        return subprocess.CompletedProcess(list(argv), proc.returncode or 1, out[:max_output],
                                           err + f"\nstopped after {max_output} bytes of output".encode())
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def _exited(proc: subprocess.Popen, deadline: float) -> bool:
    """Whether the command's first process exits by `deadline`; it is not reaped, so its process id, and with it
    its group's, stays this caller's until `_end_group`."""
    pidfd = os.pidfd_open(proc.pid)  # readable once the process has exited; waiting on it reaps nothing
    try:
        # poll, not select: select refuses a descriptor numbered 1024 or more, which a dashboard holding a
        # connection per user reaches (bench.dashboard at 5,000 users: 749 requests answered 500).
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(math.ceil(max(0.0, deadline - time.monotonic()) * 1000)))
    finally:
        os.close(pidfd)


def _end_group(proc: subprocess.Popen) -> None:
    """Kill what is left of the command's process group (what it started and left running: a reader blocked on a
    FIFO, say), then reap its first process."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def job_user(user: str | None = None, groups: Sequence[str] | None = None) -> JobUser:
    """The user jobs run as: `user` (root callers act for anyone), else the caller. `groups` defaults to the user's
    Unix groups (on a cluster nslcd/sssd makes them the directory's groups, which the GPU quota is keyed on)."""
    try:
        entry = pwd.getpwnam(user) if user else pwd.getpwuid(os.geteuid())
    except KeyError:
        raise JobAccessError(f"user {user!r} does not exist on this machine") from None
    if entry.pw_uid != os.geteuid() and os.geteuid() != 0:
        raise JobAccessError(f"only root may act for another user; you are uid {os.geteuid()}, not {entry.pw_name}")
    if groups is None:
        names = []
        for gid in os.getgrouplist(entry.pw_name, entry.pw_gid):
            try:
                names.append(grp.getgrgid(gid).gr_name)
            except KeyError:  # a gid without a name still exists; it just cannot carry a quota
                continue
        groups = names
    return JobUser(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, home=Path(entry.pw_dir),
                   groups=tuple(sorted(set(groups))))
