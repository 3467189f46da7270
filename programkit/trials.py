"""A sweep's trial as a program takes it (`--trial FILE`): the trial file `python -m programkit.sweep_cli attach`
wrote, checked against its schema, each parameter of its type. Every rank of a trial reads the same file."""

from __future__ import annotations

import json
from pathlib import Path

from programkit.cli import UsageError
from programkit.schemas import TRIAL_RECORD, check
from programkit.userfiles import read_bytes

MAX_TRIAL_BYTES = 65536
# What a sweep's trial may set (portal.records.sweep.PARAMS): each program's config field of the same name.
TRIAL_PARAMS = {"lr": float, "warmup_epochs": int, "batch_size": int, "image_size": int, "model": str, "fp16": bool}


def trial_params(path: Path) -> dict[str, object]:
    """A sweep trial file's parameters, each of its TRIAL_PARAMS type (every program's --trial reads it so);
    UsageError when the file is unreadable or not a trial's."""
    try:
        trial = json.loads(read_bytes(path, MAX_TRIAL_BYTES))
        check(TRIAL_RECORD, trial, str(path))
        params = trial["params"]
        return {name: TRIAL_PARAMS[name](params[name]) for name in params}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"--trial {path}: not a sweep's trial file ({type(err).__name__}: {err})") from None
