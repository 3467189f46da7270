"""What the Slurm spawner asks Slurm as root, outside batchspawner's own commands (which run as the user): the
partitions and the user's GPU use for the form, a node's address, and a job's record (`squeue --json`, read by
portal.slurm_json: the job's name and paths are the user's text) to explain a failed start.

Functions of the portal's settings and plain values, so the spawner (spawners.slurm) keeps only its extension points.
A Slurm that does not answer is an HTTP 503 naming the command (the form shows it); it never reads as a job state.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from pathlib import Path

from tornado import web

from portal.config import PortalConfig
from portal.jobs.account import job_user
from portal.slurm import gpu_holders, nodes_from_scontrol, slurm_partitions
from portal.slurm_json import SQUEUE_JSON, QueuedJob, SlurmAnswerError, read_squeue, users_jobs
from spawners.forms import ClusterLimits, Partition

SLURM_TIMEOUT_S = 15
OUTPUT_TAIL_BYTES = 64 * 1024  # of a failed server's output: its last lines, however long they are


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
    holders = gpu_holders(users_jobs(await squeue(portal), user))
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


async def squeue(portal: PortalConfig) -> dict[str, QueuedJob]:
    """Every job Slurm's controller remembers (an HTTP 503 when it does not answer, or not as Slurm does)."""
    answer = await run_slurm(portal, *SQUEUE_JSON)
    try:
        return read_squeue(answer, time.time())
    except SlurmAnswerError as err:
        raise web.HTTPError(503, f"`{shlex.join(SQUEUE_JSON)}`: {err}") from None


async def job_record(portal: PortalConfig, job_id: str) -> QueuedJob | None:
    """The job as squeue tells it; None when Slurm does not answer now (a controller restarting is not a job that
    ended); a job Slurm no longer remembers is COMPLETED: long gone."""
    try:
        jobs = await squeue(portal)
    except web.HTTPError:
        return None
    return jobs.get(job_id) or QueuedJob(id=job_id, user="", state="COMPLETED", elapsed="", nodes=0,
                                         gpus_per_node=0, reason="None")


async def ended_job_report(job_id: str, job: QueuedJob | None, user: str, output: str, tail_lines: int) -> str:
    """Why a start failed: the job's state, exit code and reason, and the end of its output (`output`: the file
    the spawner named for it, never a path from Slurm's answer; read as the user, within bounds: it is theirs)."""
    state, code, reason = (job.state, job.exit_code or "?", job.reason) if job else ("unknown", "?", "None")
    lines = [f"Slurm job {job_id} ended ({state}, exit code {code}, reason {reason}) before JupyterLab started."]
    tail = await asyncio.to_thread(job_user(user).tail, Path(output), tail_lines, OUTPUT_TAIL_BYTES)
    if tail is None:
        lines.append(f"{output} is missing, or not a file the portal reads.")
    else:
        lines.append(f"Last lines of {output}:\n{tail.strip()}" if tail.strip() else f"{output} is empty.")
    return "\n".join(lines)
