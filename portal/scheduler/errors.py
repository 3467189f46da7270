"""The portal's errors, one hierarchy for every scheduler: callers branch on the class, never on the message.

    PortalError
    ├── JobNotFound          no such job for this user (another user's job is "not found" too)
    └── SchedulerError       the scheduler failed the request; the message has the scheduler's own words
        ├── SchedulerUnavailable   it did not answer (timeout, controller down, command missing): try again
        └── SchedulerRefused       it answered no (a policy, a limit, a bad request)

Each scheduler names its own subclasses (portal.scheduler.slurm.scheduler.SlurmError,
portal.jobs.kubernetes.KubernetesError) so that a message can say which one failed. The HTTP mapping is in one place:
portal.service.base for the dashboard, spawners.options for the spawn form.
"""

from __future__ import annotations


class PortalError(Exception):
    """Anything the portal refuses or cannot do for a request, with a message for the user."""


class JobNotFound(PortalError, LookupError):
    """No such job for this user (another user's job is 'not found' too: its existence is not theirs to know)."""


class SchedulerError(PortalError, RuntimeError):
    """The scheduler failed the request; the message has its own words."""


class SchedulerUnavailable(SchedulerError):
    """The scheduler did not answer: a timeout, a controller that is down, a command that cannot run."""


class SchedulerRefused(SchedulerError):
    """The scheduler answered and refused: a policy, a limit, a request it does not accept."""


class SlurmError(SchedulerError):
    """Slurm failed the request; `said` holds Slurm's own message (stderr), which the message quotes."""

    def __init__(self, message: str, said: str = ""):
        super().__init__(message)
        self.said = said


class SlurmUnavailable(SlurmError, SchedulerUnavailable):
    """Slurm did not answer: no answer in time, a controller or accounting that cannot be reached, no command."""


class SlurmRefused(SlurmError, SchedulerRefused):
    """Slurm answered and refused (`said` has its words: an unknown job id, a policy, a denied request)."""


class KubernetesError(SchedulerError):
    """The API server refused or did not answer; `status` is its HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class KubernetesUnavailable(KubernetesError, SchedulerUnavailable):
    """The API server did not answer (status 0), or answered that it cannot now (429, 5xx)."""


class KubernetesRefused(KubernetesError, SchedulerRefused):
    """The API server answered no: forbidden, invalid, a conflict, over a quota."""


def kubernetes_failure(what: str, status: int, said: str) -> KubernetesError:
    """The error for a failed call to the API server: status 0 when it did not answer (`said`: why), else its
    HTTP status and message."""
    if not status:
        return KubernetesUnavailable(f"the Kubernetes API did not answer ({what}): {said}")
    if status == 429 or status >= 500:
        return KubernetesUnavailable(f"the Kubernetes API could not answer {what} now: {status} {said}", status)
    return KubernetesRefused(f"the Kubernetes API refused {what}: {status} {said}", status)
