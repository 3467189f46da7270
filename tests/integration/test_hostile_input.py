"""Hostile input over HTTP, against the real dashboard and the real hub: generated bodies for the jobs API, the
submit form and the hub's REST spawn options. Every answer is an accepted request or a 4xx naming a field; never a
5xx; nothing is submitted for a refused request; and a refused spawn leaves the server startable.

Generated inputs are mostly ones to refuse (so nothing reaches Slurm); the few valid ones are tiny and cancelled.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.hub_client import xsrf_of
from portal.records.spec import FIELDS as SPEC_FIELDS
from spawners.forms import FIELDS as OPTION_FIELDS
from tests.conftest import jobs_of, wait_for
from tests.integration.helpers import PORTAL, browser

pytestmark = pytest.mark.integration
# Generated requests per surface through the real HTTP stack: 100 (DSPORTAL_HOSTILE_EXAMPLES sets another count).
# The 500 per surface that the hostile-input issue asked for are the unit tests' (the same generators, straight into
# the readers: tests/unit/portal/records/test_spec.py, tests/unit/portal/test_inputs.py and
# tests/unit/spawners/test_forms.py, 500 examples each); here they prove what the unit tests cannot: tornado's
# parsing, the hub's REST handler, and nothing reaching Slurm.
EXAMPLES = int(os.environ.get("DSPORTAL_HOSTILE_EXAMPLES", "100"))
HTTP_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                         suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                HealthCheck.filter_too_much])
NON_ASCII = ("٣", "３", "١٢", "٠١:00:00", "01:０0:00")
# Values no surface accepts, for any field: so a generated request is refused, whatever else it holds. A list is
# never a field's value, even of one valid item (the REST spawn once unwrapped {"gpus": [0]}).
REFUSED = (st.sampled_from([*NON_ASCII, "x" * 5000, "/" + "a" * 140_000, "-1", "1.5", "99999", "nope"])
           | st.lists(st.integers(0, 2) | st.sampled_from(["1", "gpu", "00:05:00"]), min_size=1, max_size=3)
           | st.dictionaries(st.text(max_size=3), st.integers(), min_size=1, max_size=2)
           | st.none() | st.floats(allow_nan=False) | st.text(min_size=1, max_size=20).map(lambda t: t + "٣"))
HUB_KEYS = ("display_name", "user_options", "_xsrf")  # the hub's own keys in a spawn request, and tornado's in forms
ANY = REFUSED | st.integers(-5, 5) | st.booleans() | st.text(max_size=10)


def refused_object(fields: tuple[str, ...], wrong: str) -> st.SearchStrategy:
    """Objects with one value every surface refuses (in a known field or under an unknown key), plus others."""
    known = st.dictionaries(st.sampled_from(fields), ANY, max_size=3)
    keys = st.text(min_size=1, max_size=70).filter(lambda k: k not in HUB_KEYS)
    return st.tuples(known, st.sampled_from([*fields, wrong]) | keys, REFUSED).map(
        lambda parts: {**parts[0], parts[1]: parts[2]})


def deep(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


SPEC_BODIES = st.one_of(
    refused_object(SPEC_FIELDS, "partition").map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=100).filter(lambda b: b.strip() not in (b"", b"{}")).map(lambda b: b"\xff" + b),
    st.sampled_from([b"", b"{}", b"  ", b"[]", b"null", b'"chexnet"', b"1" * 5000, deep(50), deep(20_000),
                     b'{"template": "chexnet", "epochs": ' + b"9" * 5000 + b"}", b" " * (65 * 1024) + b"{}"]),
)


@pytest.fixture(scope="module")
def alice_browser(hub):
    session = browser(hub, "alice")
    page = session.get(f"{hub.url}{PORTAL}submit", timeout=30)
    session.headers["X-XSRFToken"] = xsrf_of(page.text)
    return session


def assert_refused_naming_a_field(response: requests.Response, fields: tuple[str, ...], whole: str) -> str:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    assert response.status_code in (400, 413), (response.status_code, response.text[:500])
    body = response.json()
    field = body.get("field") or body.get("message", "").split(":", 1)[0]
    if response.status_code == 413:  # a body over portal.inputs.MAX_BODY_BYTES: refused whole, before any work
        assert field == "body" and body["error"].startswith("the request's body is "), body
        return field
    assert field in (*fields, whole) or re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", field), body
    message = body.get("error") or body.get("message")
    assert message.startswith(f"{field}: ") and len(message) < 600, message
    return field


def within_rate(send: Callable[[], requests.Response]) -> requests.Response:
    """A request as a polite client makes it: a 429 (the API's rate per user, dashboard_api_rate) is waited out as
    its Retry-After says, and asked again."""
    for _ in range(10):
        response = send()
        if response.status_code != 429:
            return response
        time.sleep(int(response.headers["Retry-After"]))
    return response


def refuse_each(requests_of: st.SearchStrategy, send: Callable[[Any], requests.Response], fields: tuple[str, ...],
                whole: str, what: str) -> None:
    """Send every generated request: each must be refused naming a field. Says how many went, and how fast."""
    started, count = time.monotonic(), 0

    @HTTP_SETTINGS
    @given(requests_of)
    def send_one(request: Any) -> None:
        nonlocal count
        count += 1
        assert_refused_naming_a_field(within_rate(lambda: send(request)), fields, whole)

    send_one()
    print(f"\n{count} {what} in {time.monotonic() - started:.1f} s")


def test_generated_job_specs_are_refused_with_a_field_and_submit_nothing(hub, alice_browser):
    refuse_each(SPEC_BODIES, lambda body: alice_browser.post(f"{hub.url}{PORTAL}api/jobs", data=body, timeout=60,
                                                             headers={"Content-Type": "application/json"}),
                SPEC_FIELDS, "spec", "job specs posted")
    assert jobs_of("alice") == []


FORM_VALUES = st.lists(st.binary(min_size=1, max_size=20).map(lambda b: b"\xff" + b)
                       | REFUSED.filter(lambda v: isinstance(v, str)).map(str.encode), min_size=1, max_size=2)


def test_generated_submit_forms_are_refused_with_the_field_shown_and_submit_nothing(hub, alice_browser):
    xsrf = alice_browser.headers["X-XSRFToken"]

    @settings(HTTP_SETTINGS, max_examples=max(1, EXAMPLES // 5))  # the same reader as the unit tests', 500 there
    @given(st.dictionaries(st.sampled_from(SPEC_FIELDS) | st.text(min_size=1, max_size=30).filter(
        lambda k: k not in HUB_KEYS), FORM_VALUES,
                           min_size=1, max_size=3))
    def post(fields: dict[str, list[bytes]]) -> None:
        body = "&".join(f"{requests.utils.quote(name)}={requests.utils.quote(value)}"
                        for name, values in fields.items() for value in values) + f"&_xsrf={xsrf}"
        response = alice_browser.post(f"{hub.url}{PORTAL}submit", data=body.encode(), allow_redirects=False,
                                      timeout=60, headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert response.status_code == 400, (response.status_code, response.text[-500:])
        assert 'id="error" data-field="' in response.text and "Traceback" not in response.text

    post()
    assert jobs_of("alice") == []


SPAWN_BODIES = refused_object(OPTION_FIELDS, "options")


def test_generated_spawn_options_are_refused_and_a_valid_spawn_still_works(hub, admin, alice):
    refuse_each(SPAWN_BODIES, lambda options: hub.api(admin, "POST", "users/alice/server", data=json.dumps(options)),
                OPTION_FIELDS, "options", "spawn requests")
    assert jobs_of("alice") == [] and hub.server(admin, "alice") is None
    # The options stored before the refusals stay (nothing stored yet: none), so a start without options works.
    response = hub.api(admin, "POST", "users/alice/server", data=json.dumps({"gpus": 0, "cpus": 1,
                                                                             "memory_gb": 1, "runtime": "00:05:00"}))
    assert response.status_code in (201, 202), response.text
    hub.wait_ready(admin, "alice")
    hub.stop(admin, "alice")
    stored = hub.api(admin, "GET", "users/alice?include_stopped_servers").json()["servers"][""]["user_options"]
    assert stored["runtime"] == "00:05:00", stored
    refused = hub.api(admin, "POST", "users/alice/server", data=json.dumps({"gpus": "٣"}))
    assert_refused_naming_a_field(refused, OPTION_FIELDS, "options")
    model = hub.api(admin, "GET", "users/alice?include_stopped_servers").json()["servers"][""]
    assert model["user_options"] == stored, "a refused request changed the stored options"
    again = hub.api(admin, "POST", "users/alice/server")  # no body: the stored options
    assert again.status_code in (201, 202), again.text
    hub.wait_ready(admin, "alice")
    hub.stop(admin, "alice")
    wait_for(lambda: jobs_of("alice") == [], 30, what="alice's server job to leave the queue")


def test_the_spawn_form_refuses_with_a_400_and_the_field(hub, admin, alice):
    response = hub.spawn_form(alice, gpus="٣")
    page = response.content.decode("utf-8")  # the hub names no charset: requests would guess Latin-1
    assert response.status_code == 400 and "gpus: &#39;٣&#39; is not a whole number" in page, page[-3000:]
    assert 'name="gpus"' in page and hub.server(admin, "alice") is None and jobs_of("alice") == []


def test_the_spawn_form_refuses_bytes_that_are_not_utf8_with_a_400(hub, admin, alice):
    """The hub decodes the form before the spawner sees it; portal.hub_pages checks the bytes first."""
    action = hub.client(alice).spawn_form_action()
    body = b"partition=batch&gpus=%FF%FE&cpus=1&memory_gb=1&runtime=00%3A10%3A00"
    response = alice.post(f"{hub.url}{action}", data=body, allow_redirects=False, timeout=60,
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
    text = response.content.decode("utf-8")
    assert response.status_code == 400 and "gpus:" in text and "not valid UTF-8" in text, text[-3000:]
    query = alice.get(f"{hub.url}/hub/spawn?gpus=%FF", allow_redirects=False, timeout=30)
    assert query.status_code == 400 and "not valid UTF-8" in query.content.decode("utf-8")
    assert hub.server(admin, "alice") is None and jobs_of("alice") == []
