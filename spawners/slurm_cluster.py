"""What the Slurm spawner asks its scheduler as the portal, outside batchspawner's own commands (which run as the
user) and the form's limits (spawners.options): whether a server will wait, from the scheduler's snapshot; a node's
address; and a server's job record to explain a failed start. Each goes through the Scheduler protocol
(portal.scheduler.protocol: `snapshot`, and HostsServers' `server_address` and `server_job`), never Slurm's commands.

Functions of the scheduler and plain values, so the spawner (spawners.slurm) keeps only its extension points. A
scheduler that does not answer raises SlurmUnavailable naming the command (the form shows it as a 503:
spawners.options); it never reads as a job state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from portal.records.account import job_user
from portal.scheduler.cluster import QueuedJob, start_note, users_jobs
from portal.scheduler.protocol import HostsServers, Scheduler
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


def server_host(scheduler: Scheduler[Any]) -> HostsServers[Any]:
    """The spawner's scheduler as one that hosts servers (Slurm's does: portal.scheduler.slurm.servers)."""
    return cast("HostsServers[Any]", scheduler)


async def node_address(scheduler: Scheduler[Any], node: str) -> str:
    """Where the hub reaches a server on `node`, as the scheduler says (HostsServers.server_address)."""
    return await asyncio.to_thread(server_host(scheduler).server_address, node)


async def job_record(scheduler: Scheduler[Any], job_id: str) -> QueuedJob | None:
    """The server's job as the scheduler tells it: None when it does not answer now; COMPLETED once it forgot it
    (HostsServers.server_job)."""
    return await asyncio.to_thread(server_host(scheduler).server_job, job_id)


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
