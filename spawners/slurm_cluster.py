"""What the Slurm spawner asks Slurm as root, outside batchspawner's own commands (which run as the user): the
partitions and the user's GPU use for the form, a node's address, and a job's record to explain a failed start.

Functions of the portal's settings and plain values, so the spawner (spawners.slurm) keeps only its extension points.
A Slurm that does not answer is an HTTP 503 naming the command (the form shows it); it never reads as a job state.
"""

from __future__ import annotations

import asyncio
import os
import shlex

from tornado import web

from portal.config import PortalConfig
from portal.runas import ISOLATED_CWD, launcher_env, runuser_argv
from portal.slurm import USER_SQUEUE_FORMAT, gpu_holders, nodes_from_scontrol, parse_key_values, slurm_partitions
from spawners.forms import ClusterLimits, Partition

SLURM_TIMEOUT_S = 15


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


async def run_slurm(portal: PortalConfig, *args: str) -> str:
    """A Slurm command's output, run as the hub (root: these read cluster-wide facts, not the user's jobs)."""
    env = {**os.environ, "SLURM_CONF": str(portal.slurm_conf_path)}
    proc = await asyncio.create_subprocess_exec(
        str(portal.slurm_bin_dir / args[0]), *args[1:], env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=SLURM_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        raise web.HTTPError(503, f"Slurm did not answer `{shlex.join(args)}` within {SLURM_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise web.HTTPError(503, f"Slurm refused `{shlex.join(args)}`: {err.decode().strip()}")
    return out.decode()


async def cluster_limits(portal: PortalConfig, user: str, groups: tuple[str, ...]) -> ClusterLimits:
    """What this user may ask for now: the partitions that are up, free GPUs, the group quota and what the
    user's jobs hold of it (the quota is for their server and jobs together)."""
    partitions = partitions_from_scontrol(
        await run_slurm(portal, "scontrol", "show", "partition", "-o"),
        await run_slurm(portal, "scontrol", "show", "node", "-d", "-o"),
    )
    holders = gpu_holders(await run_slurm(portal, "squeue", "-h", "-u", user, "-O", USER_SQUEUE_FORMAT))
    return ClusterLimits(partitions=partitions, gpu_quota=portal.gpu_quota_for(groups), groups=groups,
                         gpus_in_use=sum(h.gpus for h in holders), gpu_holders=tuple(h.describe() for h in holders))


async def node_address(portal: PortalConfig, node: str) -> str:
    """Where the hub reaches a server on `node`: the node's NodeAddr (Slurm's node names need not resolve on
    the hub host); the name itself when Slurm does not say."""
    try:
        found = nodes_from_scontrol(await run_slurm(portal, "scontrol", "show", "node", "-o", node)).get(node)
    except web.HTTPError:
        return node
    return found.address if found and found.address else node


async def job_record(portal: PortalConfig, job_id: str) -> dict[str, str]:
    """`scontrol show job`; {} when Slurm does not answer now (a controller restarting is not a job that
    ended); "COMPLETED" only when Slurm says it no longer knows the job."""
    try:
        return parse_key_values(await run_slurm(portal, "scontrol", "show", "job", "-o", job_id))
    except web.HTTPError as err:
        if "Invalid job id" in str(err.log_message):
            return {"JobState": "COMPLETED"}  # Slurm no longer knows it: long gone
        return {}


async def ended_job_report(job_id: str, job: dict[str, str], user: str, tail_lines: int) -> str:
    """Why a start failed: the job's state, exit code and reason, and the end of its output."""
    lines = [f"Slurm job {job_id} ended ({job.get('JobState', 'unknown')}, exit code {job.get('ExitCode', '?')}, "
             f"reason {job.get('Reason', 'None')}) before JupyterLab started."]
    path = job.get("StdOut")
    if path:
        tail = await output_tail(user, path, tail_lines)
        lines.append(f"Last lines of {path}:\n{tail}" if tail else f"{path} is empty.")
    return "\n".join(lines)


async def output_tail(user: str, path: str, lines: int) -> str:
    """The end of the job's output, read as the user (it is their file)."""
    argv = runuser_argv(user, "/", ["tail", "-n", str(lines), "--", path])
    proc = await asyncio.create_subprocess_exec(*argv, env=launcher_env(), cwd=ISOLATED_CWD,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    return out.decode(errors="replace").strip()

