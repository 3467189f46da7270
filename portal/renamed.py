"""Old names the portal still answers to, each until a stated date, with a DeprecationWarning that names the new one.

`backend` was the first name of a job's scheduler ("slurm", "local", "kubernetes"). It is now `scheduler`
everywhere: the Python API's keyword (`jobs.submit(spec, scheduler="local")`), job.json's field, the API's job
objects. Until BACKEND_GOES:
- `backend=` is still taken by `portal.jobs` (limits, validate, validate_sweep, render, submit, jobs), with a
  warning;
- job.json and the API's job objects carry `backend` beside `scheduler`, the same value, so a client or a portal
  of an earlier release still reads them.
Records that only have `backend` (every job submitted before the rename) are read for good: a home keeps its jobs
longer than any deprecation.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

BACKEND_GOES = "2027-06-30"  # the first release after this date drops `backend`
OLD_SCHEDULER_NAME = "backend"

F = TypeVar("F", bound=Callable[..., Any])


def warn_renamed(old: str, new: str, goes: str, stacklevel: int = 3) -> None:
    warnings.warn(f"{old} is deprecated and goes after {goes}: it is now called {new}", DeprecationWarning,
                  stacklevel=stacklevel)


def renamed_keyword(old: str, new: str, goes: str) -> Callable[[F], F]:
    """A function that takes `new` and still takes `old` for it, with a warning; both at once, if they differ, is
    a TypeError naming both."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def taking_the_old_name(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                value = kwargs.pop(old)
                if kwargs.get(new) not in (None, value):
                    raise TypeError(f"{function.__name__}(): {old}={value!r} and {new}={kwargs[new]!r} differ; "
                                    f"{old} is {new}'s old name: give only {new}")
                warn_renamed(f"{function.__name__}({old}=...)", f"{new}=", goes)
                kwargs[new] = value
            return function(*args, **kwargs)

        return taking_the_old_name  # type: ignore[return-value]

    return decorate
