"""Faults around the hub, for real: the hub restarted while a spawn waits in Slurm's queue, the proxy killed while
servers run, a user's job directory out of space; and the dashboard's security headers, cookies and XSRF refusals
as a browser gets them through the proxy. Nothing may be lost: no Slurm job that the hub does not know, no job
without its record, no other user touched. Each test leaves the box as it found it.
"""

from __future__ import annotations

import html
import json
import os
import pwd
import re
import signal
import subprocess
import threading
import time
from http.cookies import SimpleCookie
from pathlib import Path

import pytest
import requests

from portal.jobs.demo_data import ensure_demo_data
from portal.service.base import SECURITY_HEADERS, XSRF_REFUSED_API, XSRF_REFUSED_PAGE
from tests.conftest import box, job_dir_of, jobs_of, slurm, wait_for
from tests.integration.helpers import token_session

pytestmark = pytest.mark.integration
PORTAL = "/services/portal/"
SMALL_JOB = {"template": "chexnet", "epochs": 1, "batch_size": 8, "image_size": 64, "cpus_per_task": 1,
             "memory_gb": 1, "gpus_per_node": 0}
RECOVERY_S = 30  # the hub looks for a dead proxy every 5 s (ConfigurableHTTPProxy.check_running_interval)


def set_cookies(response: requests.Response) -> dict[str, dict[str, str]]:
    """Every Set-Cookie of a response (redirects included), by name, with its attributes."""
    jar: dict[str, dict[str, str]] = {}
    for step in [*response.history, response]:
        for line in step.raw.headers.getlist("Set-Cookie"):
            for name, morsel in SimpleCookie(line).items():
                jar[name] = {k: str(v) for k, v in morsel.items() if v}
    return jar


def alices_known_jobs(hub, admin) -> set[str]:
    """The Slurm job ids that the hub holds for alice's server."""
    server = hub.server(admin, "alice") or {}
    job_id = (server.get("state") or {}).get("job_id")
    return {job_id} if job_id else set()


# --- security headers, cookies and XSRF through the proxy ---

def test_the_dashboard_and_hub_send_the_security_headers_and_samesite_cookies(hub):
    anonymous = requests.get(f"{hub.url}{PORTAL}jobs", allow_redirects=False, timeout=30)
    assert anonymous.status_code == 302
    for name, value in SECURITY_HEADERS.items():
        assert anonymous.headers.get(name) == value, (name, dict(anonymous.headers))
    assert "frame-ancestors 'none'" in anonymous.headers["Content-Security-Policy"]
    (state,) = set_cookies(anonymous).values()
    assert state["samesite"] == "Lax" and state["httponly"], state

    login = requests.get(f"{hub.url}/hub/login", timeout=30)  # the hub's own page: the same policy
    assert login.headers.get("X-Content-Type-Options") == "nosniff"
    assert login.headers.get("X-Frame-Options") == "DENY"
    assert "frame-ancestors 'none'" in login.headers["Content-Security-Policy"]
    assert set_cookies(login)["_xsrf"]["samesite"] == "Lax"
    session, logged_in = hub.post_login("alice", "wonderland")
    assert logged_in.status_code == 302
    # Lax, or Strict for the authenticator's own login-device cookie (portal.auth), which no redirect needs
    assert all(c.get("samesite") in ("Lax", "Strict") for c in set_cookies(logged_in).values()), logged_in.headers

    page = session.get(f"{hub.url}{PORTAL}submit", timeout=30)  # through the service's OAuth
    assert page.status_code == 200 and page.url == f"{hub.url}{PORTAL}submit"
    assert all(c.get("samesite") == "Lax" for c in set_cookies(page).values()), set_cookies(page)


