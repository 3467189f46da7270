"""portal.js alone in headless Chromium: its refreshes against answers this test gives (Playwright's routes, no
box), for what the live pages cannot show on cue: a refresh that changes nothing leaves the page alone; one that
changes the rows keeps focus on the same link; an AUROC table the reader opened stays open; the log's
hidden-warnings count follows the `X-Log-Hidden` header; the XSRF token goes with every request; the submit
form's summary line says what the server would say of the fields as they are edited.
tests/browser/test_live_updates.py runs the same script against the real portal.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from playwright import sync_api as playwright

from portal.quota import GpuHolder, GpuQuota
from portal.records.budget import GpuBudget
from portal.records.limits import JobLimits
from portal.service.submit_form import form_summary, request_summary
from tests.browser.conftest import RECORD_NOTIFICATIONS, new_context

SCRIPT = Path(__file__).resolve().parents[2] / "portal" / "service" / "static" / "portal.js"
ORIGIN = "https://portal.test"  # a secure context, as a site serves the portal (answered here, never fetched)
TOKEN = "token-for-the-test"
PAGE = """<!DOCTYPE html><html lang="en"><head><title>t</title>
<script src="/portal.js"></script>
<script>window.jhdata = {{xsrf_token: "{token}"}};</script></head>
<body><main id="main">{body}</main></body></html>"""
# A row's cancel form carries the XSRF token, which the server signs with the time of each answer (Site.answer
# writes a new one into every rows answer, at SIGNED_TOKEN).
SIGNED_TOKEN = "SIGNED-TOKEN"
ROWS = """<table><tr data-job="{job}"><td><a href="/jobs/{job}">{job}</a></td><td>{state}</td>
<td><a href="/jobs/{job}/log">log</a></td><td><form method="post" action="/jobs/{job}/cancel">
<input type="hidden" name="_xsrf" value="SIGNED-TOKEN"><button type="submit">Cancel</button></form></td></tr></table>"""
FIGURES = """<div id="figures" data-state="RUNNING"><span id="epochs">{epochs}</span>
<details><summary>AUROC per class</summary><table><tr><td>Mass</td><td>0.{epochs}</td></tr></table></details></div>"""
JOB = """<div id="job" data-state="RUNNING" data-poll-s="0.3" data-live="1" data-figures-url="/jobs/7?part=figures"
data-log-url="/jobs/7/log?tail=40">{figures}
<input type="checkbox" id="show-framework"><label for="show-framework">Show framework warnings
<span id="log-hidden-note" hidden>(<span id="log-hidden">0</span> hidden)</span></label>
<pre id="log"></pre></div>"""


class Site:
    """The answers the page gets, changed by the test as it goes; every request's X-XSRFToken is kept."""

    def __init__(self, body: str):
        self.page_body, self.rows, self.figures, self.log, self.hidden = body, "", "", "", "0"
        self.jobs: list[dict] = []
        self.gpu_warnings: list[dict] = []  # the GPU watch's warnings of the user (portal.service.gpu_pages)
        self.tokens: list[str | None] = []
        self.jobs_asked = 0
        self.panel_tags: list[dict] = [{}]  # what TensorBoard's server says its runs have, one answer a look
        self.listings = self.panel_loads = 0

    def answer(self, route) -> None:
        request, path = route.request, route.request.url[len(ORIGIN):]
        if path == "/portal.js":
            route.fulfill(body=SCRIPT.read_text(), content_type="text/javascript")
        elif path.startswith("/tb/data/plugin/scalars/tags"):
            tags = self.panel_tags[min(self.listings, len(self.panel_tags) - 1)]
            self.listings += 1
            route.fulfill(body=json.dumps(tags), content_type="application/json")
        elif path.startswith("/tb/"):
            self.panel_loads += 1
            route.fulfill(body="<html><body>TensorBoard</body></html>", content_type="text/html")
        elif path.startswith("/page"):
            route.fulfill(body=PAGE.format(token=TOKEN, body=self.page_body), content_type="text/html")
        else:
            self.tokens.append(request.headers.get("x-xsrftoken"))
            if path.startswith("/api/gpus"):
                route.fulfill(body=json.dumps({"watched": True, "warnings": self.gpu_warnings, "history": []}),
                              content_type="application/json")
            elif path.startswith("/api/jobs"):
                self.jobs_asked += 1
                route.fulfill(body=json.dumps({"jobs": self.jobs}), content_type="application/json")
            elif "part=rows" in path:
                signed = f"2|1:0|10:{1795578329 + len(self.tokens)}|5:_xsrf"  # a second later each time
                route.fulfill(body=self.rows.replace(SIGNED_TOKEN, signed), content_type="text/html")
            elif "part=figures" in path:
                route.fulfill(body=self.figures, content_type="text/html")
            else:
                route.fulfill(body=self.log, content_type="text/plain", headers={"X-Log-Hidden": self.hidden})


