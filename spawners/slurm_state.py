"""A Slurm job's state as the spawner reads it: a failed `squeue` is Slurm not answering, never a state.

batchspawner 1.3.0 turns a failed squeue into the job's state: its stderr becomes `job_status`, and unless it
matches `state_unknown_re` exactly at its start, the job reads as gone. Then a start in progress aborts ("has
disappeared", explained as an ended job) and `poll()` reports a running server dead. Here:
- Slurm's own "Invalid job id specified" (it has forgotten the job, which ended) is the only failure that means
  gone (portal.scheduler.slurm.answers.squeue_outcome);
- any other failure is UNKNOWN: a start keeps waiting, `poll()` keeps the server, the last known `job_status`
  is kept, and `slurm_unavailable` holds Slurm's message for the progress page;
- `check_slurm_answers()`, which the start calls at each UNKNOWN, raises SlurmUnavailable ("Slurm unavailable:
  ...") once Slurm has said nothing for `slurm_unavailable_timeout`.
Commands run as the user get no environment of the hub's (its secrets) unless batchspawner passes one (sbatch: the
server's own environment); see portal.runas.

The job's state the hub keeps (`get_state` / `load_state`): a start that a hub restart interrupted cannot be resumed
(the hub that waited for the server's port is gone), so the job id is saved at submission with `start_unfinished`.
A hub that loads a state with it holds a start that an earlier hub left unfinished: its first `poll()` (the
startup check) cancels that job and reports the server stopped, and the user starts again.

After a crash (the hub's, a node's, the whole box's) Slurm's saved state can still say RUNNING for a server that no
longer exists. The hub's startup check then waits `http_timeout` (120 s) for it, and the user's spawns answer
"pending check" meanwhile. So that check's `poll()` also knocks at the server's port: refused or unreachable is a
server that is gone, reported stopped at once (the hub then stops it, which cancels the job); a server that
answers, or that does not answer within `startup_check_timeout`, is left to the hub's own check.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator

from batchspawner import SlurmSpawner
from batchspawner.batchspawner import JobStatus, format_template
from traitlets import Float, Unicode, default, observe

from portal.inputs import one_line
from portal.runas import ISOLATED_PATH, LOCALE
from portal.scheduler.slurm.answers import squeue_outcome
from portal.scheduler.slurm.errors import SlurmUnavailable

__all__ = ["SlurmStateSpawner", "SlurmUnavailable", "refused"]

UNAVAILABLE_PREFIX = "Slurm unavailable"


async def refused(host: str, port: int, timeout: float) -> str:
    """Why nothing listens at host:port ("Connection refused", "No route to host" ...); "" when something accepts
    the connection or the answer does not come within `timeout` (a busy node is not a dead one)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=timeout)
    except TimeoutError:
        return ""
    except OSError as err:  # asyncio's strerror names the call, not the cause
        return os.strerror(err.errno) if err.errno else str(err)
    writer.close()
    return ""