def test_a_post_without_its_xsrf_token_says_so_and_the_dashboard_keeps_answering(hub):
    session = hub.login("alice")
    assert session.get(f"{hub.url}{PORTAL}submit", timeout=30).status_code == 200
    session.headers.pop("X-XSRFToken")  # the hub's token, which conftest sends along
    missing = session.post(f"{hub.url}{PORTAL}submit", data={"template": "chexnet"}, timeout=30)
    assert missing.status_code == 403, missing.text[-800:]
    error = re.search(r'<div [^>]*id="error"[^>]*>(.*?)</div>', missing.text, re.S)
    assert error and "XSRF token (_xsrf) is missing" in html.unescape(error.group(1)), missing.text[-800:]
    assert "log in" not in error.group(1)
    api = session.post(f"{hub.url}{PORTAL}api/jobs", json={}, timeout=30)
    assert api.status_code == 403 and api.json() == {"error": XSRF_REFUSED_API, "field": "_xsrf"}

    # A forged token without the service's _xsrf cookie used to hang the service for good (HubOAuth asked who
    # was logged in from inside that very question); now it is refused, and the next request is answered.
    session.cookies.clear(domain=session.cookies.list_domains()[0], path=PORTAL, name="_xsrf")
    forged = session.post(f"{hub.url}{PORTAL}submit", data={"template": "chexnet", "_xsrf": "forged"}, timeout=20)
    assert forged.status_code == 403 and XSRF_REFUSED_PAGE.split(";")[0] in html.unescape(forged.text)
    assert session.get(f"{hub.url}{PORTAL}api/cluster", timeout=20).status_code == 200
    assert jobs_of("alice") == []

    anonymous = requests.post(f"{hub.url}{PORTAL}api/jobs", json={}, timeout=30)
    assert anonymous.status_code == 403 and anonymous.json()["error"].startswith("log in to JupyterHub")


# --- a hub restart during a pending spawn ---

def ask_for_a_server(hub, admin, user: str) -> None:
    """The REST API's start, which answers only when the spawn ends: here the hub goes away before that."""
    try:
        hub.api(admin, "POST", f"users/{user}/server", data=json.dumps({"gpus": 0}))
    except requests.ConnectionError:
        pass


@pytest.fixture
def no_job_left(cluster):
    """Should the hub lose a job all the same, it must not run on into the next tests."""
    yield
    if jobs_of("alice"):
        slurm("scancel", "-u", "alice")


def test_a_hub_restart_during_a_pending_spawn_leaves_no_job_behind(cluster, hub, admin, alice, every_node_held,
                                                                   no_job_left):
    threading.Thread(target=ask_for_a_server, args=(hub, admin, "alice"), daemon=True).start()
    (job,) = wait_for(lambda: jobs_of("alice"), 30, interval=0.2, what="alice's server job in the queue")
    job_id, state = job.split()
    assert state == "PENDING"

    box("stop", "hub")
    box("start", "hub")
    # The hub cannot resume a start it was killed in the middle of: it must cancel the job it had submitted (or,
    # were the job to run, re-attach to it), never leave it to run unseen until its wall time.
    wait_for(lambda: not jobs_of("alice") or alices_known_jobs(hub, admin) == {job_id}, 30,
             what=f"alice's job {job_id} cancelled or held by the hub")
    assert hub.server(admin, "alice") is None, hub.server(admin, "alice")
    assert jobs_of("alice") == []
    log = (cluster.state_dir / "log" / "hub.log").read_text()
    assert re.search(rf"Slurm job {job_id} .*hub restarted.*cancelled", log), log[-3000:]

    slurm("scancel", every_node_held)  # the queue frees up: alice starts again, from the same hub
    assert hub.spawn_form(alice, gpus=0).status_code == 302
    hub.wait_ready(admin, "alice")


# --- a proxy restart with servers running ---

def proxy_pid(cluster) -> int:
    """The hub's configurable-http-proxy, from the PID file the hub writes in its directory."""
    pid = int((cluster.state_dir / "hub" / "jupyterhub-proxy.pid").read_text())
    assert b"configurable-http-proxy" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return pid


