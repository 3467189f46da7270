"""A person's path in headless Chromium: log in as alice, choose one GPU, reach JupyterLab."""

from tests.browser.conftest import log_in


def test_alice_logs_in_chooses_a_gpu_and_reaches_jupyterlab(hub, admin, page, artifacts):
    try:
        log_in(page, hub, "alice", "wonderland")
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
