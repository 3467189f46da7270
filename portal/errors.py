"""The hub side's errors, one tree: every error that portal/ and spawners/ raise for a caller to handle derives from
PortalError, through the kind that says what went wrong. Callers branch on the class, never on the message; the
HTTP status of each kind is here, on the class (`http_status`), and `answer` turns any of them into the status and
the words a user sees (the dashboard's portal.service.base and the spawn form's spawners.options both use it).

    PortalError                 500  anything the portal refuses or cannot do for a request
    ├── Refused                 400  the request is not allowed (`field` names the field): InputError, JobSpecError
    ├── Forbidden               403  the caller may not do this (JobAccessError, a locked account)
    ├── NotFound                404  no such thing for this caller (JobNotFound: another user's job too)
    ├── Untrusted               409  a file or record of the user's is not what it must be: shown, never acted on
    ├── Busy                    429  try again in `retry_after_s` (one submit at a time per user)
    ├── Misconfigured           500  the site's settings or registrations are wrong (ConfigError, ProgramError)
    ├── BadAnswer               502  a component answered, but not as it writes (Slurm's JSON, a watch's event)
    ├── Unavailable             503  something the portal asks did not answer (the hub, LDAP, users' parts)
    ├── UserStorage             507  the user's own file system refused a write (full, over quota, a link)
    └── SchedulerError          503  the scheduler failed the request: `scheduler` names it, its own words follow
        ├── SchedulerUnavailable     it did not answer (timeout, controller down, command missing): try again
        ├── SchedulerRefused         it answered no (a policy, a limit, a request it does not take)
        │   ├── UnknownScheduler 400 no scheduler of that name (portal.scheduler.errors)
        │   └── NoAccounting     501 it keeps no accounting of GPU-hours
        └── each scheduler's own: portal.scheduler.slurm.errors, portal.scheduler.kubernetes.errors

The training programs (chexnet/, chexnet_torch/) are below the hub side and import nothing of it: their errors are
their own, and reach the hub only as exit codes and records. Builtin bases (ValueError, LookupError, ...) stay
beside the kind where callers and libraries catch them. Imports nothing of the portal: every layer may use it.
"""

from __future__ import annotations

from typing import ClassVar


class PortalError(Exception):
    """Anything the portal refuses or cannot do for a request, with a message for the user."""

    http_status: ClassVar[int] = 500
    field: str | None = None  # the request's field it is about, where one is
    retry_after_s: int | None = None  # Busy: in how many seconds to ask again

    def user_message(self) -> str:
        """The words a user sees: the message, unless a kind says more."""
        return str(self)


class Refused(PortalError):
    """The request is not allowed; `field` names the field where one does."""

    http_status = 400


class Forbidden(PortalError):
    """The caller may not do this."""

    http_status = 403


class NotFound(PortalError, LookupError):
    """No such thing for this caller (what is another user's is "not found" too: its existence is not theirs)."""

    http_status = 404


class Untrusted(PortalError):
    """A file or record of the user's is not what it must be (the user's to write: read as hostile)."""

    http_status = 409


class Busy(PortalError):
    """The same request is still being decided: ask again after `retry_after_s`."""

    http_status = 429


class Misconfigured(PortalError):
    """The site's settings or the portal's registrations are wrong: the operator's to fix."""

    http_status = 500


class BadAnswer(PortalError):
    """A component answered, but not as it writes: read as it not answering."""

    http_status = 502


class Unavailable(PortalError):
    """Something the portal asks (the hub's API, the directory, the users' records) did not answer in time."""

    http_status = 503


class UserStorage(PortalError):
    """The user's own file system refused a write: full, over quota, not writable, a link."""

    http_status = 507


class JobNotFound(NotFound):
    """No such job for this user (another user's job is 'not found' too: its existence is not theirs to know)."""


class SchedulerError(PortalError, RuntimeError):
    """The scheduler failed the request; the message has its own words, and the user's names the scheduler."""

    http_status = 503
    scheduler: ClassVar[str] = "The scheduler"  # each scheduler's own errors name it: "Slurm", "Kubernetes"

    def user_message(self) -> str:
        return f"{self.scheduler} is unavailable: {self}"


class SchedulerUnavailable(SchedulerError):
    """The scheduler did not answer: a timeout, a controller that is down, a command that cannot run."""


class SchedulerRefused(SchedulerError):
    """The scheduler answered and refused: a policy, a limit, a request it does not accept."""


def answer(err: BaseException) -> tuple[int, str, str | None] | None:
    """(HTTP status, the user's words, the field) for one of the portal's errors; None for anything else (a bug:
    logged, and a 500 without its words)."""
    if not isinstance(err, PortalError):
        return None
    return err.http_status, err.user_message(), err.field
