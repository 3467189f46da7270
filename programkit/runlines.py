"""The lines of a program's log that the portal reads back, worded once here: every program says them with these
functions (after its own `<module>:` prefix, as each program's lines start), and the portal finds them with the
patterns below (the job's history on Slurm: where each run after a requeue began, portal/scheduler/slurm/history.py).

The log is the user's to write: the patterns take ASCII digits only, and few of them (int() of 5,000 digits raises).
"""

from __future__ import annotations

import re
from pathlib import Path

# A program's prefix: the module it runs as (chexnet.train, chexnet_torch.train), then ": ".
PREFIX = r"[a-z][a-z0-9_.]{0,80}: "
RESUME_LINE = re.compile(PREFIX + r"(?:resuming from .*continuing with epoch ([0-9]{1,6}) of|"
                                  r"--resume: no checkpoint in .*starting fresh at (epoch) 1)")
# The same lines for `grep -E` (the portal reads only those of a long log).
RESUME_GREP = r"[a-z][a-z0-9_.]*: (resuming from|--resume: no checkpoint)"


def resuming(checkpoint: str | Path, epochs_done: int, epochs: int, more: str = "") -> str:
    """What a run resumed from a checkpoint says (rank 0, once): RESUME_LINE reads the epoch it starts at."""
    return (f"resuming from {checkpoint}: {epochs_done} epochs done, continuing with epoch {epochs_done + 1} of "
            f"{epochs}{more}")


def starting_fresh(directory: str | Path) -> str:
    """What a run given --resume with no checkpoint to resume from says: it starts at epoch 1."""
    return f"--resume: no checkpoint in {directory}; starting fresh at epoch 1"


def resumed_at(match: re.Match[str]) -> int:
    """The epoch a run starts at, from RESUME_LINE's match of one of the two lines above."""
    return 1 if match.group(2) else int(match.group(1))
