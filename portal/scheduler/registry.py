"""The registry of schedulers: which exist (`SCHEDULERS`, registered in portal.registrations: name -> the module and
class that implement portal.scheduler.protocol.Scheduler), the configured one (`scheduler_for`), and which one a job id
is of. Each implementation is imported when first asked for, by its registered name: this module imports no
scheduler's package."""

from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING, Any

from portal.registrations import SCHEDULERS, split
from portal.scheduler.errors import UnknownScheduler

if TYPE_CHECKING:
    from portal.config import PortalConfig
    from portal.scheduler.protocol import Scheduler

__all__ = ["SCHEDULERS", "job_id_patterns", "scheduler_class", "scheduler_for", "scheduler_of_job"]


def scheduler_for(cfg: PortalConfig, name: str | None = None) -> Scheduler[Any]:
    """The scheduler called `name` (default: the configured `scheduler`)."""
    name = name or cfg.scheduler
    if name not in SCHEDULERS:
        raise UnknownScheduler(f"scheduler: {name!r} is not a scheduler; allowed: {', '.join(SCHEDULERS)}")
    implementation: Any = scheduler_class(name)
    return implementation(cfg)


def scheduler_class(name: str) -> type[Scheduler[Any]]:
    """The class of the scheduler called `name` (imported now)."""
    module, cls = split(SCHEDULERS[name].implementation)
    found: type[Scheduler[Any]] = getattr(importlib.import_module(module), cls)
    return found


def job_id_patterns() -> dict[str, str]:
    """Each scheduler's job-id pattern, unanchored (for a route: one spelling per job, so "0002" is no route at
    all rather than a second name for job 2), by scheduler name."""
    return {name: registered.job_ids for name, registered in SCHEDULERS.items()}


def scheduler_of_job(job_id: str) -> str | None:
    """The name of the scheduler whose job ids look like `job_id` (ids never look alike across schedulers), or
    None."""
    for name, registered in SCHEDULERS.items():
        if re.fullmatch(registered.job_ids, job_id):
            return name
    return None
