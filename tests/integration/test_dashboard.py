"""The dashboard for real: the portal service behind the test box's hub (OAuth, tokens, XSRF), alice's tiny
2-node training job through its API and pages (Horovod across two hosts), bob kept out of it, admins seeing
everyone's jobs.

Sized for 2 CPU cores: the demo set (64x64 images), 1 epoch, batch 8, one worker on each of the two nodes.
"""

from __future__ import annotations

import re
import time

import pytest
import requests

from bench.hub_client import xsrf_of
from portal.jobs.demo_data import ensure_demo_data
from portal.jobs.record import ENDED_STATES
from portal.tensorboard import panel_url
from tests import cards
from tests.conftest import CLUSTER, NODES, TINY_MODEL, job_dir_of, job_wait_s, jobs_of, wait_for

pytestmark = pytest.mark.integration
TINY = {"template": "chexnet", "epochs": 1, "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 4,
        "gpus_per_node": 1, "time_limit": "00:15:00", "model": TINY_MODEL}
JOB_WAIT_S = job_wait_s(TINY["time_limit"])  # submit (to an idle box) to ended
PORTAL = "/services/portal/"


def token_session(hub, user: str) -> requests.Session:
    """A plain API client for the dashboard with a hub API token of the user (made with their login session)."""
    return hub.client(hub.login(user)).token_session(user, "dashboard test")


@pytest.fixture(scope="module")
def demo_data(cluster):
    return ensure_demo_data(cluster)


@pytest.fixture(scope="module")
def clients(hub, demo_data):
    return {user: token_session(hub, user) for user in ("alice", "bob", "admin")}


@pytest.fixture(scope="module")
def portal_api(hub):
    def call(client: requests.Session, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 60)
        return client.request(method, f"{hub.url}{PORTAL}api/{path}", **kwargs)
    return call


@pytest.fixture(scope="module")
def alice_job(clients, portal_api):
    started = time.monotonic()
    response = portal_api(clients["alice"], "POST", "jobs", json={**TINY, "nodes": 2})
    assert response.status_code == 201, response.text
    job = response.json()
    job["submitted_monotonic"] = started
    yield job
    if any(line.startswith(f"{job['id']} ") for line in jobs_of("alice")):
        portal_api(clients["alice"], "DELETE", f"jobs/{job['id']}")


def browser(hub, user: str) -> requests.Session:
    """alice's browser: logged in to the hub, then through the service's OAuth (no confirmation page)."""
    session = hub.login(user)
    page = session.get(f"{hub.url}{PORTAL}", timeout=30)
    assert page.status_code == 200 and page.url == f"{hub.url}{PORTAL}jobs", (page.status_code, page.url)
    return session


def test_the_service_is_behind_the_hubs_login(hub):
    anonymous = requests.get(f"{hub.url}{PORTAL}jobs", allow_redirects=False, timeout=30)
    assert anonymous.status_code == 302, anonymous.text
    followed = requests.get(f"{hub.url}{PORTAL}jobs", timeout=30)
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


def test_invalid_specs_are_refused_naming_the_field(clients, portal_api):
    response = portal_api(clients["alice"], "POST", "jobs", json={"template": "chexnet", "epochs": 0})
    assert (response.status_code, response.json()["field"]) == (400, "epochs"), response.text
    response = portal_api(clients["bob"], "POST", "jobs", json={"template": "chexnet", "gpus_per_node": 4})
    assert (response.status_code, response.json()["field"]) == (400, "gpus_per_node"), response.text
    assert "quota" in response.json()["error"]
    assert jobs_of("bob") == []


def test_alice_sees_her_job_and_bob_cannot_reach_it(clients, portal_api, alice_job):
    job_id = alice_job["id"]
    assert alice_job["user"] == "alice" and alice_job["state"] in ("PENDING", "RUNNING"), alice_job
    mine = portal_api(clients["alice"], "GET", f"jobs/{job_id}")
    assert mine.status_code == 200 and mine.json()["state"] in ("PENDING", "RUNNING", "COMPLETED"), mine.text
    assert portal_api(clients["bob"], "GET", f"jobs/{job_id}").status_code == 404
    assert portal_api(clients["bob"], "DELETE", f"jobs/{job_id}").status_code == 404
    assert job_id not in [j["id"] for j in portal_api(clients["bob"], "GET", "jobs").json()["jobs"]]
    state = portal_api(clients["alice"], "GET", f"jobs/{job_id}").json()["state"]
    assert state in ("PENDING", "RUNNING", "COMPLETED"), f"bob's DELETE touched alice's job: {state}"


def test_admin_sees_alices_job(clients, portal_api, alice_job):
    listed = portal_api(clients["admin"], "GET", "jobs").json()["jobs"]
    assert (alice_job["id"], "alice") in [(j["id"], j["user"]) for j in listed]
    assert portal_api(clients["admin"], "GET", f"jobs/{alice_job['id']}").json()["user"] == "alice"


