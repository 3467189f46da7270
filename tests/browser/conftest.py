"""Headless Chromium (Debian's, driven by Playwright) for the browser tests; screenshots go to tests/artifacts.

Also alice's logged-in cookies and a job of hers that waits in the queue (module fixtures), and the
accessibility tools the tests share: axe-core (installed from npm by deploy/local/install.sh into the node
prefix, injected into the page from disk: no CDN), the two widths the pages must read at, the dark theme, and a
keyboard walk.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api as playwright

from portal.config import load
from portal.jobs.demo_data import ensure_demo_data
from tests.conftest import end_job, every_node_held_by_a_job

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"]
WIDE = {"width": 1280, "height": 900}
NARROW = {"width": 375, "height": 812}  # a phone
THEMES = ("light", "dark")
THEME_KEY = "jupyterhub-bs-theme"  # where the hub's darkmode.js keeps the choice (same origin: hub and portal)
PORTAL = "services/portal/"
# A job for the pages to show that never trains here: it waits behind a job holding every node (waiting_job).
WAITING_FORM = {"gpus_per_node": "1", "cpus_per_task": "1", "memory_gb": "4", "epochs": "50", "batch_size": "8",
                "image_size": "64", "time_limit": "00:20:00"}
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
FAILING_IMPACTS = ("serious", "critical")
# Moderate rules held to all the same: two regions with one name (say, two "scrollable table"s) are one to a
# screen reader's list of landmarks.
FAILING_RULES = ("landmark-unique",)
# TensorBoard's frame is a third party's page (and has no axe in it): the portal answers for its own pages.
AXE_EXCLUDE = ["iframe.tensorboard"]
AXE_RUN = """async ([tags, exclude]) => {
  const result = await axe.run({exclude: exclude.map((selector) => [selector])},
                               {runOnly: {type: "tag", values: tags}, iframes: false, resultTypes: ["violations"]});
  return {url: result.url, timestamp: result.timestamp, testEngine: result.testEngine,
          violations: result.violations, incomplete: result.incomplete};
}"""
# What the focused element is and whether a person can see where focus is: its own ring (outline or Bootstrap's
# box-shadow) on a box with a size.
FOCUSED = r"""() => {
  const el = document.activeElement;
  if (!el || el === document.body || el === document.documentElement) { return null; }
  const style = getComputedStyle(el), box = el.getBoundingClientRect(), nav = el.closest("nav");
  const row = el.closest("[data-job]");
  return {tag: el.tagName.toLowerCase(), id: el.id, href: el.getAttribute("href"),
          classes: (el.getAttribute("class") || "").split(/\s+/),
          text: (el.getAttribute("aria-label") || el.innerText || el.value || "").trim().slice(0, 60),
          nav: nav ? (nav.getAttribute("aria-label") || nav.className || "nav") : null,
          form: el.form ? el.form.id : null, job: row ? row.dataset.job : null,
          ring: (style.outlineStyle !== "none" && parseFloat(style.outlineWidth) > 0) || style.boxShadow !== "none",
          shown: box.width > 0 && box.height > 0, focus_visible: el.matches(":focus-visible")};
}"""

# The outermost elements past the right edge of the viewport that widen the page: not those a box that scrolls or
# clips holds in (an absolutely placed element escapes such a box unless it is placed within it, as Bootstrap's
# .visually-hidden does in a .table-responsive without position: relative).
STICKING_OUT = r"""(tolerance) => {
  const edge = window.innerWidth + tolerance, top = [document.body, document.documentElement];
  const past = (el) => el.getBoundingClientRect().right > edge;
  const scrolls = (el) => ["auto", "scroll", "hidden", "clip"].includes(getComputedStyle(el).overflowX);
  const held = (el) => {
    const position = getComputedStyle(el).position;
    if (position === "fixed") { return false; }
    let p = position === "absolute" ? el.offsetParent : el.parentElement;
    for (; p && !top.includes(p); p = p.parentElement) { if (scrolls(p)) { return true; } }
    return false;
  };
  const widens = (el) => el && !top.includes(el) && past(el) && !held(el);
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
                       + [...el.classList].slice(0, 3).map((c) => "." + c).join("");
  return [...document.body.querySelectorAll("*")].filter((el) => widens(el) && !widens(el.parentElement))
    .slice(0, 5).map(name).join(", ") || "(none found)";
}"""



@pytest.fixture
def page(artifacts):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        context = browser.new_context(viewport=WIDE)
        page = context.new_page()
        yield page
        context.close()
        browser.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[playwright.Browser]:
    """One Chromium for a module whose tests open many contexts (widths, themes)."""
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield browser
        browser.close()


def log_in(page, hub, user: str, password: str) -> None:
    """The hub's login form, as a person fills it in."""
    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("input[type=submit], button[type=submit]")


