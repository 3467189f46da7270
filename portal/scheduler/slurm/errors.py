"""Slurm's errors (portal.errors' SchedulerError, naming Slurm): `said` holds Slurm's own message."""

from __future__ import annotations

from portal.errors import SchedulerError, SchedulerRefused, SchedulerUnavailable, UserStorage


class SlurmError(SchedulerError):
    """Slurm failed the request; `said` holds Slurm's own message (stderr), which the message quotes."""

    scheduler = "Slurm"

    def __init__(self, message: str, said: str = ""):
        super().__init__(message)
        self.said = said


class SlurmUnavailable(SlurmError, SchedulerUnavailable):
    """Slurm did not answer: no answer in time, a controller or accounting that cannot be reached, no command."""


class SlurmRefused(SlurmError, SchedulerRefused):
    """Slurm answered and refused (`said` has its words: an unknown job id, a policy, a denied request)."""


class JobDirError(SlurmError, UserStorage):
    """The job was cancelled because its ~/jobs/<cluster>/<id>/ could not be made: the user's file system (full, over
    quota, not writable), not Slurm. A SlurmError still, for every caller that handles a failed submit."""

    http_status = UserStorage.http_status

    def user_message(self) -> str:
        return f"your job directory could not be prepared: {self}"
