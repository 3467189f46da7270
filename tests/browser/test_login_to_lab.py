"""A person's path in headless Chromium: log in as alice, choose one GPU, reach JupyterLab."""

import pytest

playwright = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture
def page(artifacts):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        yield page
        context.close()
        browser.close()


def test_alice_logs_in_chooses_a_gpu_and_reaches_jupyterlab(hub, admin, page, artifacts):
    try:
        page.goto(f"{hub.url}/hub/login")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "wonderland")
        page.click("input[type=submit], button[type=submit]")
        page.wait_for_url("**/hub/spawn**")
        page.screenshot(path=str(artifacts / "browser-1-spawn-form.png"), full_page=True)

        page.fill("input[name=gpus]", "1")
        page.click("form input[type=submit], form button[type=submit]")
        page.wait_for_url("**/user/alice/lab**", timeout=120_000)
        page.wait_for_selector(".jp-Launcher .jp-LauncherCard", timeout=60_000)
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=30_000)
        page.screenshot(path=str(artifacts / "browser-2-jupyterlab.png"))
        assert "JupyterLab" in page.title()
    finally:
        if hub.server(admin, "alice") is not None:
            hub.stop(admin, "alice")