def test_a_killed_proxy_comes_back_with_its_routes(cluster, hub, admin, alice):
    assert hub.spawn_form(alice, gpus=0).status_code == 302
    hub.wait_ready(admin, "alice")
    dashboard = token_session(hub, "alice")
    assert alice.get(f"{hub.url}/user/alice/lab", timeout=30).status_code == 200
    (before,) = jobs_of("alice")

    old = proxy_pid(cluster)
    os.kill(old, signal.SIGKILL)
    killed = time.monotonic()

    def answers() -> bool:
        try:
            return alice.get(f"{hub.url}/user/alice/api/status", timeout=5).status_code == 200
        except requests.ConnectionError:
            return False
    wait_for(answers, RECOVERY_S, what="alice's server through a new proxy")
    recovered_s = time.monotonic() - killed
    assert proxy_pid(cluster) != old
    assert dashboard.get(f"{hub.url}{PORTAL}api/jobs", timeout=30).status_code == 200
    assert hub.server(admin, "alice")["ready"] and jobs_of("alice") == [before]  # the server itself untouched
    print(f"proxy killed: alice's server answered again after {recovered_s:.1f} s")


# --- a user's job directory out of space ---

@pytest.fixture
def alices_jobs_full(cluster):
    """The test box's directory in alice's ~/jobs on a 1 MB tmpfs, filled up; unmounted afterwards, whatever
    happens. Only the test box's own directory: her other jobs (a user's box beside) write on as before."""
    alice = pwd.getpwnam("alice")
    jobs_dir = job_dir_of("alice", "")
    if not jobs_dir.exists():
        subprocess.run(["runuser", "-u", "alice", "--", "mkdir", "-p", "-m", "700", str(jobs_dir)], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=1m,mode=0700,uid={alice.pw_uid},gid={alice.pw_gid}",
                    "dsportal-test-full", str(jobs_dir)], check=True)
    try:
        filler = subprocess.run(["runuser", "-u", "alice", "--", "dd", "if=/dev/zero", f"of={jobs_dir}/filler",
                                 "bs=64k"], capture_output=True, text=True)
        assert "No space left on device" in filler.stderr, filler.stderr
        yield jobs_dir
    finally:
        subprocess.run(["umount", str(jobs_dir)], check=False)
        if os.path.ismount(jobs_dir):
            subprocess.run(["umount", "-l", str(jobs_dir)], check=True)


def test_a_full_job_directory_refuses_the_submit_cleanly(cluster, hub, alices_jobs_full):
    ensure_demo_data(cluster)  # the job's data_dir, so that only the full directory can refuse it
    alice, bob = token_session(hub, "alice"), token_session(hub, "bob")
    response = alice.post(f"{hub.url}{PORTAL}api/jobs", json=SMALL_JOB, timeout=60)
    assert response.status_code == 507, response.text  # Insufficient Storage: alice's, not the service's
    message = response.json()["error"]
    assert "No space left on device" in message and "Traceback" not in message, message
    assert "Slurm is unavailable" not in message, message  # it is alice's file system, not Slurm
    # Nothing half-made: no job in Slurm, no directory without its job, and the list still renders.
    assert jobs_of("alice") == []
    assert sorted(p.name for p in alices_jobs_full.iterdir()) == ["filler"]
    listed = alice.get(f"{hub.url}{PORTAL}api/jobs", timeout=60)
    assert listed.status_code == 200, listed.text

    # bob is not touched by alice's full disk: his submit goes through (cancelled at once, to spare the cores).
    submitted = bob.post(f"{hub.url}{PORTAL}api/jobs", json=SMALL_JOB, timeout=60)
    assert submitted.status_code == 201, submitted.text
    assert bob.delete(f"{hub.url}{PORTAL}api/jobs/{submitted.json()['id']}", timeout=60).status_code == 204
