"""The Slurm scheduler's section of the settings (scheduler: slurm), owned here and a part of every PortalConfig: the
client's configuration and commands, and the shape and ports of the cluster in a box's Slurm, with their checks
(`check_section`). docs/configuration.md tables them in a section of their own. Of the settings' layer: it imports
nothing of the scheduler's (tests/unit/test_layers.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from portal.config_values import check_ports, setting


@dataclass(frozen=True)
class SlurmSettings:
    """Slurm (scheduler: slurm): its client configuration and commands, and the cluster in a box's Slurm"""

    slurm_conf: str = setting("", "Slurm's client configuration; empty means <state_dir>/slurm/slurm.conf.")
    slurm_bin_dir: Path = setting(Path("/usr/bin"), "Where Slurm's commands (sbatch, squeue, sacctmgr, ...) are; the "
                                  "box starts Slurm's daemons from the sbin beside it. A release built by `make "
                                  "slurm-build`: /opt/dsportal/slurm/<release>/bin.")
    slurmctld_port: int = setting(6817, "slurmctld's port (the cluster in a box).")
    slurmd_port: int = setting(6818, "slurmd's port (the cluster in a box).")
    slurm_node_cpus: int = setting(8, "CPUs of each demo compute node (the cluster in a box).")
    slurm_node_memory_mb: int = setting(24576, "Memory (MB) of each demo compute node (the cluster in a box): the "
                                              "default server (4 GB) and the default job (16 GB per node) fit "
                                              "side by side.")
    slurm_node_gpus: int = setting(4, "Fake GPUs of each demo compute node (the cluster in a box).")
    slurmdbd_port: int = setting(6819, "Slurm accounting: slurmdbd's port.")
    accounting_db_port: int = setting(6820, "The port of the box's private MariaDB (which only slurmdbd uses).")

    def check_section(self) -> None:
        """ConfigError naming the first of these settings whose value is not allowed, and what is (PortalConfig's
        checks call each section's: portal.config_checks)."""
        check_ports(self, ("slurmctld_port", "slurmd_port", "slurmdbd_port", "accounting_db_port"))