class SlurmStateSpawner(SlurmSpawner):
    """SlurmSpawner whose job state never comes from a failed Slurm command, and whose starts a hub restart
    interrupted are cancelled."""

    slurm_unavailable_timeout = Float(
        config=True,
        help="Seconds a start waits for Slurm to answer again (controller restarting, unreachable) before it fails "
             "with 'Slurm unavailable'. Default: the start timeout less 15 s, so this message comes before the "
             "hub's own timeout.",
    )

    @default("slurm_unavailable_timeout")
    def _unavailable_timeout_default(self) -> float:
        return max(10.0, float(self.start_timeout) - 15.0)

    startup_check_timeout = Float(
        2.0, config=True,
        help="Seconds the hub's startup check waits for a running server's port. Refused or unreachable: the server "
             "is gone (after a crash) and is reported stopped at once; no answer in time: the hub's own check, which "
             "waits http_timeout, decides.",
    )

    # Slurm's message while it does not answer; "" once it does. A trait, so that the progress page hears of it.
    slurm_unavailable = Unicode("")
    _unavailable_since: float | None = None
    start_unfinished = False  # this hub's start, from sbatch until the server is up: saved with the state
    start_interrupted = False  # the state loaded says an earlier hub's start was unfinished

    async def submit_batch_script(self) -> str:
        job_id = await super().submit_batch_script()
        if job_id:
            self.log.info("server of %s submitted: Slurm job %s", self.req_username, job_id)
            self._record_unfinished_start()
        return job_id

    def _record_unfinished_start(self) -> None:
        """Save the job id now: the hub saves state only once `start` returns; a hub stopped before lost the job."""
        self.start_unfinished = True
        if self.orm_spawner is not None:  # None only for a spawner made outside a hub
            self.orm_spawner.state = self.get_state()
            self.db.commit()

    def get_state(self) -> dict:
        state = super().get_state()
        if self.start_unfinished or self.start_interrupted:
            state["start_unfinished"] = True
        return state

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        # JupyterHub (6.1.1) loads a spawner's saved state once, when it makes the spawner (User._new_spawner), and
        # clears it before each start: an unfinished start in it is one that an earlier hub never finished.
        self.start_interrupted = bool(state.get("start_unfinished"))

    def clear_state(self) -> None:
        super().clear_state()
        self.start_unfinished = self.start_interrupted = False

    async def poll(self):
        if self.start_interrupted:
            job_id = self.job_id
            await self.cancel_batch_job()
            self.log.warning("start of %s: Slurm job %s was still starting when the hub restarted; cancelled, as a "
                             "start cannot be resumed (the user starts again)", self.req_username, job_id)
            self.clear_state()
            return 1
        status = await super().poll()  # batchspawner's, which keeps a server whose state is UNKNOWN
        if status is None and self.pending == "check" and self.server is not None:  # the hub's startup check
            host, port = self.server.ip, self.server.port
            refusal = await refused(host, port, self.startup_check_timeout)
            if refusal:
                self.log.warning("server of %s gone: Slurm job %s is %s, but its server at %s:%s is gone (%s): "
                                 "reported stopped, so the hub stops it and cancels the job", self.req_username,
                                 self.job_id, (self.job_status.split() or ["in Slurm's saved state"])[0], host,
                                 port, refusal)
                return 1
        return status

    # --- what a start and the progress page wait on: the reported port, Slurm's answers ---

    _watchers: frozenset[asyncio.Event] = frozenset()

    @observe("port", "job_id", "job_status", "slurm_unavailable")
    def _wake_watchers(self, change: dict) -> None:
        # batchspawner's API handler sets `port` when batchspawner-singleuser reports it from the job; each look at
        # Slurm sets job_status or slurm_unavailable.
        for watcher in self._watchers:
            watcher.set()

    @contextlib.contextmanager
    def _watching(self) -> Iterator[asyncio.Event]:
        """An event set at each change of the spawner's state, for as long as the block runs."""
        changed = asyncio.Event()
        self._watchers |= {changed}
        try:
            yield changed
        finally:
            self._watchers -= {changed}

    async def until_port_reported(self, seconds: float) -> None:
        """Until the server has reported its port, or `seconds` at most."""
        with self._watching() as changed, contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while not self.port:
                    await changed.wait()
                    changed.clear()

    async def run_command(self, cmd, input=None, env=None):
        # batchspawner passes no environment for squeue and scancel: they would inherit the hub's, secrets and
        # all, in a process the user owns (and can read /proc/PID/environ of).
        return await super().run_command(cmd, input=input, env=self.query_env() if env is None else env)

    def query_env(self) -> dict[str, str]:
        """squeue's and scancel's environment: a fixed PATH (with the portal's Slurm commands first, where the
        subclass has its settings) and a locale; SLURM_CONF comes with exec_prefix."""
        portal = getattr(self, "portal", None)
        path = f"{portal.slurm_bin_dir}:{ISOLATED_PATH}" if portal is not None else ISOLATED_PATH
        return {"PATH": path, "LANG": LOCALE}

    async def query_job_status(self) -> JobStatus:
        """batchspawner's, with Slurm's failures kept apart from the job's states (see the module's docstring)."""
        if not self.job_id:
            self.job_status = ""
            return JobStatus.NOTFOUND
        subvars = {**self.get_req_subvars(), "job_id": self.job_id}
        cmd = " ".join(format_template(part, **subvars) for part in (self.exec_prefix, self.batch_query_cmd))
        try:
            answer, error = await self.run_command(cmd), None
        except RuntimeError as err:
            answer, error = "", (str(err).strip() or "squeue failed without a message")
        outcome = squeue_outcome(answer, error)
        if outcome == "unavailable":
            self._note_unavailable(error or "")
            return JobStatus.UNKNOWN
        self.slurm_unavailable, self._unavailable_since = "", None
        self.job_status = answer if outcome == "state" else ""
        if self.state_isrunning():
            return JobStatus.RUNNING
        return JobStatus.PENDING if self.state_ispending() else JobStatus.NOTFOUND

    def _note_unavailable(self, message: str) -> None:
        self.slurm_unavailable = message.splitlines()[-1][:300] if message else "no answer"
        if self._unavailable_since is None:  # once per silence, not at every look
            self._unavailable_since = time.monotonic()
            self.log.warning("Slurm did not answer about job %s of %s: %s", self.job_id, self.req_username,
                             one_line(self.slurm_unavailable))

    def check_slurm_answers(self) -> None:
        """SlurmUnavailable once Slurm has not answered for `slurm_unavailable_timeout` seconds in a row:
        batchspawner's start waits on an UNKNOWN state for ever (the hub's start_timeout ends it, saying only
        "timeout"); this says why."""
        since = self._unavailable_since
        if since is None or time.monotonic() - since < self.slurm_unavailable_timeout:
            return
        silent_s = time.monotonic() - since
        self.log.warning("start of %s failed: Slurm unavailable, no answer about Slurm job %s for %.0f s: %s",
                         self.req_username, self.job_id, silent_s, one_line(self.slurm_unavailable))
        raise SlurmUnavailable(f"{UNAVAILABLE_PREFIX}: no answer about Slurm job {self.job_id} for {silent_s:.0f} s "
                               f"({self.slurm_unavailable})", said=self.slurm_unavailable)

    def unavailable_message(self) -> str:
        return (f"Slurm job {self.job_id}: {UNAVAILABLE_PREFIX} ({self.slurm_unavailable}); waiting for it to "
                f"answer again")