@pytest.fixture
def site_page(browser):
    context = new_context(browser)
    page = context.new_page()

    def open_site(site: Site):
        page.route(f"{ORIGIN}/**", site.answer)
        page.goto(f"{ORIGIN}/page")
        return page

    yield open_site
    context.close()


def asked(site: Site, count: int, page) -> None:
    """Wait until the page has made `count` more refresh requests."""
    goal = len(site.tokens) + count
    for _ in range(100):
        if len(site.tokens) >= goal:
            return
        page.wait_for_timeout(100)
    pytest.fail(f"the page made {len(site.tokens) - goal + count} of {count} refreshes in 10 s")


def test_the_list_is_left_alone_when_unchanged_and_keeps_focus_when_it_changes(site_page):
    rows = ROWS.format(job=7, state="PENDING")
    site = Site(f'<div id="live-jobs" data-poll-s="0.3" data-rows-url="/jobs?part=rows">{rows}</div>')
    site.rows = rows
    page = site_page(site)
    page.focus('a[href="/jobs/7/log"]')
    page.evaluate("() => { document.querySelector('#live-jobs table').mark = 'first'; }")
    asked(site, 3, page)
    assert page.evaluate("() => document.querySelector('#live-jobs table').mark") == "first"

    site.rows = ROWS.format(job=7, state="RUNNING")
    page.wait_for_function("() => document.querySelector('#live-jobs')?.textContent.includes('RUNNING')")
    assert page.evaluate("() => document.querySelector('#live-jobs table').mark") is None  # replaced
    assert page.evaluate("() => document.activeElement.getAttribute('href')") == "/jobs/7/log"
    assert set(site.tokens) == {TOKEN}  # read when asked, though the script loads before jhdata is set


def test_an_opened_auroc_table_stays_open_and_the_hidden_count_follows_the_log(site_page):
    site = Site(JOB.format(figures=FIGURES.format(epochs=1)))
    site.figures, site.log, site.hidden = FIGURES.format(epochs=1), "epoch 1\n", "2"
    page = site_page(site)
    page.click("details summary")
    page.wait_for_function("() => document.getElementById('log')?.textContent === 'epoch 1\\n'")
    assert page.text_content("#log-hidden") == "2" and page.is_visible("#log-hidden-note")

    site.figures, site.log, site.hidden = FIGURES.format(epochs=2), "epoch 1\nepoch 2\n", "0"
    page.wait_for_function("() => document.getElementById('epochs')?.textContent === '2'")
    assert page.evaluate("() => document.querySelector('#figures details').open")
    page.wait_for_function("() => document.getElementById('log')?.textContent.includes('epoch 2')")
    assert page.is_hidden("#log-hidden-note")
    assert set(site.tokens) == {TOKEN}


SUBMIT_FORM = """<form id="submit_form"><input name="nodes" value="1"><input name="gpus_per_node" value="1">
<input name="cpus_per_task" value="4"><input name="memory_gb" value="16"><input name="time_limit" value="04:00:00">
<input type="radio" name="kind" id="kind-single" value="single" checked>
<input type="radio" name="kind" id="kind-sweep" value="sweep"><input name="sweep_trials" value="8">
</form><p id="request-summary" data-gpu-quota="4" data-gpus-in-use="1" data-budget="{budget}">as the server wrote
it</p>"""
BUDGET = GpuBudget(40, 34.5, "Sunday 29 November 00:00")  # the form's weekly GPU-hours left, as the page says them


