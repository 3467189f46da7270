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

`portal.jobs` used to hand out each scheduler's error class (`jobs.SlurmError`, `jobs.KubernetesError`), which
named every scheduler in the one API all of them share. Each is now in its own package's errors.py and derives
from `jobs.SchedulerError`, which is what a notebook catches; until ERRORS_GO the old names still answer, with a
warning (`moved_error`).
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

BACKEND_GOES = "2027-06-30"  # the first release after this date drops `backend`
OLD_SCHEDULER_NAME = "backend"
ERRORS_GO = "2027-06-30"  # the first release after this date drops portal.jobs' SlurmError and KubernetesError
# An old name in portal.jobs -> the module that holds the class now.
MOVED_ERRORS = {"SlurmError": "portal.scheduler.slurm.errors", "KubernetesError": "portal.scheduler.kubernetes.errors"}

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


def moved_error(module: str, name: str) -> Any:
    """A module's `__getattr__` for MOVED_ERRORS: the class from where it lives now, with a warning that names
    SchedulerError (stacklevel: the caller's `module.Name` or `from module import Name`); AttributeError for any
    other name, as Python's own."""
    if name not in MOVED_ERRORS:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warn_renamed(f"{module}.{name}", f"{module}.SchedulerError (every scheduler's errors derive from it)", ERRORS_GO,
                 stacklevel=4)
    return getattr(importlib.import_module(MOVED_ERRORS[name]), name)
