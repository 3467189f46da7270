"""Kubernetes' errors (portal.errors' SchedulerError, naming Kubernetes): `status` is the API server's HTTP status."""

from __future__ import annotations

from portal.errors import SchedulerError, SchedulerRefused, SchedulerUnavailable

REQUEST_REFUSED = (403, 409, 422)  # forbidden (a quota, RBAC), a conflict, invalid: the user's request, a 400


class KubernetesError(SchedulerError):
    """The API server refused or did not answer; `status` is its HTTP status (0: no answer)."""

    scheduler = "Kubernetes"

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status

    @property  # type: ignore[override]  # a class attribute elsewhere: here it depends on the API's answer
    def http_status(self) -> int:
        """Refused (a quota, an admission rule): the user's request; anything else: the API server is not there."""
        return 400 if self.status in REQUEST_REFUSED else 503

    def user_message(self) -> str:
        return str(self)  # "the Kubernetes API refused ... / did not answer ...": it names itself


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
