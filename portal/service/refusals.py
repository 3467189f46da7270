"""What the dashboard refuses, logged and counted: one log line for each submit or cancel it refuses (who, which
kind of error, the reason on one line) and the counter the portal's Prometheus endpoint exports by action and
reason (portal.service.prometheus). A reason is a label of few values, whatever the request held: the job field an
input error names, or the error's kind."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from prometheus_client import Counter

from portal.inputs import InputError, one_line
from portal.records.spec import FIELDS
from portal.records.sweep import FIELD as SWEEP_FIELD
from portal.service.prometheus import REGISTRY

log = logging.getLogger("portal.service")
NAMED_FIELDS = frozenset((*FIELDS, SWEEP_FIELD, "spec", "template", "body", "_xsrf"))
REFUSALS = Counter("dsportal_refusals", "Submits and cancels the portal refused, by action and reason (the field an "
                   "input error names, else the error's kind)", ("action", "reason"), registry=REGISTRY)


def reason_of(err: BaseException) -> str:
    """The refusal's reason as a label: a job field (`other-field` for a name that is none), or the error's kind."""
    if isinstance(err, InputError):
        return err.field if err.field in NAMED_FIELDS else "other-field"
    return type(err).__name__


@contextlib.contextmanager
def refusal_logged(action: str, decision: str) -> Iterator[None]:
    """One log line for a request the portal refuses (`decision`: "submit by alice"), counted under `action`."""
    try:
        yield
    except Exception as err:
        log.warning("%s refused (%s): %s", decision, type(err).__name__, one_line(err))
        REFUSALS.labels(action, reason_of(err)).inc()
        raise
