"""Every HTML page of the dashboard under its Content-Security-Policy, in headless Chromium, as alice: no
violation reported (the document's `securitypolicyviolation` events, the console's CSP errors), no script error,
the hub's inline script ran (with the response's nonce), and each answer carries the policy with a nonce that
every inline <script>/<style> of its body has. Screenshots: tests/artifacts/csp-<page>.png.

The pages come from the dashboard's route table (portal.service.app.ROUTES: every handler that renders pages and
answers GET), so a page added there is visited here without a change; the parts a page fetches again while open
(its data-*-url attributes: the jobs list's rows, a job's figures and log) are loaded as documents too, so that
what the live updates put in a page is held to the same policy. Also the 404 page (the app's default handler) and
the submit form shown again with an error.
"""

from __future__ import annotations

import re
from urllib.parse import urljoin

import pytest
from playwright import sync_api as playwright
from tornado.web import RequestHandler

from portal.service.app import JOB_ID, ROUTES
from portal.service.base import PageRendering
from portal.service.mlflow_proxy import MlflowProxyHandler
from tests.browser.conftest import PORTAL, RECORD_VIOLATIONS, WAITING_FORM, new_context, screenshot

pytestmark = pytest.mark.integration
# The URLs a page's script fetches again while it is open (data-rows-url, data-figures-url, data-log-url, ...).
LIVE_PARTS = """() => [...document.querySelectorAll("*")].flatMap(
  (el) => Object.entries(el.dataset).filter(([key]) => key.endsWith("Url")).map(([, url]) => url))"""
INLINE = re.compile(r"<(?:script|style)\b(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
NONCE = re.compile(r"script-src 'self' 'nonce-([A-Za-z0-9_-]{22,})'")


def dashboard_pages(job_id: str) -> dict[str, str]:
    """Every page of the route table that answers GET (not the JSON API, not the OAuth callback, not MLflow's pages
    through the dashboard: MLflow's, under their own policy), with alice's job's id where the route takes one; and
    the 404 page."""
    pages = {}
    for path, handler in ROUTES:
        if issubclass(handler, PageRendering) and handler.get is not RequestHandler.get \
                and not issubclass(handler, MlflowProxyHandler):
            pages[path.replace(JOB_ID, "{job}") or "home"] = PORTAL + path.replace(JOB_ID, job_id)
    assert {"jobs", "jobs/{job}", "submit"} <= set(pages), pages  # the route table is read as it is meant to be
    pages["not-found"] = f"{PORTAL}no-such-page"
    return pages


class Watched:
    """One browser page, with what the browser reported on it."""

    def __init__(self, page: playwright.Page):
        self.page, self.console, self.errors = page, [], []
        page.on("console", lambda message: self.console.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def problems(self, label: str) -> list[str]:
        """The violations, CSP console errors and script errors so far (then forgotten)."""
        self.page.wait_for_load_state("networkidle")  # a violation's event is dispatched after the fact
        found = [f"{label}: {v}" for v in self.page.evaluate("() => window.__violations || []")]
        found += [f"{label}: console: {text}" for text in self.console if "Content Security Policy" in text]
        found += [f"{label}: script error: {text}" for text in self.errors]
        self.console.clear()
        self.errors.clear()
        return found


def checked(watched: Watched, response: playwright.Response | None, label: str, full_page: bool) -> list[str]:
    """The answer's policy and nonce, then what the browser reported."""
    assert response is not None, label
    policy = response.headers.get("content-security-policy", "")
    assert "frame-ancestors 'none'" in policy, (label, policy)
    problems = []
    if response.headers.get("content-type", "").startswith("text/html"):
        nonce = NONCE.search(policy)
        assert nonce and "default-src 'self'" in policy, (label, policy)
        inline = INLINE.findall(response.text())
        unnonced = [tag for tag in inline if f'nonce="{nonce.group(1)}"' not in tag]
        if unnonced:
            problems.append(f"{label}: inline elements without this response's nonce: {unnonced}")
        if full_page:  # the hub's inline script (window.jhdata) ran: the nonce let it, not just nobody complained
            assert len(inline) >= 2 and watched.page.evaluate("() => typeof window.jhdata") == "object", label
    return problems + watched.problems(label)


def test_every_dashboard_page_runs_under_its_policy_without_a_violation(hub, browser, alice_cookies, waiting_job,
                                                                         artifacts):
    context = new_context(browser, storage_state=alice_cookies)
    context.add_init_script(RECORD_VIOLATIONS)
    problems: list[str] = []
    visited: list[str] = []
    try:
        watched = Watched(context.new_page())
        page = watched.page
        for name, path in dashboard_pages(waiting_job).items():
            response = page.goto(f"{hub.url}/{path}")
            label = f"{name} ({page.url.removeprefix(hub.url)})"
            visited.append(label)
            screenshot(page, artifacts / f"csp-{name.replace('/', '-').replace('{', '').replace('}', '')}.png")
            full_page = "text/html" in (response.headers.get("content-type", "") if response else "")
            problems += checked(watched, response, label, full_page)
            for part in dict.fromkeys(page.evaluate(LIVE_PARTS)):  # fetched again by the open page
                part_url = urljoin(page.url, part)
                response = page.goto(part_url)
                problems += checked(watched, response, f"{name} live part {part}", full_page=False)
                page.goto(f"{hub.url}/{path}")  # back, for the next part's relative URL
                problems += watched.problems(f"{name} again")
        # The submit form again, with what was wrong beside its fields (a page of its own: 400).
        page.goto(f"{hub.url}/{PORTAL}submit")
        for field, value in WAITING_FORM.items():
            page.fill(f"#submit_form input[name={field}]", value)
        page.fill("#submit_form input[name=epochs]", "0")
        with page.expect_navigation() as shown:
            page.click("#submit_form button[type=submit]")
        assert shown.value.status == 400, shown.value.status
        screenshot(page, artifacts / "csp-submit-refused.png")
        problems += checked(watched, shown.value, "submit refused", full_page=True)
    finally:
        context.close()
    assert not problems, "\n".join(problems + ["visited: " + ", ".join(visited)])

