"""The operators' metrics on the Slurm test box (docs/operations.md): the token of the site's Prometheus (the
test box's hub registers this session's, `metrics_token_file`) reads the hub's /hub/metrics and the portal's own,
per group without users' names, and nothing else of the dashboard; a user's token does not read them."""

from __future__ import annotations

from pathlib import Path

import pytest

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
