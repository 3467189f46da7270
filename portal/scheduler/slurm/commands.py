"""Every Slurm command the portal runs goes through `SlurmCommands`: one timeout, one minimal environment, one way
to tell "Slurm refused" (SlurmRefused) from "Slurm did not answer" (SlurmUnavailable), sync or async.

As root (the hub, the dashboard, the accounts sync) it reads cluster-wide facts and changes the accounting; as a
user (`user=`: a portal.records.account.JobUser, the command runs through runuser) it submits, reads and cancels that
user's jobs, so that Slurm itself decides what they may see and do. The questions asked most (the queue, the
partitions and nodes, a snapshot of all of them) are methods here, so there is one `squeue` and one `scontrol`
reading in the portal.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from portal.config import PortalConfig
from portal.inputs import one_line
from portal.scheduler.cluster import NodePool, QueuedJob
from portal.scheduler.slurm.answers import nodes_from_scontrol, slurm_partitions
from portal.scheduler.slurm.data_parsers import DATA_PARSERS
from portal.scheduler.slurm.errors import SlurmError, SlurmRefused, SlurmUnavailable
from portal.scheduler.slurm.json_answers import SlurmAnswerError, read_squeue
from portal.scheduler.snapshot import ClusterSnapshot

if TYPE_CHECKING:
    from portal.records.account import CallCounts

SLURM_TIMEOUT_S = 20  # for every Slurm command: a controller that takes longer is one that does not answer
MINIMAL_PATH = "/usr/bin:/bin"
# The --json flag each Slurm (by its commands' directory) is asked with: `json_flag`.
_JSON_FLAGS: dict[str, str] = {}
# Slurm's words when the controller or the accounting daemon cannot be reached: no answer, not a refusal.
UNREACHABLE = re.compile(r"Unable to contact|Socket timed out|Zero Bytes were transmitted|Connection refused|"
                         r"connect failure|standby mode|Problem talking to the database|Connection timed out")


class AsUser(Protocol):
    """Runs a command as one user (portal.records.account.JobUser)."""

    def run(self, argv: Sequence[str], *, env: dict[str, str] | None = None, input: str | None = None,
            check: bool = True, timeout: float = ...) -> subprocess.CompletedProcess: ...


def version_key(version: str) -> tuple[int, ...]:
    """"v0.0.42" as (0, 0, 42), to compare."""
    return tuple(int(part) for part in version.lstrip("v").split("."))


class SlurmCommands:
    """Slurm's commands from `slurm_bin_dir` with the portal's slurm.conf, and the answers read from them."""

    def __init__(self, cfg: PortalConfig, timeout: float = SLURM_TIMEOUT_S, counts: CallCounts | None = None,
                 fake: Callable[[Sequence[str]], str] | None = None):
        """`counts`: where the commands run as a user are counted by name (the dashboard shows them); `fake`: a
        fake Slurm's answers (argv -> output, or a SlurmError) for unit tests of what reads them."""
        self.cfg, self.timeout, self.counts, self.fake = cfg, timeout, counts, fake

    def environment(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.cfg.slurm_conf_path), "PATH": MINIMAL_PATH}

    def complete(self, *argv: str, user: AsUser | None = None, input: str | None = None
                 ) -> subprocess.CompletedProcess:
        """The finished command, whatever its exit status; SlurmUnavailable when it did not finish in time or
        could not run."""
        command = [str(self.cfg.slurm_bin_dir / argv[0]), *argv[1:]]
        if user is not None and self.counts is not None:
            self.counts.add(argv[0])
        try:
            if user is None:
                return subprocess.run(command, capture_output=True, text=True, timeout=self.timeout, input=input,
                                      env=self.environment())
            # runuser gives the user's session its own minimal PATH (portal.runas)
            return user.run(command, env={"SLURM_CONF": str(self.cfg.slurm_conf_path)}, input=input, check=False,
                            timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(f"Slurm did not answer `{shlex.join(argv)}` within {self.timeout:g} s") from None
        except OSError as err:
            raise SlurmUnavailable(f"cannot run {command[0]}: {err.strerror}") from None

    def run(self, *argv: str, user: AsUser | None = None, input: str | None = None, check: bool = True) -> str:
        """The command's output. SlurmUnavailable when Slurm did not answer, SlurmRefused (with `said`: Slurm's
        words) when it refused; with `check=False` a refusal returns the output too."""
        if self.fake is not None:
            return self.fake(argv)
        result = self.complete(*argv, user=user, input=input)
        if check and result.returncode != 0:
            said = one_line(result.stderr, None) or one_line(result.stdout, None) or f"exit status {result.returncode}"
            kind = SlurmUnavailable if UNREACHABLE.search(said) else SlurmRefused
            raise kind(f"Slurm refused `{shlex.join(argv)}`: {said}", said)
        return result.stdout

    async def arun(self, *argv: str, user: AsUser | None = None, input: str | None = None,
                   check: bool = True) -> str:
        """`run` for the hub's event loop, in a worker thread."""
        return await asyncio.to_thread(self.run, *argv, user=user, input=input, check=check)

    def json_flag(self) -> str:
        """`--json=<version>`: the newest data_parser version that both this Slurm has (`squeue --json=list`, from
        23.02) and the portal reads, so that a release whose default is newer (26.05's) still answers in one the
        portal knows; `--json` where Slurm lists none (22.05, whose one version is read). Asked once per process
        and Slurm."""
        if self.fake is not None:
            return "--json"
        key = str(self.cfg.slurm_bin_dir)
        if key not in _JSON_FLAGS:
            try:
                listed = self.complete("squeue", "--json=list")
            except SlurmUnavailable:
                return "--json"  # asked again next time
            named = set(re.findall(r"data_parser/(v[0-9]+\.[0-9]+\.[0-9]+)", listed.stdout + listed.stderr))
            known = [version for version in DATA_PARSERS if version in named]
            _JSON_FLAGS[key] = f"--json={max(known, key=version_key)}" if known else "--json"
        return _JSON_FLAGS[key]

    # --- the answers read most ---

    def queue(self, user: AsUser | None = None) -> dict[str, QueuedJob]:
        """Every job Slurm's controller remembers that squeue lists (22.05's lists ended ones too: see `queued`),
        asked as root or as `user` (PrivateData may hide others' jobs from them)."""
        command = ("squeue", self.json_flag())
        answer = self.run(*command, user=user)
        try:
            return read_squeue(answer, time.time())
        except SlurmAnswerError as err:
            raise SlurmUnavailable(f"`{shlex.join(command)}`: {err}") from None

    def partitions(self, user: AsUser | None = None) -> tuple[NodePool, ...]:
        """The partitions that are up and have nodes, with their nodes."""
        return slurm_partitions(self.run("scontrol", "show", "partition", "-o", user=user),
                                self.run("scontrol", "show", "node", "-d", "-o", user=user))

    def node_address(self, node: str) -> str:
        """Where the hub reaches `node`: its NodeAddr; the name itself when Slurm does not say or answer."""
        try:
            found = nodes_from_scontrol(self.run("scontrol", "show", "node", "-o", node)).get(node)
        except SlurmError:
            return node
        return found.address if found and found.address else node

    def snapshot(self, clock=time.monotonic) -> ClusterSnapshot:
        """The queue (what plain squeue lists: pending and running), the partitions and the nodes, asked now."""
        asked_at = clock()
        queue = {job.id: job for job in self.queue().values() if job.queued}
        partition_lines = self.run("scontrol", "show", "partition", "-o")
        node_lines = self.run("scontrol", "show", "node", "-d", "-o")
        return ClusterSnapshot(taken_at=clock(), queue=queue, partitions=slurm_partitions(partition_lines, node_lines),
                               nodes=nodes_from_scontrol(node_lines), asked_at=asked_at)
