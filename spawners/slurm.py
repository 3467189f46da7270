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
"""

from __future__ import annotations

import asyncio
import os
import shlex

from batchspawner import SlurmSpawner
from tornado import web
from traitlets import Float, Instance, Integer, default

from portal.config import PortalConfig, load
from portal.slurm import RUNUSER, parse_key_values, slurm_partitions
from spawners.forms import ClusterLimits, OptionsError, Partition, ServerOptions, parse_server_options, render_form

# Slurm's pending reasons, in words a data scientist can act on.
PENDING_REASONS = {
    "Resources": "waiting for GPUs, CPUs or memory to free up",
    "Priority": "other jobs are ahead in the queue",
    "ReqNodeNotAvail": "the requested node is not available",
    "PartitionTimeLimit": "the wall time exceeds the partition's limit",
    "QOSMaxGRESPerUser": "you are using your whole GPU allowance",
    "AssocGrpGRES": "your group is using its whole GPU allowance",
    "JobHeldUser": "the job is held",
    "JobHeldAdmin": "the job is held by an administrator",
    "BeginTime": "the job's start time has not come",
    "None": "the scheduler has not looked at it yet",
}
ENDED_STATES = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "TIMEOUT")


def partitions_from_scontrol(partition_lines: str, node_lines: str) -> tuple[Partition, ...]:
    """Partitions that are up, with the resources of their best node, from `scontrol show partition -o` and
    `scontrol show node -d -o` (read by portal.slurm, shared with the training jobs)."""
    return tuple(
        Partition(name=p.name, cpus_per_node=p.cpus_per_node, memory_mb_per_node=p.memory_mb_per_node,
                  gpus_per_node=p.gpus_per_node, free_gpus_per_node=p.free_gpus_per_node,
                  max_minutes=p.max_minutes, default=p.default)
        for p in slurm_partitions(partition_lines, node_lines)
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


class PortalSlurmSpawner(SlurmSpawner):
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
        return (f"{python} -m portal.notebook install-templates "
                "|| echo 'template notebooks were not copied' >&2")

    @default("cmd")
    def _cmd_default(self) -> list[str]:
        return [str(self.portal.venv / "bin" / "jupyterhub-singleuser")]

    @default("batchspawner_singleuser_cmd")
    def _singleuser_default(self) -> str:
        return str(self.portal.venv / "bin" / "batchspawner-singleuser")

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
        """What this user may ask for now: the partitions that are up, free GPUs, and the group quota."""
        partitions = partitions_from_scontrol(
            await self._slurm("scontrol", "show", "partition", "-o"),
            await self._slurm("scontrol", "show", "node", "-d", "-o"),
        )
        groups = tuple(sorted(g.name for g in self.user.groups))
        return ClusterLimits(partitions=partitions, gpu_quota=self.portal.gpu_quota_for(groups), groups=groups)

    # --- the form (Spawner.options_form / options_from_form / apply_user_options) ---

    async def _render_options_form(self) -> str:
        limits = await self.cluster_limits()
        try:  # offer the user's last choices again where they still fit
            previous = parse_server_options(self.user_options, limits) if self.user_options else None
        except OptionsError:
            previous = None
        return render_form(limits, previous)

    async def options_from_form(self, formdata: dict) -> dict:
        """Validate the form; an error re-renders it with the message naming the field."""
        return parse_server_options(formdata, await self.cluster_limits()).to_dict()

    async def _apply_server_options(self, user_options: dict) -> None:
        """Validate (again: the REST API skips the form) and put only checked values into the batch script."""
        try:
            options = parse_server_options(user_options or {}, await self.cluster_limits())
        except OptionsError as err:
            raise web.HTTPError(400, str(err)) from None
        self.apply_server_options(options)

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
            if not job_id or "before JupyterLab" in str(err):
                raise
            # batchspawner's own "job has disappeared": say why it did
            raise RuntimeError(await self.describe_ended_job(job_id)) from err
        finally:
            if not starting.done():
                starting.cancel()

    async def _start_until_server_listens(self) -> tuple[str, int]:
        """batchspawner's start, then wait for the server to accept connections: batchspawner-singleuser
        reports its port before JupyterLab starts, so a server that crashes on start would otherwise leave
        the hub waiting http_timeout."""
        ip, port = await super().start()
        while not await accepts_connections(ip, port):
            await asyncio.sleep(0.5)
        return ip, port

    async def _job_record(self, job_id: str) -> dict[str, str]:
        try:
            return parse_key_values(await self._slurm("scontrol", "show", "job", "-o", job_id))
        except web.HTTPError:
            return {"JobState": "COMPLETED"}  # Slurm no longer knows it: long gone

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
        proc = await asyncio.create_subprocess_exec(
            RUNUSER, "-u", self.user.name, "--", "tail", "-n", str(self.output_tail_lines), path,
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
            elif self.state_ispending():
                message = f"Slurm job {self.job_id} pending: {reason}"
                if reason.split(",")[0] in PENDING_REASONS:
                    message += f" ({PENDING_REASONS[reason.split(',')[0]]})"
            elif self.state_isrunning():
                message = f"Slurm job {self.job_id} running on {self.state_gethost()}; JupyterLab is starting"
            else:
                message = f"Slurm job {self.job_id}: {state or 'waiting for Slurm'}"
            if message != last:
                yield {"message": message}
                last = message
            await asyncio.sleep(1)
