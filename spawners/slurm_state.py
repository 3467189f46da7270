"""A Slurm job's state as the spawner reads it: a failed `squeue` is Slurm not answering, never a state.

batchspawner 1.3.0 turns a failed squeue into the job's state: its stderr becomes `job_status`, and unless it
matches `state_unknown_re` exactly at its start, the job reads as gone. Then a start in progress aborts ("has
disappeared", explained as an ended job) and `poll()` reports a running server dead. Here:
- Slurm's own "Invalid job id specified" (it has forgotten the job, which ended) is the only failure that means
  gone (portal.slurm.squeue_outcome);
- any other failure is UNKNOWN: the start keeps waiting, `poll()` keeps the server, the last known `job_status`
  is kept, and `slurm_unavailable` holds Slurm's message for the progress page;
- a start that hears nothing from Slurm for `slurm_unavailable_timeout` fails with "Slurm unavailable: ..."
  (`fail_when_slurm_is_silent`, run beside batchspawner's start loop).
Commands run as the user get no environment of the hub's (its secrets) unless batchspawner passes one (sbatch: the
server's own environment); see portal.runas.

The job's state the hub keeps (`get_state` / `load_state`): a start that a hub restart interrupted cannot be resumed
(the hub that waited for the server's port is gone), so the job id is saved at submission with `start_unfinished`,
and the next hub's `poll()` cancels that job and reports the server stopped: the user starts again.

After a crash (the hub's, a node's, the whole box's) Slurm's saved state can still say RUNNING for a server that no
longer exists. The hub's startup check then waits `http_timeout` (120 s) for it, and the user's spawns answer
"pending check" meanwhile. So that check's `poll()` also knocks at the server's port: refused or unreachable is a
server that is gone, reported stopped at once (the hub then stops it, which cancels the job); a server that
answers, or that does not answer within `startup_check_timeout`, is left to the hub's own check.
"""

from __future__ import annotations

import asyncio
import os
import time

from batchspawner import SlurmSpawner
from batchspawner.batchspawner import JobStatus, format_template
from traitlets import Float, default

from portal.runas import ISOLATED_PATH, LOCALE
from portal.slurm import squeue_outcome

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


class SlurmUnavailable(RuntimeError):
    """Slurm has not answered for longer than a start may wait for it."""


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

    slurm_unavailable = ""  # Slurm's message while it does not answer; "" once it does
    _unavailable_since: float | None = None
    submitted_job_id = ""  # kept through clear_state(), to explain a failed start
    start_unfinished = False  # in the saved state from sbatch until the server is up

    async def submit_batch_script(self) -> str:
        job_id = await super().submit_batch_script()
        if job_id:
            self.submitted_job_id = job_id
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
        if self.start_unfinished:
            state["start_unfinished"] = True
        return state

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.start_unfinished = bool(state.get("start_unfinished"))

    def clear_state(self) -> None:
        super().clear_state()
        self.start_unfinished = False

    async def poll(self):
        if self.start_unfinished and not self._start_pending:
            job_id = self.job_id
            await self.cancel_batch_job()
            self.log.warning("%s: Slurm job %s was still starting when the hub restarted; cancelled it, as a start "
                             "cannot be resumed (the user starts the server again)", self._log_name, job_id)
            self.clear_state()
            return 1
        status = await super().poll()  # batchspawner's, which keeps a server whose state is UNKNOWN
        if status is None and self._check_pending and self.server is not None:
            host, port = self.server.ip, self.server.port
            refusal = await refused(host, port, self.startup_check_timeout)
            if refusal:
                self.log.warning("%s: Slurm job %s is %s, but its server at %s:%s is gone (%s): reported stopped, so "
                                 "the hub stops it and cancels the job", self._log_name, self.job_id,
                                 (self.job_status.split() or ["in Slurm's saved state"])[0], host, port, refusal)
                return 1
        return status

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
        if self._unavailable_since is None:
            self._unavailable_since = time.monotonic()
        self.log.warning("Slurm did not answer about job %s: %s", self.job_id, self.slurm_unavailable)

    def check_slurm_answers(self) -> None:
        """SlurmUnavailable once Slurm has not answered for `slurm_unavailable_timeout` seconds in a row."""
        since = self._unavailable_since
        if since is not None and time.monotonic() - since >= self.slurm_unavailable_timeout:
            raise SlurmUnavailable(f"{UNAVAILABLE_PREFIX}: no answer about Slurm job {self.job_id} for "
                                   f"{time.monotonic() - since:.0f} s ({self.slurm_unavailable})")

    async def fail_when_slurm_is_silent(self) -> None:
        """Raced with batchspawner's start: its loop waits on an UNKNOWN state for ever (the hub's start_timeout
        ends it, saying only "timeout"); this says why, once `check_slurm_answers` does."""
        while True:
            await asyncio.sleep(self.startup_poll_interval)
            self.check_slurm_answers()

    def unavailable_message(self) -> str:
        return (f"Slurm job {self.job_id}: {UNAVAILABLE_PREFIX} ({self.slurm_unavailable}); waiting for it to "
                f"answer again")
