"""How long a refused client waits (a 429 answer): one number for the Retry-After header and for the text.

Every 429 the portal sends (the dashboard's per-user API rate, a submit while the user's last is still being
decided, the hub's login throttle and its busy directory) names its wait through `RetryLater`, so that the text a
person reads ("try again in 2 s") and the header a client follows (`Retry-After: 2`) are the same whole seconds:
the wait rounded up (a client that comes back after the header's seconds is let in), and at least 1 (RFC 9110's
Retry-After is whole seconds; 0 would invite an immediate retry that is refused again).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tornado.web import HTTPError


@dataclass(frozen=True)
class RetryLater:
    """A wait in whole seconds, as the header and the text both say it."""

    seconds: int

    @classmethod
    def after(cls, wait_s: float) -> RetryLater:
        """The wait `wait_s` (seconds, any fraction) rounded up to whole seconds, at least 1."""
        if not math.isfinite(wait_s):
            raise ValueError(f"wait_s is {wait_s!r}; allowed: a finite number of seconds")
        return cls(max(1, math.ceil(wait_s)))

    @property
    def text(self) -> str:
        return f"try again in {self.seconds} s"

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.seconds)}

    def http_error(self, message: str) -> HTTPError:
        """A 429 for the hub's handlers, with Retry-After: the hub's write_error sets an HTTPError's `headers`
        after clearing the response's own (jupyterhub.handlers.base does so for its own spawn throttle).
        `message` names this wait in its text (`text`)."""
        err = HTTPError(429, message)
        err.headers = self.headers  # type: ignore[attr-defined]  # read by the hub's write_error
        return err
