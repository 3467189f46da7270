"""The dashboard behind the Slurm test box's hub: its login and navigation, and the cluster's nodes. The journeys
that both schedulers offer (a job from the form and from the API, its pages, log, card and cancel, a sweep, bob's
404s, the admin's view) are tests/kubernetes/test_dashboard_journeys.py, run against both boxes.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import NODES
from tests.integration.helpers import PORTAL, api_caller, browser, token_session

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def clients(hub):
    return {user: token_session(hub, user) for user in ("alice", "bob", "admin")}


@pytest.fixture(scope="module")
def portal_api(hub):
    return api_caller(hub)


def test_the_service_is_behind_the_hubs_login(hub):
    anonymous = hub.get(f"{PORTAL}jobs", allow_redirects=False)
    assert anonymous.status_code == 302, anonymous.text
    followed = hub.get(f"{PORTAL}jobs")
    assert "/hub/login" in followed.url, followed.url
    browser(hub, "alice")


def test_the_hub_navigation_links_the_portal(hub):
    session = hub.login("alice")
    home = session.get(f"{hub.url}/hub/home", timeout=30)
    assert home.status_code == 200
    assert re.search(r'<a class="nav-link" id="portal-nav" href="/services/portal/">Portal</a>', home.text)


def test_the_cluster_shows_both_nodes_and_their_gpus(clients, portal_api):
    response = portal_api(clients["alice"], "GET", "cluster")
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["gpus"] == 8 and data["partitions"][0]["name"] == "gpu", data
    assert [n["name"] for n in data["nodes"]] == list(NODES) and all(n["address"] for n in data["nodes"]), data
