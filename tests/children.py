"""A program the suites start and wait for (a training run, above all), read as it writes.

Its guard is for a hang, never a speed limit (speed is measured by `make bench`): the child is ended, with every
process of its session, and the test fails, once it has said nothing for STALL_S or has run for LIMIT_S. A fixed
total sized on an idle machine is a timed test: beside the boxes a run slows several times over. Stop 59's CI
killed a two-worker DenseNet-121 epoch at a total of 420 s while it wrote its model card; its first step, traced
beside the boxes, took about 250 s without a word, and the whole run takes about 90 s alone.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

STALL_S = 600
LIMIT_S = 1800
AUTOGROUP = "/proc/{pid}/autogroup"


def start_in_own_session(command: list[str], **popen) -> subprocess.Popen:
    """subprocess.Popen(command, **popen) in a session of its own, that session at this process's niceness. With
    kernel.sched_autogroup_enabled (these machines' default) each session is a scheduling group, which the kernel
    weighs by the group's niceness, never by its processes': a training started in a session of its own by a niced
    worker (tests/conftest.py, BOX_FREE_NICENESS) took the CPU as a process at niceness 0 does, from the boxes'
    sides (docs/testing.md, "How long it takes", 2026-12-05). Without autogroups (no such file) the processes'
    niceness, which they inherit, is what counts."""
    process = subprocess.Popen(command, start_new_session=True, **popen)
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    if niceness > 0:
        try:
            Path(AUTOGROUP.format(pid=process.pid)).write_text(str(niceness))
        except (FileNotFoundError, ProcessLookupError):  # no autogroups, or it has already ended
            pass
    return process


class Child:
    """A child started in a session of its own, its two pipes read as it writes them (one it filled would make it
    wait), noting when it last said anything."""

    def __init__(self, command: list[str], *, cwd: Path | str, env: dict[str, str] | None = None) -> None:
        self.command = command
        self.started = self.heard = time.monotonic()
        self.process = start_in_own_session(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._said: tuple[list[bytes], list[bytes]] = ([], [])
        self._readers = [threading.Thread(target=self._drain, args=(pipe, chunks), daemon=True)
                         for pipe, chunks in zip((self.process.stdout, self.process.stderr), self._said, strict=True)]
        for reader in self._readers:
            reader.start()

    def _drain(self, pipe, chunks: list[bytes]) -> None:
        while chunk := os.read(pipe.fileno(), 65536):
            chunks.append(chunk)
            self.heard = time.monotonic()

    def _stop(self) -> None:
        """End it and everything it started (a launcher's workers)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def kill(self) -> None:
        """End it, everything it started, and the reading of its pipes."""
        self._stop()
        self._output()

    def _output(self) -> tuple[str, str]:
        """What it wrote to each pipe once both closed, decoded as text=True would (universal newlines: a
        progress bar's carriage return ends a line)."""
        for reader in self._readers:
            reader.join()
        stdout, stderr = (io.TextIOWrapper(io.BytesIO(b"".join(chunks)), errors="replace").read()
                          for chunks in self._said)
        for pipe in (self.process.stdout, self.process.stderr):
            pipe.close()
        return stdout, stderr

    def end(self) -> subprocess.CompletedProcess:
        """Its end, whatever its exit status; the test fails if it hangs (see the module's docstring)."""
        why = ""
        while not why:
            try:
                self.process.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if now - self.heard > STALL_S:
                    why = f"said nothing for {STALL_S} s"
                elif now - self.started > LIMIT_S:
                    why = f"did not end within {LIMIT_S} s"
        if why:
            self._stop()
        stdout, stderr = self._output()
        if why:
            pytest.fail(f"{' '.join(self.command[:6])} ... {why}:\n{(stdout + stderr)[-4000:]}")
        return subprocess.CompletedProcess(self.command, self.process.returncode, stdout, stderr)


def run_child(command: list[str], *, cwd: Path | str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """subprocess.run(command, capture_output=True, text=True), ended only when it hangs."""
    return Child(command, cwd=cwd, env=env).end()