def wait_for_job_state(page, states: Iterable[str], timeout_s: float) -> str:
    """Wait until the job page's #state reads one of `states`, and return it. The page reloads itself when the job's
    state changes, so this is Playwright's retrying expect on a locator, read afresh in whichever document is there,
    never a predicate evaluated in one document (which throws when it runs between two)."""
    state = page.locator("#state")
    alternatives = "|".join(re.escape(s) for s in sorted(states))
    playwright.expect(state).to_have_text(re.compile(f"^({alternatives})$"), timeout=timeout_s * 1000)
    return state.text_content()


def new_context(browser: playwright.Browser, viewport: dict[str, int] = WIDE, theme: str = "light",
                storage_state: dict | None = None) -> playwright.BrowserContext:
    """A browser context at a width, in a theme (stored as the hub's toggle stores it, before any page script
    runs), with a logged-in person's cookies. Reduced motion: focus rings are read at once, not mid-transition."""
    if theme not in THEMES:
        raise ValueError(f"theme is {theme!r}; allowed: {', '.join(THEMES)}")
    context = browser.new_context(viewport=viewport, color_scheme=theme, reduced_motion="reduce",
                                  storage_state=storage_state)
    context.add_init_script(f"try {{ localStorage.setItem({THEME_KEY!r}, {theme!r}); }} catch (e) {{}}")
    return context


def axe_script() -> Path:
    script = load().node_prefix / "node_modules" / "axe-core" / "axe.min.js"
    if not script.is_file():
        pytest.fail(f"{script} is missing: deploy/local/install.sh (make install) installs axe-core")
    return script


def axe_problems(page, name: str, artifacts: Path) -> list[str]:
    """axe-core's WCAG 2.1 A/AA and best-practice rules on the page as it is; the result is saved to
    artifacts/axe-<name>.json. Returns one line per serious or critical violation, or one of FAILING_RULES
    (rule, help, where)."""
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        # Evaluated through the browser's debugging protocol, which the page's CSP does not govern; a <script>
        # tag added to the page (add_script_tag) is inline code without the page's nonce: refused.
        page.evaluate(axe_script().read_text())
    result = page.evaluate(AXE_RUN, [AXE_TAGS, AXE_EXCLUDE])
    (artifacts / f"axe-{name}.json").write_text(json.dumps(result, indent=1))
    return [describe(name, violation) for violation in result["violations"]
            if violation["impact"] in FAILING_IMPACTS or violation["id"] in FAILING_RULES]


def describe(name: str, violation: dict[str, Any]) -> str:
    nodes = violation["nodes"]
    targets = ", ".join(" ".join(node["target"]) for node in nodes[:5]) + (" ..." if len(nodes) > 5 else "")
    why = (nodes[0].get("failureSummary") or "").replace("\n", " ")[:200] if nodes else ""
    return (f"{name}: {violation['id']} ({violation['impact']}, {len(nodes)} element(s)): {violation['help']} "
            f"at {targets}. {why}")


def axe_check(page, name: str, artifacts: Path) -> None:
    """axe_problems, failing the test on any."""
    problems = axe_problems(page, name, artifacts)
    assert not problems, "\n".join(problems)


def horizontal_overflow(page, tolerance: int = 2) -> str | None:
    """How far the page is wider than the viewport (it scrolls sideways) and the outermost elements that stick
    out, or None when it fits."""
    width = page.evaluate("() => document.documentElement.scrollWidth")
    viewport = page.viewport_size["width"]
    if width <= viewport + tolerance:
        return None
    return f"{width - viewport} px wider than {viewport} px; sticking out: {page.evaluate(STICKING_OUT, tolerance)}"


def focused(page) -> dict[str, Any] | None:
    return page.evaluate(FOCUSED)


