"""The scheduler layer's own errors, beside portal.errors' SchedulerError tree: a scheduler the registry does not
have, and a scheduler that keeps no accounting. Each scheduler's errors are in its package (errors.py)."""

from __future__ import annotations

from portal.errors import SchedulerRefused


class UnknownScheduler(SchedulerRefused, ValueError):
    """The scheduler named is not one this portal has."""

    http_status = 400
    field = "scheduler"  # the name of the field in portal.jobs, the CLI and the API (old name: backend)

    def user_message(self) -> str:
        return str(self)


class NoAccounting(SchedulerRefused):
    """This scheduler keeps no accounting of GPU-hours (only Slurm's slurmdbd does)."""

    http_status = 501

    def user_message(self) -> str:
        return str(self)
