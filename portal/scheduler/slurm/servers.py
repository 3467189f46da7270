"""What the Slurm scheduler tells the hub's Slurm spawner about its servers' jobs
(portal.scheduler.protocol.HostsServers), asked as the portal: where a node's server is reached, and a server's job
once it is no longer running.

A mixin of SlurmScheduler: both read through its one command runner (`self.commands`).
"""

from __future__ import annotations

from portal.scheduler.cluster import QueuedJob
from portal.scheduler.slurm.commands import SlurmCommands
from portal.scheduler.slurm.errors import SlurmError


class SlurmServers:
    """HostsServers' calls for Slurm: `scontrol show node` and `squeue --json`, as root."""

    commands: SlurmCommands

    def server_address(self, node: str) -> str:
        return self.commands.node_address(node)

    def server_job(self, job_id: str) -> QueuedJob | None:
        try:
            jobs = self.commands.queue()
        except SlurmError:
            return None
        return jobs.get(job_id) or QueuedJob(id=job_id, user="", state="COMPLETED", elapsed="", nodes=0,
                                             gpus_per_node=0, reason="None")
