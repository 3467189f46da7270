"""What the chexnet programs share on their command lines: one-line usage errors and exit code 2."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

EXIT_USAGE = 2


class UsageError(Exception):
    """A bad argument or unusable data: reported as one line and exit code 2, never a traceback."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints the whole usage block on an error; one line that names the flag is enough."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def require_positive(flags: Mapping[str, int]) -> None:
    for flag, value in flags.items():
        if value < 1:
            raise UsageError(f"{flag} must be a positive integer (>= 1); got {value}")


def require_choice(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UsageError(f"{flag} must be one of {', '.join(allowed)}; got {value!r}")


def require_data_dir(data_dir: Path) -> None:
    if not data_dir.is_dir():
        raise UsageError(f"--data-dir must be an existing directory with the dataset; {data_dir} is not")
