"""A batchspawner SlurmSpawner for GPU nodes.

What it adds to `batchspawner.SlurmSpawner`, each through the Spawner's named extension points:
- `options_form` / `options_from_form` / `apply_user_options`: partitions from Slurm, GPUs bounded by what is free
  and by the user's group quota, CPUs, memory and wall time, validated by `spawners.forms` for the form and the
  REST API alike. batchspawner copies `user_options` into the batch script's variables, so they are replaced by
  the validated values before anything is submitted.
- `progress`: the Slurm job id and Slurm's own pending reason ("Pending: Resources"), updated while waiting,
  instead of batchspawner's fixed "Pending in queue...".
- `start`: a job that ends before its server is up fails the spawn within seconds, with the job's state and
  the tail of its output (batchspawner 1.3.0 waits the whole start_timeout, upstream issue #253, or, when the
  server dies after batchspawner-singleuser reported its port, the whole http_timeout).
- a faster start, with the same checks: the port that batchspawner-singleuser reports wakes the start at once
  (batchspawner sleeps `startup_poll_interval` between looks), the server is handed to the hub the moment it
  accepts connections (the hub's own check backs off exponentially: 0.2, 0.4, 0.8 ... s), and JupyterLab skips
  what costs start time and serves nothing here (`SINGLEUSER_FAST_START`; the server's launcher in the job is
  `dsportal-singleuser`, spawners/singleuser.py). docs/benchmarks.md has the figures.
"""

from __future__ import annotations

import asyncio
import os
import shlex

from batchspawner.batchspawner import JobStatus
from tornado import web
from traitlets import Float, Instance, Integer, default, observe

from portal.config import PortalConfig, load
from portal.runas import ISOLATED_CWD, launcher_env, runuser_argv
from portal.slurm import (
    RUNUSER,
    USER_SQUEUE_FORMAT,
    gpu_holders,
    nodes_from_scontrol,
    parse_key_values,
    pending_reason,
    slurm_partitions,
)
from spawners.forms import ClusterLimits, Partition, ServerOptions
from spawners.options import ServerOptionsMixin
from spawners.slurm_state import SlurmStateSpawner, SlurmUnavailable

# jupyterhub-singleuser options that shorten the server's start and first page, for every server of the portal:
# - jupyter_lsp: scans for ~20 language servers at every start; none is installed on the nodes.
# - the PyPI extension manager: imports an HTTP client and would query pypi.org, unreachable from compute nodes;
#   installing extensions is the image's business, so the read-only manager lists them.
# - news and update checks: the announcements plugin fetches a feed from github.io on the first page.
# jupyter-server-proxy (TensorBoard) and the terminals stay. A site changes them with c.PortalSlurmSpawner.args.
SINGLEUSER_FAST_START = (
    "--ServerApp.jpserver_extensions=jupyter_lsp=False",
    "--LabApp.extension_manager=readonly",
    "--LabApp.news_url=None",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
)
ENDED_STATES = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "TIMEOUT")


def partitions_from_scontrol(partition_lines: str, node_lines: str) -> tuple[Partition, ...]:
    """Partitions that are up and have a usable node, with the resources of their best usable node, from
    `scontrol show partition -o` and `scontrol show node -d -o` (read by portal.slurm, shared with the training
    jobs): a drained or down node offers nothing."""
    return tuple(
        Partition(name=p.name, cpus_per_node=p.cpus_per_node, memory_mb_per_node=p.memory_mb_per_node,
                  gpus_per_node=p.gpus_per_node, free_gpus_per_node=p.free_gpus_per_node,
                  max_minutes=p.max_minutes, default=p.default)
        for p in slurm_partitions(partition_lines, node_lines) if p.usable_nodes
    )


async def accepts_connections(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=2)
    except (TimeoutError, OSError):
        return False
    writer.close()
    return True


