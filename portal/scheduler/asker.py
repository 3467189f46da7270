"""Asking the scheduler for a job's state while waiting on it (Job.wait, the notebooks' watch), through what passes:
a slurmctld or an API server restarting."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from portal.errors import SchedulerRefused, SchedulerUnavailable

# How long a waiter asks again when the scheduler refuses a job it answered for before. A Kubernetes API server
# that has just started serves before its authorizer has read the cluster's roles: for some seconds it answers
# 403 "RBAC: clusterrole ... not found" to every user (seen after a restart on the test box).
REFUSED_AGAIN_S = 60.0


class Asker:
    """Asks the scheduler for a waiter (Job.wait, the notebooks' watch), riding through what passes: while the
    scheduler does not answer (slurmctld or the API server restarting) it asks again, for as long as the waiter
    waits; a refusal of a job it answered for before is asked again for up to REFUSED_AGAIN_S, then raised. A
    refusal on the first ask is raised at once: that one is the user's to know."""

    def __init__(self, refused_again_s: float | None = None):
        self.refused_again_s = REFUSED_AGAIN_S if refused_again_s is None else refused_again_s
        self.answered = False
        self.refused_since: float | None = None

    def ask(self, question: Callable[[], Any]) -> tuple[Any, str | None]:
        """(answer, None), or (None, why there is none this time: a line for the user)."""
        try:
            answer = question()
        except SchedulerUnavailable as err:
            return None, f"the scheduler does not answer now; asking again ({err})"
        except SchedulerRefused as err:
            now = time.monotonic()
            since = self.refused_since = self.refused_since if self.refused_since is not None else now
            if not self.answered or now - since >= self.refused_again_s:
                raise
            return None, (f"the scheduler refused what it answered before; asking again for up to "
                          f"{self.refused_again_s:.0f} s ({err})")
        self.answered, self.refused_since = True, None
        return answer, None
