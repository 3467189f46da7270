"""The dashboard's live updates in headless Chromium, as alice: the jobs list and a job's page fetch their parts
again by themselves (portal.js), with the XSRF token the hub's OAuth asks of a script's cookie request, and are
answered; and when the portal no longer takes her login, the page stops and says so instead of following the
refusal round the hub's OAuth (each round a new token, until Chromium gives up with "too many redirects").

Sized for 2 CPU cores: alice needs no server, and her one job waits in the queue (tests.browser.conftest).
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import PORTAL, new_context

pytestmark = pytest.mark.integration
POLLS_MS = 30_000  # a few poll periods (portal.service.app.MIN_POLL_S and up)
PARTS = {"jobs": ("jobs", "part=rows"), "job": ("jobs/{job}", "part=figures")}
AUTHORIZE = "/hub/api/oauth2/authorize"


@pytest.fixture
def alice_page(hub, browser, alice_cookies):
    context = new_context(browser, storage_state=alice_cookies)
    page = context.new_page()
    answered: list[str] = []  # requests that were sent and answered (Chromium lists the one a redirect names too)
    page.on("response", lambda response: answered.append(response.url))
    yield page, answered
    context.close()


@pytest.mark.parametrize("name", PARTS)
def test_a_page_fetches_its_live_part_with_the_token_and_gets_it(hub, alice_page, waiting_job, name):
    page, answered = alice_page
    path, part = PARTS[name]
    page.goto(f"{hub.url}/{PORTAL}{path.format(job=waiting_job)}")
    with page.expect_response(lambda response: part in response.url, timeout=POLLS_MS) as poll:
        pass
    response = poll.value
    assert response.request.header_value("x-xsrftoken") == page.evaluate("window.jhdata.xsrf_token")
    assert response.status == 200, f"{response.url}: {response.status} {response.headers.get('location', '')}"
    assert page.locator("#live-stopped").is_hidden()
    assert not [url for url in answered if AUTHORIZE in url]


def test_a_refused_update_stops_the_page_with_a_note_not_a_redirect_loop(hub, alice_page, waiting_job):
    page, answered = alice_page
    page.goto(f"{hub.url}/{PORTAL}jobs")
    page.context.clear_cookies(name="service-portal")  # the portal's login, as when it has run out
    page.locator("#live-stopped").wait_for(state="visible", timeout=POLLS_MS)
    assert "log in again" in page.text_content("#live-stopped")
    assert not [url for url in answered if AUTHORIZE in url], "a script's refused request went to the hub's OAuth"
    polls = len([url for url in answered if "part=rows" in url])
    poll_ms = 1000 * float(page.get_attribute("#live-jobs", "data-poll-s"))
    page.wait_for_timeout(2 * poll_ms + 2000)  # two poll periods more: none is asked once stopped
    assert len([url for url in answered if "part=rows" in url]) == polls
    page.click("#live-stopped a")  # reload: a navigation logs in again through OAuth
    page.wait_for_url(f"**/{PORTAL}jobs")
    assert page.locator("#live-stopped").is_hidden()
