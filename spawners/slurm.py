"""A batchspawner SlurmSpawner for GPU nodes.

What it adds to `batchspawner.SlurmSpawner`, each through the Spawner's and batchspawner's extension points
(batchspawner's `start` loop runs as it is: submit, wait for RUNNING, take the host, wait for the port):
- `options_form` / `options_from_form` / `apply_user_options`: partitions from Slurm, GPUs bounded by what is free
  and by the user's group quota, CPUs, memory and wall time, validated by `spawners.forms` for the form and the
  REST API alike. batchspawner copies `user_options` into the batch script's variables, so they are replaced by
  the validated values before anything is submitted.
- `query_job_status`: a failed squeue is Slurm not answering, never a job state (`spawners.slurm_state`).
- `progress`: the Slurm job id and Slurm's own pending reason ("Pending: Resources"), updated while waiting,
  instead of batchspawner's fixed "Pending in queue...".
- `start`: a job that ends before its server is up fails the spawn within seconds, with the job's state and
  the tail of its output (batchspawner 1.3.0 waits the whole start_timeout, upstream issue #253, or, when the
  server dies after batchspawner-singleuser reported its port, the whole http_timeout).
- a faster start, with the same checks: the port that batchspawner-singleuser reports ends the wait at once
  (batchspawner sleeps `startup_poll_interval` between looks), the server is handed to the hub the moment it
  accepts connections (the hub's own check backs off exponentially: 0.2, 0.4, 0.8 ... s), and JupyterLab skips
  what costs start time and serves nothing here (`spawners.singleuser`). docs/benchmarks.md has the figures.
- `get_state` / `load_state` / `poll`: a start that a hub restart interrupted is cancelled, not left running, and
  a server that a crash took away is cleared at the hub's startup check, not after http_timeout
  (`spawners.slurm_state`).
- the server job's output (`jupyterhub_slurmspawner_<job id>.log`, one per start) goes to `req_server_log_dir`
  (~/.cache/dsportal/servers, out of sight in JupyterLab) instead of the home's top level.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from collections.abc import Coroutine
from typing import Any

from batchspawner import SlurmSpawner
from batchspawner.batchspawner import JobStatus
from traitlets import Float, Integer, Unicode, default, observe

from portal.jobs.record import ENDED_STATES
from portal.slurm import RUNUSER, pending_reason
from portal.slurm_json import QueuedJob
from portal.traits import fixed_default
from spawners import slurm_cluster
from spawners.forms import ClusterLimits, ServerOptions
from spawners.options import ServerOptionsMixin, tensorboard_proxy_url
from spawners.singleuser import SINGLEUSER_FAST_START
from spawners.slurm_state import SlurmStateSpawner, SlurmUnavailable

__all__ = ["SINGLEUSER_FAST_START", "PortalSlurmSpawner", "tensorboard_proxy_url"]

SERVER_LOG_DIR = ".cache/dsportal/servers"  # under the user's home
SERVER_OUTPUT_FILE = "jupyterhub_slurmspawner_%j.log"  # batchspawner's name; %j: Slurm's job id
STOCK_OUTPUT_LINE = "#SBATCH --output={{homedir}}/" + SERVER_OUTPUT_FILE
SERVER_OUTPUT_LINE = "#SBATCH --output={{server_log_dir}}/" + SERVER_OUTPUT_FILE
# Slurm does not create the --output directory (the job fails to open its output), so the submit command makes
# it, as the user, in the same command as sbatch (no extra runuser). The umask is set in a subshell: sbatch hands
# its own umask to the job, whose files must keep the usual modes.
SUBMIT_CREATING_LOG_DIR = ("""/bin/sh -c '(umask 077 && mkdir -p -- "$1") && exec sbatch --parsable' """
                           "sh {server_log_dir_q}")


def with_server_log_dir(stock_script: str) -> str:
    """batchspawner's Slurm script with its output in the server log directory: the rest stays upstream's."""
    if STOCK_OUTPUT_LINE not in stock_script:
        raise ValueError(f"batchspawner's SlurmSpawner.batch_script has no line {STOCK_OUTPUT_LINE!r} to replace")
    return stock_script.replace(STOCK_OUTPUT_LINE, SERVER_OUTPUT_LINE)


async def first_of(*steps: Coroutine[Any, Any, Any]) -> Any:
    """The result (or the exception) of whichever step ends first; the others are cancelled."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        return done.pop().result()
    finally:
        for task in tasks:
            task.cancel()


async def accepts_connections(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=2)
    except (TimeoutError, OSError):
        return False
    writer.close()
    return True