def tensorboard_proxy_url(spawner) -> str:
    """`<server URL>proxy/%PORT%/`: where `%tensorboard` (TensorBoard's notebook magic) finds the TensorBoard it
    starts, through jupyter-server-proxy; TensorBoard puts its port in place of %PORT%."""
    return f"{spawner.user.url}proxy/%PORT%/"


class PortalSlurmSpawner(ServerOptionsMixin, SlurmStateSpawner):
    """SlurmSpawner with a validated GPU form, Slurm's pending reason as progress, and fail-fast starts."""

    portal = Instance(PortalConfig, help="The portal's settings (portal.config).")

    @default("portal")
    def _portal_default(self) -> PortalConfig:
        return load()

    early_end_poll_interval = Float(
        1.0, config=True,
        help="Seconds between checks, while starting, that the Slurm job has not already ended.",
    )
    output_tail_lines = Integer(
        20, config=True, help="How many lines of the job's output to show when a start fails.",
    )
    readiness_poll_interval = Float(
        0.05, config=True,
        help="Seconds between attempts, once the server has reported its port, to connect to it. A refused TCP "
             "connect costs microseconds, so the server is handed to the hub within this much of listening.",
    )

    # State: "RUNNING localhost None" / "PENDING n/a Resources"; the reason is last as it may contain spaces.
    batch_query_cmd = "squeue -h -j {job_id} -o '%T %B %r'"
    state_exechost_re = r"^\w+\s+([\w.-]+)"

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

    @default("cmd")
    def _cmd_default(self) -> list[str]:
        return [str(self.portal.venv / "bin" / "jupyterhub-singleuser")]

    @default("batchspawner_singleuser_cmd")
    def _singleuser_default(self) -> str:
        # batchspawner-singleuser through singleuser_main (setup.py's console script).
        return str(self.portal.venv / "bin" / "dsportal-singleuser")

    @default("args")
    def _args_default(self) -> list[str]:
        return list(SINGLEUSER_FAST_START)

    @default("req_options")
    def _options_default(self) -> str:
        # A server whose node fails is gone (the hub stops it); run again by Slurm elsewhere, it would be a server
        # nobody waits for. Training jobs are the ones that requeue and resume.
        return "--no-requeue"

    @default("start_timeout")
    def _start_timeout_default(self) -> int:
        return self.portal.start_timeout

    @default("options_form")
    def _options_form_default(self):
        return PortalSlurmSpawner._render_options_form

    @default("apply_user_options")
    def _apply_user_options_default(self):
        return PortalSlurmSpawner._apply_server_options

    # --- talking to Slurm (as root: these read cluster-wide facts, not the user's jobs) ---

    async def _slurm(self, *args: str) -> str:
        env = {**os.environ, "SLURM_CONF": str(self.portal.slurm_conf_path)}
        command = str(self.portal.slurm_bin_dir / args[0])
        proc = await asyncio.create_subprocess_exec(
            command, *args[1:], env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=15)
        except TimeoutError:
            proc.kill()
            raise web.HTTPError(503, f"Slurm did not answer `{shlex.join(args)}` within 15 s") from None
        if proc.returncode != 0:
            raise web.HTTPError(503, f"Slurm refused `{shlex.join(args)}`: {err.decode().strip()}")
        return out.decode()

    async def cluster_limits(self) -> ClusterLimits:
        """What this user may ask for now: the partitions that are up, free GPUs, the group quota and what the
        user's jobs hold of it (the quota is for their server and jobs together)."""
        partitions = partitions_from_scontrol(
            await self._slurm("scontrol", "show", "partition", "-o"),
            await self._slurm("scontrol", "show", "node", "-d", "-o"),
        )
        holders = gpu_holders(await self._slurm("squeue", "-h", "-u", self.user.name, "-O", USER_SQUEUE_FORMAT))
        groups = tuple(sorted(g.name for g in self.user.groups))
        return ClusterLimits(partitions=partitions, gpu_quota=self.portal.gpu_quota_for(groups), groups=groups,
                             gpus_in_use=sum(h.gpus for h in holders),
                             gpu_holders=tuple(h.describe() for h in holders))

    # --- the form (Spawner.options_form / options_from_form / apply_user_options: spawners.options) ---

    async def limits(self) -> ClusterLimits:
        return await self.cluster_limits()

    def apply_server_options(self, options: ServerOptions) -> None:
        self.user_options = options.to_dict()
        self.req_partition = options.partition
        self.req_gres = f"gpu:{options.gpus}" if options.gpus else ""
        self.req_nprocs = str(options.cpus)
        self.req_memory = f"{options.memory_gb}G"
        self.req_runtime = options.runtime

    # --- Spawner.start: fail fast when the job ends before the server reports its port ---

    submitted_job_id = ""  # kept through batchspawner's clear_state(), to explain a failed start

    def parse_job_id(self, output: str) -> str:
        self.submitted_job_id = super().parse_job_id(output)
        return self.submitted_job_id

    async def start(self):
        self.submitted_job_id = ""
        starting = asyncio.ensure_future(self._start_until_server_listens())
        try:
            while True:
                done, _ = await asyncio.wait({starting}, timeout=self.early_end_poll_interval)
                if done:
                    return starting.result()
                job_id = self.submitted_job_id
                if job_id and (await self._job_record(job_id)).get("JobState") in ENDED_STATES:
                    raise RuntimeError(await self.describe_ended_job(job_id))
        except RuntimeError as err:
            job_id = self.submitted_job_id
            if not job_id or "before JupyterLab" in str(err) or isinstance(err, SlurmUnavailable):
                raise
            # batchspawner's own "job has disappeared": say why it did
            raise RuntimeError(await self.describe_ended_job(job_id)) from err
        finally:
            if not starting.done():
                starting.cancel()

    _port_reported: asyncio.Event | None = None

    @observe("port")
    def _wake_on_port(self, change: dict) -> None:
        # batchspawner's API handler sets `port` when batchspawner-singleuser reports it from the job.
        if change["new"] and self._port_reported is not None:
            self._port_reported.set()

    async def _start_until_server_listens(self) -> tuple[str, int]:
        """batchspawner's start (submit, wait for RUNNING, take the host, wait for the reported port), woken by
        the port report instead of polling for it; then wait for the server to accept connections:
        batchspawner-singleuser reports its port before JupyterLab starts, so a server that crashes on start
        would otherwise leave the hub waiting http_timeout."""
        self.ip = self.traits()["ip"].default_value
        self.port = 0
        if self.server:
            self.server.port = self.port
        self._port_reported = asyncio.Event()
        await self.submit_batch_script()
        if not self.job_id:
            raise RuntimeError("Jupyter batch job submission failure (no jobid in output)")
        self._record_unfinished_start()
        await self._wait_until_running()
        self.ip = await self.node_address(self.state_gethost())
        await self._port_reported.wait()
        self.start_unfinished = False  # the hub saves the state (now without it) once the start returns
        self.db.commit()
        self.log.info("Notebook server job %s started at %s:%s", self.job_id, self.ip, self.port)
        while not await accepts_connections(self.ip, self.port):
            await asyncio.sleep(self.readiness_poll_interval)
        return self.ip, self.port

    # --- a hub restarted in the middle of a start (Spawner.get_state / load_state / clear_state / poll) ---

    start_unfinished = False  # in the saved state from sbatch until the server is up

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
        """A start that a previous hub process began cannot be resumed (the hub that waited for its port is
        gone): cancel its job and report the server stopped; the user starts again."""
        if self.start_unfinished and not self._start_pending:
            job_id = self.job_id
            await self.cancel_batch_job()
            self.log.warning("%s: Slurm job %s was still starting when the hub restarted; cancelled it, as a start "
                             "cannot be resumed (the user starts the server again)", self._log_name, job_id)
            self.clear_state()
            return 1
        return await super().poll()

    async def _wait_until_running(self) -> None:
        """Query the job's state every startup_poll_interval until it runs, as batchspawner does; a port report
        (the server runs, so the job does) asks again at once."""
        while True:
            status = await self.query_job_status()
            if status == JobStatus.RUNNING:
                return
            if status == JobStatus.UNKNOWN:  # Slurm did not answer (spawners.slurm_state): wait, within bounds
                self.check_slurm_answers()
            if status not in (JobStatus.PENDING, JobStatus.UNKNOWN):
                self.log.warning("Job %s neither pending nor running.\n%s", self.job_id, self.job_status)
                self.clear_state()
                raise RuntimeError("The Jupyter batch job has disappeared while pending in the queue or died "
                                   "immediately after starting.")
            if self._port_reported.is_set():  # Slurm has not caught up yet: do not spin
                await asyncio.sleep(min(self.startup_poll_interval, 0.1))
                continue
            try:
                await asyncio.wait_for(self._port_reported.wait(), timeout=self.startup_poll_interval)
            except TimeoutError:
                pass

    async def node_address(self, node: str) -> str:
        """Where the hub reaches a server on `node`: the node's NodeAddr (Slurm's node names need not resolve on
        the hub host); the name itself when Slurm does not say."""
        try:
            found = nodes_from_scontrol(await self._slurm("scontrol", "show", "node", "-o", node)).get(node)
        except web.HTTPError:
            return node
        return found.address if found and found.address else node

    async def _job_record(self, job_id: str) -> dict[str, str]:
        """`scontrol show job`; {} when Slurm does not answer now (a controller restarting is not a job that
        ended); "COMPLETED" only when Slurm says it no longer knows the job."""
        try:
            return parse_key_values(await self._slurm("scontrol", "show", "job", "-o", job_id))
        except web.HTTPError as err:
            if "Invalid job id" in str(err.log_message):
                return {"JobState": "COMPLETED"}  # Slurm no longer knows it: long gone
            return {}

    async def describe_ended_job(self, job_id: str) -> str:
        job = await self._job_record(job_id)
        state = job.get("JobState", "unknown")
        lines = [f"Slurm job {job_id} ended ({state}, exit code {job.get('ExitCode', '?')}, "
                 f"reason {job.get('Reason', 'None')}) before JupyterLab started."]
        path = job.get("StdOut")
        if path:
            tail = await self._output_tail(path)
            lines.append(f"Last lines of {path}:\n{tail}" if tail else f"{path} is empty.")
        self.clear_state()
        return "\n".join(lines)

    async def _output_tail(self, path: str) -> str:
        """The end of the job's output, read as the user (it is their file)."""
        argv = runuser_argv(self.user.name, "/", ["tail", "-n", str(self.output_tail_lines), "--", path])
        proc = await asyncio.create_subprocess_exec(*argv, env=launcher_env(), cwd=ISOLATED_CWD,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        return out.decode(errors="replace").strip()

    # --- Spawner.progress: the job id and Slurm's pending reason ---

    async def progress(self):
        last = None
        while not self.port:
            state, _, reason = (self.job_status or "").partition(" ")
            reason = reason.split(" ", 1)[1] if " " in reason else ""
            if not self.job_id:
                message = "Submitting the server job to Slurm"
            elif self.slurm_unavailable:
                message = self.unavailable_message()
            elif self.state_ispending():
                message = f"Slurm job {self.job_id} pending: {pending_reason(reason)}"
            elif self.state_isrunning():
                message = self._running_message()
            else:
                message = f"Slurm job {self.job_id}: {state or 'waiting for Slurm'}"
            if message != last:
                yield {"message": message}
                last = message
            await asyncio.sleep(1)
        if self.state_isrunning() and last != self._running_message():
            yield {"message": self._running_message()}  # it started between two looks: say where, all the same

    def _running_message(self) -> str:
        return f"Slurm job {self.job_id} running on {self.state_gethost()}; JupyterLab is starting"

