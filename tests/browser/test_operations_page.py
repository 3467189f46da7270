"""The admins' Operations page in headless Chromium (docs/operations.md): drawn on the Slurm test box from its own
Prometheus, every chart an SVG with words for a screen reader, no serious axe-core violation, nothing scrolling
sideways at 375 px, in the light and the dark theme. Screenshots: tests/artifacts/operations-<width>-<theme>.png."""

from __future__ import annotations

import pytest

from deploy import prometheus_server
from portal import prometheus_access
from tests.browser.conftest import (
    NARROW,
    PORTAL,
    WIDE,
    layout_problems,
    log_in,
    new_context,
)
from tests.conftest import PASSWORDS, wait_for

pytestmark = pytest.mark.integration


def test_the_admins_operations_page_draws_prometheus_charts_readably(cluster, hub, browser, artifacts):
    base = prometheus_access.url(cluster)
    wait_for(lambda: prometheus_server.targets_up(prometheus_access.box_dir(cluster), base) == {"hub": 1.0,
                                                                                              "portal": 1.0},
             90, what="the box's Prometheus to read both targets")
    context = new_context(browser)
    problems: list[str] = []
    try:
        page = context.new_page()
        log_in(page, hub, "admin", PASSWORDS["admin"])
        page.wait_for_url(lambda url: "/hub/login" not in url)
        admin = context.storage_state()
    finally:
        context.close()
    for viewport, theme in ((WIDE, "light"), (NARROW, "dark")):
        label = f"operations-{viewport['width']}-{theme}"
        context = new_context(browser, viewport, theme, admin)
        try:
            page = context.new_page()
            assert page.goto(f"{hub.url}/{PORTAL}operations").status == 200
            assert page.locator("#operations-error").count() == 0
            scraped = page.locator("#operations-charts svg.curves").first
            assert (scraped.get_attribute("aria-label") or "").startswith("Targets scraped for 2 series"), label
            assert scraped.is_visible()
            problems += layout_problems(page, label, artifacts, label)
        finally:
            context.close()
    assert not problems, "\n".join(problems)
