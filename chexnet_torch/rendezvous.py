"""Where a job's ranks meet: torch's FileStore in a directory that only the job's owner can enter, never a TCP port.

A cluster's network is shared: every port a rank or torchrun opens is reachable by other users' processes (on a
Slurm node even its loopback, on Kubernetes from any pod). torch's TCPStore has no authentication, and torchrun's
c10d rendezvous keeps its state there as a pickle that every agent unpickles, so whoever reaches the store's port runs
code as the job's owner (docs/security.md). The portal's job scripts therefore give torchrun a FileStore
(`--rdzv-backend=c10d --rdzv-conf=store_type=file`, the endpoint a file in this directory) with
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (no TCPStore of the agent's for the ranks), and export the directory as
`DSPORTAL_RENDEZVOUS_DIR`; each rank's process group then meets in a FileStore beside it (`init_method`), so what
an agent unpickles and what a rank reads come from files only the owner can write. The directory lives in the job's
directory, on the home that every node of the job shares.

Run by hand (`torchrun --standalone`, no such variable), a run meets at torch's default (env://), as before.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from programkit.userfiles import private_directory_problem

ENV = "DSPORTAL_RENDEZVOUS_DIR"  # set by the job scripts (portal/records/templates/torchrun-rendezvous.sh)
UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


class RendezvousError(RuntimeError):
    """The rendezvous directory is not one that only this user can enter: the run refuses to meet there."""


def private_directory(path: str | os.PathLike[str]) -> Path:
    """`path`, checked: a real directory (not a link), owned by this process's user, closed to group and others.
    Raises RendezvousError naming what is wrong."""
    directory = Path(path)
    if not directory.is_absolute():
        raise RendezvousError(f"{ENV}={path} is not an absolute path")
    problem = private_directory_problem(directory)
    if problem:
        raise RendezvousError(f"{ENV}={path} {problem}")
    return directory


def init_method(environ: Mapping[str, str] | None = None) -> str | None:
    """The process group's `init_method` for this rank: a FileStore in the job's private rendezvous directory,
    named after torchrun's run (its --rdzv-id) and restart, so a run again never meets a stale store; None where no
    directory was given (torch's env://). Raises RendezvousError for a directory others could enter."""
    env = os.environ if environ is None else environ
    given = env.get(ENV, "")
    if not given:
        return None
    directory = private_directory(given)
    run = UNSAFE_NAME.sub("_", env.get("TORCHELASTIC_RUN_ID", "") or "run")
    restart = UNSAFE_NAME.sub("_", env.get("TORCHELASTIC_RESTART_COUNT", "") or "0")
    return f"file://{directory / f'{run}.{restart}.group'}"