class PortalSlurmSpawner(ServerOptionsMixin, SlurmStateSpawner):
    """SlurmSpawner with a validated GPU form, Slurm's pending reason as progress, and fail-fast starts."""

    early_end_poll_interval = Float(
        1.0, config=True,
        help="Seconds between checks, while starting, that the Slurm job has not already ended.",
    )
    progress_poll_interval = Float(
        1.0, config=True,
        help="Most seconds between looks at the job's state for the progress page; a change that the spawner "
             "sees (Slurm's answer, the reported port) is shown at once.",
    )
    output_tail_lines = Integer(
        20, config=True, help="How many lines of the job's output to show when a start fails.",
    )
    readiness_poll_interval = Float(
        0.05, config=True,
        help="Seconds between attempts, once the server has reported its port, to connect to it. A refused TCP "
             "connect costs microseconds, so the server is handed to the hub within this much of listening.",
    )

    req_server_log_dir = Unicode(
        config=True,
        help="Directory of the server jobs' output (jupyterhub_slurmspawner_<job id>.log), made as the user "
             "(mode 700) at a submit when missing. Default: ~/.cache/dsportal/servers. A site's own batch_script keeps "
             "its own --output; {{server_log_dir}} names this directory there.",
    )

    @default("req_server_log_dir")
    def _server_log_dir_default(self) -> str:
        return f"{self.req_homedir.rstrip('/')}/{SERVER_LOG_DIR}"

    @default("batch_script")
    def _batch_script_default(self) -> str:
        return with_server_log_dir(SlurmSpawner.batch_script.default_value)

    _submit_default = fixed_default("batch_submit_cmd", SUBMIT_CREATING_LOG_DIR)

    def get_req_subvars(self) -> dict:
        # The submit command is a shell line: the directory goes in quoted (homes come from the directory service).
        subvars = super().get_req_subvars()
        subvars["server_log_dir_q"] = shlex.quote(subvars["server_log_dir"])
        return subvars

    # State: "RUNNING localhost None" / "PENDING n/a Resources"; the reason is last as it may contain spaces.
    batch_query_cmd = "squeue -h -j {job_id} -o '%T %B %r'"
    state_exechost_re = r"^\w+\s+([\w.-]+)"

    _args_default = fixed_default("args", list(SINGLEUSER_FAST_START))
    # A server whose node fails is gone (the hub stops it); run again by Slurm elsewhere, it would be a server
    # nobody waits for. Training jobs are the ones that requeue and resume.
    _options_default = fixed_default("req_options", "--no-requeue")

    @default("exec_prefix")
    def _exec_prefix_default(self) -> str:
        # The hub runs as root. batchspawner runs squeue and scancel without the spawner's environment, so the
        # prefix carries SLURM_CONF for every command (a site with /etc/slurm/slurm.conf would not notice).
        return f"{RUNUSER} -u {{username}} -- /usr/bin/env SLURM_CONF={shlex.quote(str(self.portal.slurm_conf_path))}"

    @default("environment")
    def _environment_default(self) -> dict:
        venv_bin = str(self.portal.venv / "bin")
        environment = {
            "SLURM_CONF": str(self.portal.slurm_conf_path),
            "PATH": f"{venv_bin}:{self.portal.slurm_bin_dir}:/usr/local/bin:/usr/bin:/bin",
            # `%tensorboard` in a notebook: reach the TensorBoard it starts through the server's own proxy.
            "TENSORBOARD_PROXY_URL": tensorboard_proxy_url,
        }
        if os.environ.get("DSPORTAL_CONFIG"):  # notebooks submit jobs with the portal's settings
            environment["DSPORTAL_CONFIG"] = os.environ["DSPORTAL_CONFIG"]
        return environment

    @default("req_prologue")
    def _prologue_default(self) -> str:
        # Run as the user before the server starts: copy the template notebooks they do not have yet into
        # ~/notebooks (never over a file of theirs). A failure is reported and does not stop the server.
        python = shlex.quote(str(self.portal.venv / "bin" / "python"))
        return (f"{python} -I -m portal.notebook install-templates "
                "|| echo 'template notebooks were not copied' >&2")

    @default("batchspawner_singleuser_cmd")
    def _singleuser_default(self) -> str:
        return str(self.portal.venv / "bin" / "dsportal-singleuser")  # spawners.singleuser, setup.py's script

    # --- the form (Spawner.options_form / options_from_form / apply_user_options: spawners.options) ---

    async def limits(self) -> ClusterLimits:
        groups = tuple(sorted(g.name for g in self.user.groups))
        return await slurm_cluster.cluster_limits(self.portal, self.user.name, groups)

    def apply_server_options(self, options: ServerOptions) -> None:
        self.user_options = options.to_dict()
        self.req_partition = options.partition
        self.req_gres = f"gpu:{options.gpus}" if options.gpus else ""
        self.req_nprocs = str(options.cpus)
        self.req_memory = f"{options.memory_gb}G"
        self.req_runtime = options.runtime

    # --- Spawner.start: batchspawner's, raced with what it does not watch ---

    _port_reported: asyncio.Event | None = None

    async def start(self) -> tuple[str, int]:
        """batchspawner's start until the server accepts connections, failed within seconds (with the job's
        state and output) when the job ends first."""
        self.submitted_job_id = ""
        try:
            return await first_of(self._start_until_server_listens(), self._fail_when_job_ends())
        except RuntimeError as err:
            job_id = self.submitted_job_id
            if not job_id or "before JupyterLab" in str(err) or isinstance(err, SlurmUnavailable):
                raise
            raise RuntimeError(await self.describe_ended_job(job_id)) from err  # batchspawner's "has disappeared"

    async def _start_until_server_listens(self) -> tuple[str, int]:
        """The job started, its host as the hub reaches it, then a wait for the server to accept connections:
        batchspawner-singleuser reports its port before JupyterLab starts, so a server that crashes on start
        would leave the hub waiting http_timeout."""
        await self._job_started()
        self.ip = await self.node_address(self.ip)
        self.start_unfinished = False  # the hub saves the state (now without it) once the start returns
        self.db.commit()
        self.log.info("Notebook server job %s: the hub reaches it at %s:%s", self.job_id, self.ip, self.port)
        while not await accepts_connections(self.ip, self.port):
            await asyncio.sleep(self.readiness_poll_interval)
        return self.ip, self.port

    async def _job_started(self) -> tuple[str, int]:
        """batchspawner's start (submit, wait for RUNNING, take the host, wait for the reported port), ended
        early by the port report, or failed by a Slurm that stays silent."""
        self._port_reported = asyncio.Event()
        await first_of(super().start(), self._host_once_port_reported(), self.fail_when_slurm_is_silent())
        return self.ip, self.port

    @observe("port", "job_id", "job_status")
    def _wake_waiters(self, change: dict) -> None:
        # batchspawner's API handler sets `port` when batchspawner-singleuser reports it from the job; each look
        # at Slurm sets job_status.
        if change["name"] == "port" and change["new"] and self._port_reported is not None:
            self._port_reported.set()
        for watcher in self._progress_watchers:
            watcher.set()

    async def _host_once_port_reported(self) -> None:
        """A reported port means the job runs: take its host from Slurm now. batchspawner would only after its
        sleep of startup_poll_interval, which nothing can wake (the hook its loop lacks); Slurm may lag a moment."""
        await self._port_reported.wait()
        while (status := await self.query_job_status()) != JobStatus.RUNNING:
            if status not in (JobStatus.PENDING, JobStatus.UNKNOWN):
                await asyncio.Event().wait()  # gone: batchspawner's loop says so at its next look
            await asyncio.sleep(min(self.startup_poll_interval, 0.1))
        self.ip = self.state_gethost()

    async def _fail_when_job_ends(self) -> None:
        while True:
            await asyncio.sleep(self.early_end_poll_interval)
            job_id = self.submitted_job_id
            if job_id and (job := await self._job_record(job_id)) is not None and job.state in ENDED_STATES:
                raise RuntimeError(await self.describe_ended_job(job_id))

    async def node_address(self, node: str) -> str:
        return await slurm_cluster.node_address(self.portal, node)

    async def _job_record(self, job_id: str) -> QueuedJob | None:
        return await slurm_cluster.job_record(self.portal, job_id)

    async def describe_ended_job(self, job_id: str) -> str:
        job = await self._job_record(job_id)
        output = f"{self.get_req_subvars()['server_log_dir']}/{SERVER_OUTPUT_FILE.replace('%j', job_id)}"
        self.clear_state()
        return await slurm_cluster.ended_job_report(job_id, job, self.user.name, output, self.output_tail_lines)

    # --- Spawner.progress: the job id and Slurm's pending reason ---

    _progress_watchers: frozenset[asyncio.Event] = frozenset()

    async def progress(self):
        """Each change as it happens, until the job runs and its server has reported its port: the hub stops
        reading once the start returns, which can be a moment after that, so the node must be named before."""
        changed, last = asyncio.Event(), None
        self._progress_watchers |= {changed}
        try:
            while True:
                changed.clear()
                if (message := self._progress_message()) != last:
                    yield {"message": message}
                    last = message
                if self.port and self.state_isrunning():
                    return
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), self.progress_poll_interval)
        finally:
            self._progress_watchers -= {changed}

    def _progress_message(self) -> str:
        state, _, reason = (self.job_status or "").partition(" ")
        if not self.job_id:
            return "Submitting the server job to Slurm"
        if self.slurm_unavailable:
            return self.unavailable_message()
        if self.state_ispending():
            return f"Slurm job {self.job_id} pending: {pending_reason(reason.partition(' ')[2])}"
        if self.state_isrunning():
            return self._running_message()
        return f"Slurm job {self.job_id}: {state or 'waiting for Slurm'}"

    def _running_message(self) -> str:
        return f"Slurm job {self.job_id} running on {self.state_gethost()}; JupyterLab is starting"