def tab_until(page, reached: Callable[[dict[str, Any]], bool], limit: int = 60) -> list[dict[str, Any]]:
    """Press Tab as a keyboard user does, from wherever focus is, until `reached(the focused element)`; every stop
    on the way, the last one being it. Fails naming the stops when `limit` presses do not get there."""
    stops: list[dict[str, Any]] = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        stop = focused(page)
        if stop is None:
            continue
        stops.append(stop)
        if reached(stop):
            return stops
    pytest.fail(f"{limit} presses of Tab did not reach it; stops: {[s['text'] or s['tag'] for s in stops]}")


def unseen_focus(stops: list[dict[str, Any]]) -> list[str]:
    """The stops where a person could not see where focus is."""
    return [f"{s['tag']}#{s['id']} {s['text']!r}" for s in stops
            if not (s["shown"] and s["ring"] and s["focus_visible"]) and s["tag"] != "iframe"]


@pytest.fixture(scope="module")
def alice_cookies(hub, browser) -> dict:
    """alice's cookies for the hub and the portal (its OAuth login done once), for every context the tests open."""
    context = new_context(browser)
    page = context.new_page()
    log_in(page, hub, "alice", "wonderland")
    page.wait_for_url(lambda url: "/hub/login" not in url)
    page.goto(f"{hub.url}/{PORTAL}jobs")
    page.wait_for_url(f"**/{PORTAL}jobs")
    state = context.storage_state()
    context.close()
    return state


@pytest.fixture(scope="module")
def waiting_job(cluster, hub, browser, alice_cookies, artifacts):
    """alice's job, submitted from the dashboard's form; it waits (PENDING) behind a job holding every node."""
    ensure_demo_data(cluster)
    submitted: list[str] = []
    with every_node_held_by_a_job(seconds=900):
        try:
            submit_from_the_form(browser, hub, alice_cookies, submitted)
            yield submitted[0]
        finally:
            for job_id in submitted:
                end_job(job_id)


def submit_from_the_form(browser, hub, cookies: dict, submitted: list[str]) -> None:
    """WAITING_FORM through the dashboard's submit form; the new job's id is appended to `submitted`."""
    context = new_context(browser, storage_state=cookies)
    try:
        page = context.new_page()
        page.goto(f"{hub.url}/{PORTAL}submit")
        for name, value in WAITING_FORM.items():
            page.fill(f"#submit_form input[name={name}]", value)
        page.click("#submit_form button[type=submit]")
        page.wait_for_url(re.compile(r".*/services/portal/jobs/\d+$"))
        submitted.append(page.url.rsplit("/", 1)[1])
    finally:
        context.close()


# Before any script of a page: the Content-Security-Policy violations the browser reports in it, kept for a test
# to read (window.__violations: one line each).
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__violations.push(`${e.effectiveDirective} blocked ${e.blockedURI || "(inline)"} at ${e.sourceFile}:`
                           + `${e.lineNumber} ${e.sample}`);
}, true);
"""

# The browser's Notification API, recorded in localStorage (kept across the page loads of one origin): what the
# pages showed, and how often they asked for permission. A browser keeps a granted permission the same way.
RECORD_NOTIFICATIONS = """
window.__notes = () => JSON.parse(localStorage.getItem("test-notes") || "[]");
window.__asked = () => Number(localStorage.getItem("test-asked") || "0");
window.Notification = class {
  constructor(title, options) {
    localStorage.setItem("test-notes", JSON.stringify(
      window.__notes().concat([{title: title, body: options.body, tag: options.tag}])));
  }
  static requestPermission() {
    localStorage.setItem("test-asked", String(window.__asked() + 1));
    localStorage.setItem("test-permission", "granted");
    window.Notification.permission = "granted";
    return Promise.resolve("granted");
  }
  close() {}
};
window.Notification.permission = localStorage.getItem("test-permission") || "default";
"""


def screenshot(page: playwright.Page, path: Path, most: int = 2400) -> None:
    """The whole page, cut at `most` px high (a long job list goes on for thousands)."""
    height = min(page.evaluate("() => document.documentElement.scrollHeight"), most)
    page.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": page.viewport_size["width"],
                                                          "height": max(height, 1)})


def layout_problems(page, label: str, artifacts: Path, shot: str) -> list[str]:
    """The page as it is, saved as artifacts/<shot>.png, then what axe-core finds in it and whether it scrolls
    sideways: one line per problem."""
    screenshot(page, artifacts / f"{shot}.png")
    problems = axe_problems(page, label, artifacts)
    overflow = horizontal_overflow(page)
    return problems + ([f"{label}: the page scrolls sideways: {overflow}"] if overflow else [])
