"""The dashboard behind the Slurm test box's hub: its login and navigation, and the cluster's nodes. The journeys
that both schedulers offer (a job from the form and from the API, its pages, log, card and cancel, a sweep, bob's
404s, the admin's view) are tests/kubernetes/test_dashboard_journeys.py, run against both boxes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import requests

from tests.conftest import NODES

pytestmark = pytest.mark.integration
PORTAL = "/services/portal/"


def token_session(hub, user: str) -> requests.Session:
    """A plain API client for the dashboard with a hub API token of the user (made with their login session)."""
    return hub.client(hub.login(user)).token_session(user, "dashboard test")


@pytest.fixture(scope="module")
def clients(hub):
    return {user: token_session(hub, user) for user in ("alice", "bob", "admin")}


def api_caller(hub) -> Callable[..., requests.Response]:
    """call(client, method, path): the dashboard's JSON API behind this hub, as that client."""
    def call(client: requests.Session, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 60)
        return client.request(method, f"{hub.url}{PORTAL}api/{path}", **kwargs)
    return call


@pytest.fixture(scope="module")
def portal_api(hub):
    return api_caller(hub)


def browser(hub, user: str) -> requests.Session:
    """The user's browser: logged in to the hub, then through the service's OAuth (no confirmation page)."""
    session = hub.login(user)
    page = session.get(f"{hub.url}{PORTAL}", timeout=30)
    assert page.status_code == 200 and page.url == f"{hub.url}{PORTAL}jobs", (page.status_code, page.url)
    return session


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
