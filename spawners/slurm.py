"""A batchspawner SlurmSpawner for GPU nodes, each addition at the Spawner's or batchspawner's extension point.

- the form (`options_form` / `options_from_form` / `apply_user_options`, spawners.options): partitions from Slurm,
  GPUs bounded by what is free and by the user's GPU quota, CPUs, memory and wall time, validated by
  spawners.forms for the form and the REST API alike;
- `start`, a sequence of states in place of batchspawner's loop (same commands: sbatch, then squeue as the user):
  submit; wait until the job runs and its server has reported its port; take the node's address; wait until the
  server accepts connections. Each look at Slurm decides the next state: a job that ended fails the start at once
  with its state and the tail of its output (`ServerJobEnded`; batchspawner 1.3.0 waits the whole start_timeout,
  its issue #253); a Slurm silent for `slurm_unavailable_timeout` fails it with "Slurm unavailable: ..."; the
  reported port ends the wait at once, and the server is handed to the hub the moment it listens
  (docs/benchmarks.md has the figures);
- a failed squeue is Slurm not answering, never a job state; a start that a hub restart interrupted is cancelled;
  a server that a crash took away is cleared at the hub's startup check (spawners.slurm_state);
- `progress`: the job id and Slurm's own pending reason, as the spawner sees them change;
- `batch_script`: batchspawner's with the server job's output in `req_server_log_dir` (spawners.slurm_script).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import time

from batchspawner.batchspawner import JobStatus
from traitlets import Float, Integer, Unicode, default

from portal.errors import PortalError
from portal.runas import RUNUSER
from portal.scheduler.slurm.answers import pending_reason
from portal.scheduler.slurm.errors import SlurmError
from portal.traits import fixed_default
from spawners import slurm_cluster
from spawners.forms import ServerOptions
from spawners.options import ServerOptionsMixin, accepts_connections, server_environment
from spawners.singleuser import SINGLEUSER_ARGS
from spawners.slurm_script import SERVER_JOB_SCRIPT, SERVER_OUTPUT_FILE, SUBMIT_CREATING_LOG_DIR, server_log_dir
from spawners.slurm_state import SlurmStateSpawner, SlurmUnavailable

__all__ = ["SINGLEUSER_ARGS", "PortalSlurmSpawner", "ServerJobEnded", "SlurmUnavailable"]

SLURM_LAG_S = 0.1  # between looks while Slurm says PENDING of a job whose server has reported its port


class ServerJobEnded(PortalError):
    """The server's Slurm job ended before JupyterLab started; the message has the job's state and output."""

    def __init__(self, report: str, job_id: str, state: str):
        super().__init__(report)
        self.job_id, self.state = job_id, state


class PortalSlurmSpawner(ServerOptionsMixin, SlurmStateSpawner):
    """SlurmSpawner with a validated GPU form, Slurm's pending reason as progress, and fail-fast starts."""

    portal_scheduler = "slurm"  # the form is a view of the Slurm scheduler's limits (spawners.options)
    start_note = ""  # why this start's job will wait, seen just before its submit (slurm_cluster.server_start_note)

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
             "(mode 700) at a submit when missing. Default: ~/.cache/dsportal/servers/<cluster_name>: Slurm job ids "
             "are the cluster's own, so clusters that share the homes each keep their servers' output apart. A "
             "site's own batch_script keeps its own --output; {{server_log_dir}} names this directory there.",
    )

    @default("req_server_log_dir")
    def _server_log_dir_default(self) -> str:
        return server_log_dir(self.req_homedir, self.portal.cluster_name)

    _script_default = fixed_default("batch_script", SERVER_JOB_SCRIPT)
    _submit_default = fixed_default("batch_submit_cmd", SUBMIT_CREATING_LOG_DIR)

    def get_req_subvars(self) -> dict:
        # The submit command is a shell line: the directory goes in quoted (homes come from the directory service).
        subvars = super().get_req_subvars()
        subvars["server_log_dir_q"] = shlex.quote(subvars["server_log_dir"])
        return subvars

    # State: "RUNNING localhost None" / "PENDING n/a Resources"; the reason is last as it may contain spaces.
    batch_query_cmd = "squeue -h -j {job_id} -o '%T %B %r'"
    state_exechost_re = r"^\w+\s+([\w.-]+)"

    _args_default = fixed_default("args", list(SINGLEUSER_ARGS))
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
        }
        # No TENSORBOARD_PROXY_URL here (the Kubernetes spawner sets it): `%tensorboard` starts a TensorBoard of
        # its own on a TCP port of the node's loopback, which every other user's job on that node can read. The
        # server's own TensorBoard (a Unix socket behind the hub's login) is the one to use (docs/security.md).
        if os.environ.get("DSPORTAL_CONFIG"):  # notebooks submit jobs with the portal's settings
            environment["DSPORTAL_CONFIG"] = os.environ["DSPORTAL_CONFIG"]
        # Its jobs' directories under ~/jobs are the cluster's, as the dashboard reads them, however the hub was
        # told the name (the file, or DSPORTAL_CLUSTER_NAME, which does not reach the server on its own).
        environment["DSPORTAL_CLUSTER_NAME"] = self.portal.cluster_name
        return {**environment, **server_environment(self.portal, lambda spawner: spawner.req_homedir)}

    @default("req_prologue")
    def _prologue_default(self) -> str:
        # Run as the user before the server starts: copy the template notebooks they do not have yet into
        # ~/notebooks (never over a file of theirs). A failure is reported and does not stop the server.
        python = shlex.quote(str(self.portal.venv / "bin" / "python"))
        return (f'{python} -I -m portal.notebook install-templates --dest "$HOME"/'
                f"{shlex.quote(self.portal.user_notebooks_dir)} || echo 'template notebooks were not copied' >&2")

    @default("batchspawner_singleuser_cmd")
    def _singleuser_default(self) -> str:
        return str(self.portal.venv / "bin" / "dsportal-singleuser")  # spawners.singleuser, setup.py's script

    # --- the form (Spawner.options_form / options_from_form / apply_user_options: spawners.options) ---

    def apply_server_options(self, options: ServerOptions) -> None:
        self.user_options = options.to_dict()
        self.req_partition = options.partition
        self.req_gres = f"gpu:{options.gpus}" if options.gpus else ""
        self.req_nprocs = str(options.cpus)
        self.req_memory = f"{options.memory_gb}G"
        self.req_runtime = options.runtime

    # --- Spawner.start: a sequence of states; each look at Slurm decides the next ---

    async def start(self) -> tuple[str, int]:
        """Submit the server's job; wait until it runs and its server has reported its port; take the node's
        address; wait until the server accepts connections. Raises ServerJobEnded when the job ends first,
        SlurmUnavailable when Slurm stays silent for slurm_unavailable_timeout."""
        self.ip, self.port = self.traits()["ip"].default_value, 0  # this start's port is the one its job reports
        await self.prepare_mlflow()
        options = self.user_options or {}
        # Said while it waits (the progress page): what of the user's own holds the resources it asks for.
        self.start_note = await slurm_cluster.server_start_note(
            self.cluster_look, self.req_username, self.req_partition, int(options.get("gpus", 0)),
            int(self.req_nprocs or 1), int(options.get("memory_gb", 0)))
        job_id = await self.submit_batch_script()  # saves the job id with the state (spawners.slurm_state)
        if not job_id:
            raise SlurmError("sbatch answered no job id for the server's job (the hub's log has its answer)")
        node = await self.wait_until_running(job_id)
        self.ip = await slurm_cluster.node_address(self.scheduler(), node)
        await self.wait_until_listening(job_id)
        self.start_unfinished = False  # the hub saves the state (now without it) once the start returns
        self.log.info("server of %s up: Slurm job %s on %s, at %s:%s", self.req_username, job_id, node, self.ip,
                      self.port)
        return self.ip, self.port

    async def wait_until_running(self, job_id: str) -> str:
        """The job's node, once Slurm says it runs and its server has reported its port. Looks at Slurm every
        startup_poll_interval, and at once when the port is reported (batchspawner's API handler sets it)."""
        while True:
            status = await self.look_at_job(job_id)
            if status == JobStatus.RUNNING and self.port:
                return self.state_gethost()
            if not self.port:
                await self.until_port_reported(self.startup_poll_interval)
            else:  # the job runs (it reported its port): Slurm says so a moment later, or when it answers again
                await asyncio.sleep(SLURM_LAG_S if status == JobStatus.PENDING else self.startup_poll_interval)

    async def wait_until_listening(self, job_id: str) -> None:
        """Until the server accepts connections, trying every readiness_poll_interval and looking at Slurm every
        startup_poll_interval: batchspawner-singleuser reports the port before JupyterLab starts, and a JupyterLab
        that dies on start ends the job (the hub would wait http_timeout for it)."""
        next_look = time.monotonic() + self.startup_poll_interval
        while not await accepts_connections(self.ip, self.port):
            if time.monotonic() >= next_look:
                await self.look_at_job(job_id)
                next_look = time.monotonic() + self.startup_poll_interval
            await asyncio.sleep(self.readiness_poll_interval)

    async def look_at_job(self, job_id: str) -> JobStatus:
        """Slurm's word on the server's job: RUNNING, PENDING, or UNKNOWN while Slurm does not answer. Raises
        ServerJobEnded for a job that has ended, SlurmUnavailable once Slurm has been silent too long."""
        status = await self.query_job_status()
        if status == JobStatus.NOTFOUND:
            raise await self.job_ended(job_id)
        if status == JobStatus.UNKNOWN:
            self.check_slurm_answers()
        return status

    async def job_ended(self, job_id: str) -> ServerJobEnded:
        """Why the job ended (its state, exit code, reason and the tail of its output), logged; the state is
        cleared: there is no job left to cancel."""
        job = await slurm_cluster.job_record(self.scheduler(), job_id)
        state = job.state if job else "unknown"
        output = f"{self.req_server_log_dir}/{SERVER_OUTPUT_FILE.replace('%j', job_id)}"
        report = await slurm_cluster.ended_job_report(job_id, job, self.req_username, output, self.output_tail_lines)
        self.log.warning("start of %s failed: Slurm job %s ended (%s) before JupyterLab started", self.req_username,
                         job_id, state)
        self.clear_state()
        return ServerJobEnded(report, job_id, state)

    # --- Spawner.progress: the job id and Slurm's pending reason ---

    async def progress(self):
        """Each change as it happens, until the job runs and its server has reported its port: the hub stops
        reading once the start returns, which can be a moment after that, so the node must be named before."""
        last = None
        with self._watching() as changed:
            while True:
                changed.clear()
                if (message := self._progress_message()) != last:
                    yield {"message": message}
                    last = message
                if self.port and self.state_isrunning():
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), self.progress_poll_interval)

    def _progress_message(self) -> str:
        state, _, reason = (self.job_status or "").partition(" ")
        if not self.job_id:
            return "Submitting the server job to Slurm"
        if self.slurm_unavailable:
            return self.unavailable_message()
        if self.state_ispending():
            note = f"; {self.start_note}" if self.start_note else ""
            return f"Slurm job {self.job_id} pending: {pending_reason(reason.partition(' ')[2])}{note}"
        if self.state_isrunning():
            return f"Slurm job {self.job_id} running on {self.state_gethost()}; JupyterLab is starting"
        return f"Slurm job {self.job_id}: {state or 'waiting for Slurm'}"
