"""What the Slurm spawner asks Slurm as root, outside batchspawner's own commands (which run as the user) and the
form's limits (the scheduler's own: spawners.options): whether a server will wait, from the scheduler's snapshot;
a node's address; and a job's record (`squeue --json`, read by portal.scheduler.slurm.json_answers: the job's name
and paths are the user's text) to explain a failed start.

Functions of the portal's settings and plain values, so the spawner (spawners.slurm) keeps only its extension points.
Every command goes through the portal's one Slurm runner (portal.scheduler.slurm.commands). A Slurm that does not
answer raises SlurmUnavailable naming the command (the form shows it as a 503: spawners.options); it never reads as
a job state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from portal.config import PortalConfig
from portal.records.account import job_user
from portal.scheduler.cluster import QueuedJob, start_note, users_jobs
from portal.scheduler.slurm.commands import SlurmCommands
from portal.scheduler.slurm.errors import SlurmError
from portal.scheduler.snapshot import ClusterSnapshot

OUTPUT_TAIL_BYTES = 64 * 1024  # of a failed server's output: its last lines, however long they are


async def server_start_note(look: Callable[[], ClusterSnapshot], user: str, partition: str, gpus: int, cpus: int,
                            memory_gb: int) -> str:
    """Why a server of this size, about to be submitted, will wait (portal.scheduler.cluster.start_note, as a
    training job's submit says it), from `look`, the spawner's look at the cluster (the one its options were just
    checked against: spawners.options): "will wait for your job 7 to end: node1 has 0 of 4 GPUs free"; "" when it
    can start now, or when Slurm does not answer (the start itself then says so)."""
    try:
        snapshot = await asyncio.to_thread(look)
    except SlurmError:
        return ""
    chosen = next((p for p in snapshot.partitions if p.name == partition or (not partition and p.default)), None)
    if chosen is None:
        return ""
    return start_note(1, gpus, cpus, memory_gb, chosen, users_jobs(snapshot.queue, user))


async def node_address(portal: PortalConfig, node: str) -> str:
    """Where the hub reaches a server on `node`: the node's NodeAddr (Slurm's node names need not resolve on
    the hub host); the name itself when Slurm does not say."""
    return await asyncio.to_thread(SlurmCommands(portal).node_address, node)


async def squeue(portal: PortalConfig) -> dict[str, QueuedJob]:
    """Every job Slurm's controller remembers (SlurmUnavailable when it does not answer, or not as Slurm does)."""
    return await asyncio.to_thread(SlurmCommands(portal).queue)


async def job_record(portal: PortalConfig, job_id: str) -> QueuedJob | None:
    """The job as squeue tells it; None when Slurm does not answer now (a controller restarting is not a job that
    ended); a job Slurm no longer remembers is COMPLETED: long gone."""
    try:
        jobs = await squeue(portal)
    except SlurmError:
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