def test_the_submit_forms_summary_follows_its_fields_in_the_servers_words(site_page):
    page = site_page(Site(SUBMIT_FORM.format(budget=html.escape(BUDGET.words()))))
    limits = JobLimits(partition="gpu", nodes=2, gpus_per_node=4, cpus_per_node=8, memory_gb_per_node=20,
                       max_minutes=None, quota=GpuQuota(4, (), (GpuHolder("4", 1, server=True),)),
                       default_data_dir="/data", budget=BUDGET)
    values = {"nodes": "1", "gpus_per_node": "1", "cpus_per_task": "4", "memory_gb": "16", "time_limit": "04:00:00"}
    for name, value in [("nodes", "2"), ("gpus_per_node", "0"), ("time_limit", "01:30:01"), ("memory_gb", "7"),
                        ("gpus_per_node", "3"), ("time_limit", "00:20:00"), ("nodes", "1"), ("gpus_per_node", "1")]:
        page.fill(f"input[name={name}]", value)
        values[name] = value
        assert page.text_content("#request-summary") == request_summary(values, limits), (name, value)
    page.check("#kind-sweep")  # a sweep costs each trial's most, times its trials
    assert page.text_content("#request-summary") == form_summary(values, limits, "sweep", {"sweep_trials": "8"})
    page.fill("input[name=sweep_trials]", "7")
    assert page.text_content("#request-summary") == form_summary(values, limits, "sweep", {"sweep_trials": "7"})
    page.check("#kind-single")
    assert page.text_content("#request-summary") == request_summary(values, limits)
    page.fill("input[name=nodes]", "two")  # not a value: the line stays as it was
    assert page.text_content("#request-summary") == request_summary(values, limits)


TOGGLE = """<button type="button" id="notify-toggle" hidden aria-pressed="false" data-user="alice"
data-jobs-url="/api/jobs" data-gpus-url="/api/gpus" data-gpus-page="/gpus" data-poll-s="0.3"
data-ended="CANCELLED COMPLETED FAILED TIMEOUT">Notify</button>"""


def a_job(job_id: str, user: str, state: str, auroc: float | None = None) -> dict:
    return {"id": job_id, "user": user, "state": state, "best_mean_auroc": auroc, "spec": {"model": "densenet121"},
            "links": {"page": f"/jobs/{job_id}"}}


