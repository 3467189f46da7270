"""A sweep's trial as a program takes it (`--trial FILE`): the trial file `python -m programkit.sweep_cli attach`
wrote, checked against its schema, each parameter of its type. Every rank of a trial reads the same file.

What a trial may set is what the hub let its sweep search (portal.records.sweep.params_of): every program's
hyperparameters (COMMON) and the program's own declared fields (its program.py FIELDS), each by the name of the
program's config field that it sets."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from programkit.cli import UsageError
from programkit.schemas import TRIAL_RECORD, check
from programkit.userfiles import read_bytes

MAX_TRIAL_BYTES = 65536
COMMON = {"lr": float, "warmup_epochs": int, "batch_size": int, "image_size": int}
KINDS = {"choice": str, "bool": bool, "int": int}  # a declared field's kind -> its value's type


def param_types(fields: Iterable[Mapping[str, Any]]) -> dict[str, type]:
    """Each parameter a trial of the program declaring `fields` may set, with its type."""
    return {**COMMON, **{field["name"]: KINDS[field["kind"]] for field in fields}}


def trial_params(path: Path, fields: Iterable[Mapping[str, Any]]) -> dict[str, object]:
    """A sweep trial file's parameters, each of its type (param_types of the program's declared `fields`);
    UsageError when the file is unreadable, not a trial's, or sets what this program has not."""
    types = param_types(fields)
    try:
        trial = json.loads(read_bytes(path, MAX_TRIAL_BYTES))
        check(TRIAL_RECORD, trial, str(path))
        params = trial["params"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"--trial {path}: not a sweep's trial file ({type(err).__name__}: {err})") from None
    unknown = [name for name in params if name not in types]
    if unknown:
        raise UsageError(f"--trial {path}: {', '.join(unknown)} is not a parameter of this program; its parameters: "
                         f"{', '.join(types)}")
    try:
        return {name: types[name](value) for name, value in params.items()}
    except (ValueError, TypeError) as err:
        raise UsageError(f"--trial {path}: not a sweep's trial file ({type(err).__name__}: {err})") from None
