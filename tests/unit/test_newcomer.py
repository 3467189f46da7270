"""The newcomer's order's own work (tests/newcomer.py) is what the dashboard accepts: each of her submissions passes
the submit's checks (portal.jobs' parse_job_spec, then parse_sweep), so that the order fails on what the suites do
beside her work, never on a refused form (2026-12-04: a 2-epoch sweep asked for the default pruner, which needs 3
epochs, and was refused with 400 before `make test` began). Her quota as the submissions pile up is the box's."""

from __future__ import annotations

import pytest

from portal.records.spec import parse_job_spec
from portal.records.sweep import parse_sweep
from tests import newcomer
from tests.unit.helpers import SPEC_LIMITS, spec_readable


@pytest.mark.parametrize("request_", newcomer.SUBMITTED, ids=lambda r: f"{r['template']}{'-sweep' * ('sweep' in r)}")
def test_each_submission_of_the_newcomers_order_passes_the_submits_checks(request_):
    fields = {key: value for key, value in request_.items() if key != "sweep"}
    spec = parse_job_spec(fields, SPEC_LIMITS, spec_readable, sweep="sweep" in request_)
    if "sweep" in request_:
        assert parse_sweep(request_["sweep"], spec.epochs, SPEC_LIMITS, spec.gpus).trials == request_["sweep"]["trials"]