def test_a_job_that_ends_or_idle_gpus_are_announced_once_and_only_after_the_user_asked(browser):
    context = new_context(browser)
    context.add_init_script(RECORD_NOTIFICATIONS)
    page = context.new_page()
    site = Site(TOGGLE)
    site.jobs = [a_job("7", "alice", "RUNNING"), a_job("9", "bob", "RUNNING")]
    try:
        page.route(f"{ORIGIN}/**", site.answer)
        page.goto(f"{ORIGIN}/page")
        page.wait_for_selector("#notify-toggle:not([hidden])")
        page.wait_for_timeout(1000)  # three poll periods: nothing is asked or read before the click
        assert page.evaluate("() => window.__asked()") == 0 and site.jobs_asked == 0
        page.click("#notify-toggle")
        page.wait_for_function("() => document.getElementById('notify-toggle')?.getAttribute('aria-pressed') "
                               "=== 'true'")
        asked_before = site.jobs_asked
        for _ in range(50):
            if site.jobs_asked >= asked_before + 2:
                break
            page.wait_for_timeout(100)
        assert page.evaluate("() => window.__notes()") == []  # the first look only learns the states

        # alice's job ends, and so does bob's (an admin's list holds everyone's): only hers is announced.
        site.jobs = [a_job("7", "alice", "COMPLETED", 0.8123), a_job("9", "bob", "COMPLETED", 0.5)]
        page.wait_for_function("() => (window.__notes?.() ?? []).length > 0")
        page.wait_for_timeout(1000)
        assert page.evaluate("() => window.__notes()") == [{
            "title": "Job 7 COMPLETED", "body": "densenet121, best mean AUROC 0.812. Click to open its page.",
            "tag": "dsportal-job-7"}]
        # Another page of the portal (or a reload) announces nothing again: the states are shared.
        page.reload()
        page.wait_for_timeout(1000)
        assert len(page.evaluate("() => window.__notes()")) == 1 and page.evaluate("() => window.__asked()") == 1
        assert page.get_attribute("#notify-toggle", "aria-pressed") == "true"
        # Her server's GPUs sit idle: announced once, with when it stops.
        site.gpu_warnings = [{"holder": "12", "server": True, "warned_at": 100.0, "idle_since": 40.0,
                              "deadline": 3700.0, "left_s": 1790.0}]
        page.wait_for_function("() => window.__notes().length > 1")
        page.wait_for_timeout(1000)
        assert page.evaluate("() => window.__notes()")[1:] == [{
            "title": "Your JupyterLab server's GPUs are idle", "body": "It stops in 30 min unless you keep it. "
            "Click to keep it.", "tag": "dsportal-gpu-12@100"}]
    finally:
        context.close()


def test_on_plain_http_the_toggle_says_that_notifications_need_https(browser):
    """Browsers give notifications only to a secure context: on http (not localhost) the toggle says why it is off."""
    context = new_context(browser)
    page = context.new_page()
    plain = ORIGIN.replace("https://", "http://", 1)

    def answer(route) -> None:
        if route.request.url.endswith("/portal.js"):
            route.fulfill(body=SCRIPT.read_text(), content_type="text/javascript")
        else:
            route.fulfill(body=PAGE.format(token=TOKEN, body=TOGGLE), content_type="text/html")
    try:
        page.route(f"{plain}/**", answer)
        page.goto(f"{plain}/page")
        assert page.evaluate("() => window.isSecureContext") is False
        toggle = page.locator("#notify-toggle")
        playwright.expect(toggle).to_be_disabled()
        assert toggle.is_visible() and toggle.text_content() == "Notifications need this portal on https"
    finally:
        context.close()


PANEL = ('<iframe class="tensorboard" data-look-s="0.2" src="/tb/?runFilter=%5Eq%2F7%2F'
         '&tagFilter=%5E(throughput%2Fimages_per_sec%7Cauroc%2Fmean)%24#timeseries"></iframe>')
NONE: dict = {}
THROUGHPUT = {"q/7/tensorboard": {"throughput/images_per_sec": {}, "loss/train": {}},
              "q/71/tensorboard": {"auroc/mean": {}}}  # another job's run: not the panel's
BOTH = {"q/7/tensorboard": {"throughput/images_per_sec": {}, "auroc/mean": {}, "loss/train": {}}}


@pytest.mark.parametrize(("answers", "loads"), [([BOTH], 1), ([NONE, NONE, THROUGHPUT, THROUGHPUT, BOTH], 3),
                                                 ([THROUGHPUT, THROUGHPUT, BOTH], 2)])
def test_the_panel_is_loaded_again_when_its_run_has_charts_it_did_not_show(site_page, answers, loads):
    """TensorBoard takes the charts it shows when its page loads: loaded before the run has written them, it shows
    the time series as inactive, or some charts only. The job page asks TensorBoard's server (the same origin)
    which of the panel's tags the panel's runs have, and loads the panel again each time there are more; a panel
    that had them all is left alone, and another job's run does not count."""
    site = Site(PANEL)
    site.panel_tags = answers
    page = site_page(site)
    for _ in range(100):
        if site.listings > len(answers) + 2:
            break
        page.wait_for_timeout(100)
    assert site.panel_loads == loads
    assert page.frame_locator("iframe.tensorboard").locator("body").text_content() == "TensorBoard"