def test_the_jobs_page_lists_it_and_the_cancel_form_needs_xsrf(hub, clients, portal_api, alice_job):
    second = portal_api(clients["alice"], "POST", "jobs", json={**TINY, "time_limit": "00:05:00"})
    assert second.status_code == 201, second.text
    victim = second.json()["id"]
    session = browser(hub, "alice")
    page = session.get(f"{hub.url}{PORTAL}jobs", timeout=60)
    assert f'data-job="{alice_job["id"]}"' in page.text and f'data-job="{victim}"' in page.text
    action = f"{PORTAL}jobs/{victim}/cancel"
    forged = session.post(f"{hub.url}{action}", data={}, allow_redirects=False, timeout=60)
    assert forged.status_code == 403, forged.text
    xsrf = xsrf_of(page.text)
    done = session.post(f"{hub.url}{action}", data={"_xsrf": xsrf}, allow_redirects=False, timeout=60)
    assert done.status_code == 302, done.text
    wait_for(lambda: not any(line.startswith(f"{victim} ") for line in jobs_of("alice")), 60,
             what=f"job {victim} to leave the queue")
    state = wait_for(lambda: (s := portal_api(clients["alice"], "GET", f"jobs/{victim}").json()["state"])
                     in ENDED_STATES and s, 30, what=f"job {victim} to end")
    assert state == "CANCELLED"
    assert any(line.startswith(f"{alice_job['id']} ") for line in jobs_of("alice")) or \
        portal_api(clients["alice"], "GET", f"jobs/{alice_job['id']}").json()["state"] == "COMPLETED"


def test_the_job_completes_with_throughput_and_auroc(hub, clients, portal_api, alice_job):
    def finished():
        job = portal_api(clients["alice"], "GET", f"jobs/{alice_job['id']}").json()
        return job if job["state"] in ENDED_STATES else None
    remaining = JOB_WAIT_S - (time.monotonic() - alice_job["submitted_monotonic"])
    job = wait_for(finished, remaining, interval=1, what=f"job {alice_job['id']} to end")
    assert job["state"] == "COMPLETED", job
    job = wait_for(lambda: (j := portal_api(clients["alice"], "GET", f"jobs/{alice_job['id']}").json())
                   ["best_mean_auroc"] is not None and j, 60, interval=3, what="the job's final metrics")
    assert job["images_per_sec"] > 0 and 0.0 <= job["best_mean_auroc"] <= 1.0, job
    assert job["epochs_done"] == 1 and len(job["per_class_auroc"]) >= 1
    assert (job["nodes"], job["history"]) == (2, []), job
    # Horovod across hosts: one rank on each node, launched by mpirun through Slurm, and the log says where.
    text = clients["alice"].get(f"{hub.url}{PORTAL}jobs/{alice_job['id']}/log", timeout=60).text
    hosts = set(re.findall(r"rank \d of 2 on (\S+) ", text))
    assert hosts == set(NODES), text[-3000:]
    session = browser(hub, "alice")
    page = session.get(f"{hub.url}{PORTAL}jobs/{alice_job['id']}", timeout=60)
    assert page.status_code == 200 and "COMPLETED" in page.text
    # alice's JupyterLab is not running here, so the TensorBoard panel is replaced by a link that starts it.
    assert "Start your server" in page.text and 'href="/hub/spawn/alice"' in page.text
    listed = portal_api(clients["alice"], "GET", "jobs").json()["jobs"]
    links = next(j["links"] for j in listed if j["id"] == alice_job["id"])
    assert links["tensorboard"] == panel_url("alice", f"{CLUSTER}/{alice_job['id']}")  # its cluster's run



def test_the_completed_jobs_page_offers_its_model_card_and_its_hashes_hold(hub, clients, portal_api, alice_job,
                                                                            demo_data):
    job_id = alice_job["id"]
    assert portal_api(clients["alice"], "GET", f"jobs/{job_id}").json()["state"] == "COMPLETED"
    session = browser(hub, "alice")
    page = session.get(f"{hub.url}{PORTAL}jobs/{job_id}", timeout=60).text
    assert 'id="model-card"' in page and f"jobs/{job_id}/model_card.json" in page
    download = session.get(f"{hub.url}{PORTAL}jobs/{job_id}/model_card.json", timeout=60)
    assert download.status_code == 200 and "attachment" in download.headers["Content-Disposition"]
    card = download.json()
    # The hashes hold, computed here with hashlib (tests/cards.py): the data's as the demo set's manifest records
    # them, the checkpoint's against its files on disk.
    cards.data_holds(card, demo_data)
    cards.checkpoint_files_hold(card, job_dir_of("alice", job_id) / "checkpoints")
    assert card["spec"]["workers"] == 2 and card["epochs_done"] == 1
    assert session.get(f"{hub.url}{PORTAL}jobs/{job_id}/model_card.json", timeout=60).json() == card
    bob = browser(hub, "bob").get(f"{hub.url}{PORTAL}jobs/{job_id}/model_card.json", timeout=60)
    assert bob.status_code == 404  # not his job
