"""The operators' metrics on the Slurm test box (docs/operations.md): the token of the site's Prometheus (the
test box's hub registers this session's, `metrics_token_file`) reads the hub's /hub/metrics and the portal's own,
per group without users' names, and nothing else of the dashboard; a user's token does not read them. The box's own
Prometheus reads both with it, answers nobody without its reader's password, and the admins' Operations page draws
its charts."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import requests

from deploy import prometheus_server
from portal import prometheus_access
from tests.conftest import TEST_SETTINGS
from tests.integration.helpers import PORTAL, portal_client

pytestmark = pytest.mark.integration


def test_the_sites_prometheus_reads_the_hubs_metrics_and_the_portals_and_nothing_else(cluster, hub):
    token = Path(TEST_SETTINGS["metrics_token_file"]).read_text().strip()
    bearer = {"Authorization": f"Bearer {token}"}  # as Prometheus' `authorization` sends it
    portal = hub.get(f"{PORTAL}metrics", headers=bearer, timeout=30)
    assert portal.status_code == 200 and portal.headers["Content-Type"].startswith("text/plain"), portal.text
    assert 'dsportal_scheduler_up{scheduler="slurm"} 1.0' in portal.text
    assert "# TYPE dsportal_gpu_held_seconds_total counter" in portal.text and 'user="' not in portal.text
    hubs = hub.get("/hub/metrics", headers=bearer, timeout=30)
    assert hubs.status_code == 200 and "jupyterhub_running_servers" in hubs.text
    for path in ("api/jobs", "jobs", "api/usage"):  # a service's token is no user's
        assert hub.get(f"{PORTAL}{path}", headers=bearer, timeout=30, allow_redirects=False).status_code == 403
    alice = portal_client(hub, "alice")
    refused = alice.get(f"{hub.url}{PORTAL}metrics", timeout=30)
    assert refused.status_code == 403 and "read:metrics" in refused.json()["error"]


def test_the_boxs_prometheus_scrapes_the_hub_and_the_portal_and_draws_the_admins_operations_page(cluster, hub):
    base = prometheus_access.url(cluster)
    assert requests.get(f"{base}/api/v1/query", params={"query": "up"}, timeout=10).status_code == 401
    assert requests.get(f"{base}/graph", timeout=10).status_code == 401  # its UI too: nothing without the password
    deadline, up = time.monotonic() + 90, {}
    while time.monotonic() < deadline:  # its first scrape comes within SCRAPE_S of its start
        up = prometheus_server.targets_up(prometheus_access.box_dir(cluster), base)
        if up == {"hub": 1.0, "portal": 1.0}:
            break
        time.sleep(2)
    assert up == {"hub": 1.0, "portal": 1.0}, f"the box's Prometheus reads its targets as {up} (1: read)"
    page = portal_client(hub, "admin").get(f"{hub.url}{PORTAL}operations", timeout=60)
    assert page.status_code == 200, page.text
    charts = re.findall(r'<svg class="curves"[^>]* aria-label="([^"]*)"', page.text)
    scraped = next(label for label in charts if label.startswith("Targets scraped for 2 series"))
    assert re.search(r"hub: \d+ values?, last 1 at minutes since", scraped), scraped
    assert re.search(r"portal: \d+ values?, last 1 at minutes since", scraped), scraped
    assert any(label.startswith("Servers running (the hub) for 1 series") for label in charts), charts
    assert 'id="operations-error"' not in page.text and "chart-error" not in page.text, page.text[-3000:]
    refused = portal_client(hub, "alice").get(f"{hub.url}{PORTAL}operations", timeout=30)
    assert refused.status_code == 403
