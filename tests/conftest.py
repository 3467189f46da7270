"""Test session set-up: a private cluster in a box (own state dir and ports) for integration and browser tests.

The settings are written to a YAML file and named by DSPORTAL_CONFIG before any portal module loads them, so
the tests, the box and the hub all read the same values. A user's own `make up` box keeps running untouched.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parent.parent
# Two test sessions at once (say, two checkouts) need their own state dir, ports and nodes: set the variables.
TEST_STATE = Path(os.environ.get("DSPORTAL_TEST_STATE", "/var/tmp/dsportal-test"))
PORT_OFFSET = int(os.environ.get("DSPORTAL_TEST_PORT_OFFSET", "0"))
# The test box's compute nodes (tnode1, tnode2) and their part of 198.18.0.0/24, apart from `make up`'s.
NODE_PREFIX = os.environ.get("DSPORTAL_TEST_NODE_PREFIX", "tnode")
BOX_SUBNET = os.environ.get("DSPORTAL_TEST_BOX_SUBNET", "198.18.0.32/27")
TEST_CONFIG = TEST_STATE.with_suffix(".yaml")
TEST_SETTINGS = {
    "state_dir": str(TEST_STATE),
    "hub_port": 18000 + PORT_OFFSET,
    "hub_api_port": 18081 + PORT_OFFSET,
    "proxy_api_port": 18001 + PORT_OFFSET,
    "ldap_port": 13389 + PORT_OFFSET,
    "ldaps_port": 16636 + PORT_OFFSET,
    "slurmctld_port": 16817 + PORT_OFFSET,
    "slurmd_port": 16818 + PORT_OFFSET,
    "slurmdbd_port": 16819 + PORT_OFFSET,
    "accounting_db_port": 16820 + PORT_OFFSET,
    "box_nodes": 2,
    "box_node_prefix": NODE_PREFIX,
    "box_subnet": BOX_SUBNET,
    "start_timeout": 120,
}
NODES = tuple(f"{NODE_PREFIX}{i}" for i in (1, 2))
ARTIFACTS = REPO / "tests" / "artifacts"

TEST_CONFIG.write_text("".join(f"{k}: {v}\n" for k, v in TEST_SETTINGS.items()))
os.environ["DSPORTAL_CONFIG"] = str(TEST_CONFIG)
for name in list(os.environ):
    if name.startswith("DSPORTAL_") and name != "DSPORTAL_CONFIG" and not name.startswith("DSPORTAL_TEST_"):
        del os.environ[name]  # the YAML file is the one source for the test box

from portal.config import load  # noqa: E402  (after DSPORTAL_CONFIG is set)

PASSWORDS = {"alice": "wonderland", "bob": "builder", "mallory": "mallory", "admin": "admin-demo"}


def box(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the cluster-in-a-box command line against the test state dir; with `check`, a failure shows its output."""
    result = subprocess.run([sys.executable, str(REPO / "deploy" / "local" / "box.py"), *args],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"box.py {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def slurm(*args: str) -> str:
    cfg = load()
    env = {**os.environ, "SLURM_CONF": str(cfg.slurm_conf_path)}
    return subprocess.run(list(args), env=env, capture_output=True, text=True, check=True, timeout=30).stdout


def jobs_of(user: str) -> list[str]:
    """The user's Slurm jobs that are pending or running, as 'id state'."""
    return slurm("squeue", "-h", "-u", user, "-o", "%i %T").split("\n")[:-1]


def wait_for(predicate, timeout: float, interval: float = 0.5, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Hub:
    """The test box's hub, driven over HTTP as a browser or an API client would."""

    def __init__(self, url: str):
        self.url = url

    def login_form(self, session: requests.Session | None = None) -> tuple[requests.Session, str]:
        session = session or requests.Session()
        page = session.get(f"{self.url}/hub/login", timeout=10)
        page.raise_for_status()
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text).group(1)
        return session, xsrf

    def post_login(self, username: str, password: str) -> tuple[requests.Session, requests.Response]:
        session, xsrf = self.login_form()
        response = session.post(f"{self.url}/hub/login?next=", allow_redirects=False, timeout=30,
                                data={"username": username, "password": password, "_xsrf": xsrf})
        return session, response

    def login(self, username: str) -> requests.Session:
        session, response = self.post_login(username, PASSWORDS[username])
        assert response.status_code == 302, f"{username} could not log in: {response.status_code}"
        session.headers["X-XSRFToken"] = session.cookies.get("_xsrf", path="/hub/")
        return session

    def api(self, session: requests.Session, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 30)
        return session.request(method, f"{self.url}/hub/api/{path}", **kwargs)

    def spawn_form(self, session: requests.Session, **fields) -> requests.Response:
        """Submit the spawn form as a browser does; returns the page the hub answers with."""
        page = session.get(f"{self.url}/hub/spawn", timeout=30)
        action = re.search(r'<form[^>]*id="spawn_form"[^>]*action="([^"]+)"', page.text)
        assert action, f"no spawn form on {page.url}: {page.text[-1000:]}"
        return session.post(f"{self.url}{html.unescape(action.group(1))}", allow_redirects=False, timeout=60,
                            files={k: (None, str(v)) for k, v in fields.items()})

    def server(self, session: requests.Session, user: str) -> dict | None:
        model = self.api(session, "GET", f"users/{user}").json()
        return model.get("servers", {}).get("")

    def wait_ready(self, session: requests.Session, user: str, timeout: float = 90) -> dict:
        def ready():
            server = self.server(session, user)
            if server is None:
                raise AssertionError(f"{user}'s server is gone: the spawn failed (see {TEST_STATE}/log/hub.log)")
            return server if server.get("ready") else None
        return wait_for(ready, timeout, what=f"{user}'s server to be ready")

    def stop(self, session: requests.Session, user: str) -> None:
        response = self.api(session, "DELETE", f"users/{user}/server")
        assert response.status_code in (202, 204, 400), response.text
        wait_for(lambda: self.server(session, user) is None, 60, what=f"{user}'s server to stop")


def pytest_collection_modifyitems(session, config, items):
    """The images tests run last, and their build starts now in the background (tests/images/build.py): on a fresh
    machine it waits on downloads for minutes, beside the CPU-bound suites instead of before them."""
    images = [item for item in items if "tests/images/" in item.nodeid]
    if images:
        items[:] = [item for item in items if item not in images] + images
        if not config.option.collectonly:
            from tests.images import build
            build.start()


@pytest.fixture(scope="session")
def cluster():
    """Start the test box from nothing; stop it after the session."""
    box("down", check=False)
    shutil.rmtree(TEST_STATE, ignore_errors=True)
    started = time.monotonic()
    result = box("up", check=False)
    if result.returncode != 0:
        pytest.fail(f"the cluster in a box did not start:\n{result.stdout}\n{result.stderr}")
    print(f"\ncluster in a box up in {time.monotonic() - started:.1f} s")
    yield load()
    box("down", check=False)


@pytest.fixture(scope="session")
def hub(cluster) -> Hub:
    return Hub(cluster.hub_url)


@pytest.fixture(scope="session")
def admin(hub) -> requests.Session:
    """An admin's logged-in session, for the REST API."""
    return hub.login("admin")


@pytest.fixture
def alice(hub, admin) -> requests.Session:
    """alice, logged in; her server is stopped again after the test."""
    session = hub.login("alice")
    yield session
    if hub.server(admin, "alice") is not None:
        hub.stop(admin, "alice")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
