"""Accessibility and layout in headless Chromium, as alice: axe-core (WCAG 2.1 A/AA and best practice) finds no
serious or critical violation on any portal page nor on the hub's home, at 1280 and at 375 px wide, in the light
and the dark theme; nothing scrolls sideways at 375 px; the keyboard alone reaches the navigation and a job, and
cancels it. Screenshots go to tests/artifacts/a11y-<page>-<width>-<theme>.png, axe's results to axe-*.json.

Sized for 2 CPU cores: alice needs no server, and her one job waits in the queue behind a job holding every node,
so nothing trains while the pages are read.
"""

from __future__ import annotations

import pytest

from bench.hub_client import wait_for
from tests.browser.conftest import (
    NARROW,
    PORTAL,
    WIDE,
    focused,
    layout_problems,
    new_context,
    tab_until,
    unseen_focus,
)

pytestmark = pytest.mark.integration
PAGES = {"jobs": f"{PORTAL}jobs", "job": PORTAL + "jobs/{job}", "submit": f"{PORTAL}submit",
         "templates": f"{PORTAL}templates", "usage": f"{PORTAL}usage", "cluster": f"{PORTAL}cluster",
         "404": f"{PORTAL}no-such-page", "hub-home": "hub/home"}
VARIANTS = [(WIDE, "light"), (WIDE, "dark"), (NARROW, "light"), (NARROW, "dark")]


@pytest.mark.parametrize("viewport,theme", VARIANTS, ids=[f"{v['width']}-{t}" for v, t in VARIANTS])
def test_every_page_passes_axe_and_fits_its_width(hub, browser, alice_cookies, waiting_job, artifacts,
                                                   viewport, theme):
    context = new_context(browser, viewport, theme, alice_cookies)
    problems: list[str] = []
    try:
        page = context.new_page()
        for name, path in PAGES.items():
            label = f"{name}-{viewport['width']}-{theme}"
            response = page.goto(f"{hub.url}/{path.format(job=waiting_job)}")
            assert response.status == (404 if name == "404" else 200), f"{label}: {page.url}"
            assert page.get_attribute("html", "data-bs-theme") == theme, label
            problems += layout_problems(page, label, artifacts, f"a11y-{label}")
    finally:
        context.close()
    assert not problems, "\n".join(problems)


def test_at_375px_the_menu_button_opens_the_navigation_by_keyboard(hub, browser, alice_cookies):
    context = new_context(browser, NARROW, storage_state=alice_cookies)
    try:
        page = context.new_page()
        page.goto(f"{hub.url}/{PAGES['jobs']}")
        assert not page.is_visible("#portal-nav")  # folded behind the menu button
        stops = tab_until(page, lambda stop: "navbar-toggler" in stop["classes"], limit=10)
        assert not unseen_focus(stops), unseen_focus(stops)
        page.keyboard.press("Enter")
        page.wait_for_selector("#portal-nav", state="visible", timeout=5_000)
    finally:
        context.close()


def test_the_keyboard_alone_reaches_the_navigation_and_a_job_and_cancels_it(hub, browser, alice_cookies,
                                                                            waiting_job, artifacts):
    context = new_context(browser, WIDE, storage_state=alice_cookies)
    try:
        page = context.new_page()
        page.goto(f"{hub.url}/{PAGES['jobs']}")
        stops = tab_until(page, lambda stop: stop["tag"] == "a" and stop["job"] is not None)
        assert not unseen_focus(stops), unseen_focus(stops)
        assert "#portal-nav" in [f"#{stop['id']}" for stop in stops], stops  # the hub's navigation bar
        assert "Portal sections" in [stop["nav"] for stop in stops], stops
        assert stops[0]["href"] == "#main", f"the first stop is not a skip link: {stops[0]}"

        # The skip link passes the navigation: the same job link, fewer presses.
        page.reload()
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        assert (focused(page) or {}).get("id") == "main"
        skipped = tab_until(page, lambda stop: stop["tag"] == "a" and stop["job"] is not None)
        assert len(skipped) < len(stops) - 3, (skipped, stops)

        page.goto(f"{hub.url}/{PAGES['job'].format(job=waiting_job)}")
        assert page.text_content("#state").strip() in ("PENDING", "RUNNING")
        stops = tab_until(page, lambda stop: stop["form"] == "cancel")
        assert not unseen_focus(stops), unseen_focus(stops)
        page.screenshot(path=str(artifacts / "a11y-job-cancel-focused.png"))
        page.keyboard.press("Enter")
        page.wait_for_url(lambda url: not url.endswith(f"/jobs/{waiting_job}"))
        wait_for(lambda: shown_state(page, hub, waiting_job) == "CANCELLED", 60, interval=2,
                 what=f"job {waiting_job} shown CANCELLED")
    finally:
        context.close()


def shown_state(page, hub, job_id: str) -> str:
    page.goto(f"{hub.url}/{PAGES['job'].format(job=job_id)}")
    return page.text_content("#state").strip()

