"""An idle server's warning as its user sees it in Chromium on the Slurm box (docs/gpus.md), with the test box's
short settings (the watched group is warned after 10 s of idle GPUs, stopped 10 s later): bob's server holds a GPU
and does nothing; the portal's GPUs page shows the warning with the time left and "Keep it", whose click keeps it
(the page says so, the warning is gone). Screenshots: tests/artifacts/gpus-warning.png, gpus-kept.png."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
from playwright import sync_api as playwright

from tests.browser.conftest import PORTAL, log_in, new_context
from tests.conftest import PASSWORDS, TEST_SETTINGS, WATCHED_GROUP, jobs_of, page_error, wait_for
from tests.integration.helpers import accounts, in_group, portal_client

pytestmark = pytest.mark.integration
EVERY_S, IDLE_S = TEST_SETTINGS["gpu_read_every_s"], TEST_SETTINGS["gpu_idle_s"][WATCHED_GROUP]
WARNED_WITHIN_S = IDLE_S + 3 * EVERY_S + 30


def test_an_idle_servers_warning_shows_on_the_gpus_page_and_keep_it_keeps_it(cluster, hub, admin, browser,
                                                                             artifacts):
    with ExitStack() as undo:
        undo.enter_context(in_group(cluster, WATCHED_GROUP, ("bob",), gid=10199))
        undo.enter_context(in_group(cluster, "gpu-users", ("bob",)))
        undo.callback(lambda: accounts(cluster, "sync"))
        undo.callback(lambda: wait_for(lambda: not jobs_of("bob"), 60, what="bob's server to end"))
        undo.callback(lambda: hub.server(admin, "bob") and hub.stop(admin, "bob"))
        assert accounts(cluster, "sync").returncode == 0
        spawned = hub.spawn_form(hub.login("bob"), partition="gpu", gpus=1, cpus=1, memory_gb=2, runtime="01:00:00")
        assert spawned.status_code == 302, page_error(spawned)
        context = new_context(browser)  # logged in while the server starts and idles
        undo.callback(context.close)
        page = context.new_page()
        log_in(page, hub, "bob", PASSWORDS["bob"])
        page.wait_for_url(lambda url: "/hub/login" not in url)
        hub.wait_ready(admin, "bob")
        keep = page.get_by_role("button", name="Keep it")

        def warned() -> bool:  # the page itself, as bob reloads it: its grace is short, so no time is lost between
            try:
                page.goto(f"{hub.url}/{PORTAL}gpus")
            except playwright.Error as err:  # the hub's spawn-pending page moving on to his lab, as his server
                if "interrupted by another navigation" not in str(err):  # became ready: ask again
                    raise
                return False
            return keep.count() > 0
        wait_for(warned, WARNED_WITHIN_S, interval=1, what="bob's warning on the GPUs page")
        playwright.expect(keep).to_be_visible()
        page.screenshot(path=str(artifacts / "gpus-warning.png"), full_page=True)
        keep.click()
        playwright.expect(page.locator("#kept")).to_contain_text("idle clock starts again")
        page.screenshot(path=str(artifacts / "gpus-kept.png"), full_page=True)
        client = portal_client(hub, "bob")
        history = client.get(f"{client.base}gpus", timeout=30).json()["history"]
        assert history[0]["act"] == "keep" and history[0]["user"] == "bob", history[:2]
