"""What the GPUs of the cluster do, node by node (issue 63): each node's reader says, for each of its GPUs, how busy
it was over the last interval, its memory, and which job or server holds it.

    readings.py   the records (`GpuReading`, `NodeReading`) and their schema: what a page may use
    nvml.py       the reader where the GPUs are real: NVML (nvidia-ml-py); recorded answers in the suites
    standin.py    the reader in the boxes, whose GPUs are FAKE (character devices that cannot compute): a busy
                  figure from the CPU time of the holder's processes on the node, named as a stand-in
    cgroups.py    those processes' CPU time and memory, from the node's cgroups (Slurm's, the kubelet's)

A reading is unknown (busy None) when its reader could not tell: a failed NVML call, a holder seen for the first
time. Nothing counts an unknown GPU as idle.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from portal.config import PortalConfig


def readings_dir(cfg: PortalConfig) -> Path:
    """Where the nodes' readers write and the portal reads: <state_dir>/gpus, root's alone."""
    return cfg.state_dir / "gpus"
