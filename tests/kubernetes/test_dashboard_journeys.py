"""The dashboard's journeys, the same test functions on both schedulers: the Slurm test box's hub, and the
Kubernetes test box's hub in a pod (served through its NodePort, the dashboard acting for each user with the
hub's service account). Each test runs twice, "[slurm]" on the Slurm box's side of `make test` and "[kubernetes]"
on the Kubernetes box's (conftest.side_of). The journeys run the default program: what depends on the program is
proven without a box (tests/programs), and each program's tiny job runs on each box in
test_jobs_on_both_schedulers.py.

alice's 2-node job from the API runs to COMPLETED with its page, log, figures, TensorBoard link and model card
(its hashes checked here with hashlib; on Kubernetes the card carries the image digest that the kubelet ran), and
so does a 2-node job from the form; a job pointed at a directory without images ends FAILED within a minute, the
path in its log; a job is cancelled from its page (the cancel form needs XSRF); a sweep from the API shows its
trials; bob gets 404 on each of alice's pages and cannot cancel; admins see her job. In Chromium (the hub in a
pod over HTTPS with the box's CA, as a site serves it): every page through axe, with screenshots
(tests/artifacts/journey-<box>-*.png), and the browser's own notification when her job ends.

Sized for 2 CPU cores: the demo set (64x64 images), tinycnn, 1 epoch, batch 8, one worker on each of two nodes.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
import posixpath
import pwd
import re
import secrets
import shutil
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from kubernetes import client as k8s
from playwright import sync_api as playwright

from bench.hub_client import xsrf_of
from portal.config import PortalConfig
from portal.jobs.demo_data import LAYOUT_NAME
from portal.records.record import ENDED_STATES
from portal.scheduler.kubernetes.manifests import LABEL_JOB, LABEL_ROLE
from portal.tensorboard import panel_url
from tests import cards
from tests.browser.conftest import (
    CHROMIUM,
    FLAGS,
    NARROW,
    WIDE,
    axe_problems,
    horizontal_overflow,
    log_in,
    new_context,
)
from tests.conftest import (
    CLUSTER,
    NODES,
    PASSWORDS,
    PROGRAMS,
    TEST_STATE,
    TINY_MODEL,
    TOY,
    Hub,
    job_dir_of,
    job_wait_s,
    wait_for,
)
from tests.integration.helpers import PORTAL, api_caller, browser, token_session
from tests.kubernetes.conftest import kubebox

pytestmark = pytest.mark.integration
TINY = {"template": "chexnet", "epochs": 1, "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 3,
        "gpus_per_node": 1, "time_limit": "00:15:00", "model": TINY_MODEL}
JOB_WAIT_S = job_wait_s(TINY["time_limit"])  # submit (to an idle box) to ended
FAIL_WAIT_S = 240  # a job that fails at its start ended (its pods' start, the program's first seconds)
NOTE_WAIT_S = 120  # an ended job announced by the open jobs page (it looks every poll period)
CANCEL_WAIT_S = 180  # a cancelled job ended, as its scheduler says (Kubernetes: its objects deleted)
SWEEP = {"trials": 2, "parallel": 2, "sampler": "random", "pruner": "none", "seed": 7}  # both trials at once
VARIANTS = [(WIDE, "light"), (WIDE, "dark"), (NARROW, "light"), (NARROW, "dark")]  # as tests/browser's pages


@dataclass(frozen=True)
class Box:
    """What the journeys need to know of a box, beyond its hub: what only that scheduler can say."""

    name: str  # "slurm" or "kubernetes"
    hub: Hub
    cluster: str  # the portal's cluster_name there: job directories and TensorBoard run names
    job_dir: Callable[[str, str], Path]  # (user, job id) -> the job's directory, as this machine sees it
    data_dir: Path  # the demo set's TFRecords, as this machine sees them
    data_shown: str  # ... as a job there names them (its card's data.dir)
    hosts: Callable[[str], set[str]]  # the hosts a job's two workers ran on (as mpirun's log names them)
    home: Callable[[str], tuple[Path, str]]  # user -> their home, as this machine sees it and as a job names it
    hub_log: Callable[[], str]  # the end of the hub's and the dashboard's log, for a failure's message


def slurm_box(request) -> Box:
    request.getfixturevalue("cluster")
    data = request.getfixturevalue("demo_data")
    return Box("slurm", request.getfixturevalue("hub"), CLUSTER, job_dir_of, data, str(data),
               lambda job_id: set(NODES), lambda user: (home := Path(pwd.getpwnam(user).pw_dir), str(home)),
               lambda: (TEST_STATE / "log" / "hub.log").read_text()[-6000:])


def kubernetes_box(request) -> Box:
    from deploy.kubernetes.kubeparts import volumes

    kube = request.getfixturevalue("kube")
    hub = request.getfixturevalue("pod_hub")
    cluster = kubebox.box_hub.values_env().get("DSPORTAL_CLUSTER_NAME", PortalConfig().cluster_name)
    core = k8s.CoreV1Api(kubebox.api_client(kube.box, kubebox.read_tokens(kube.box)["admin"]))

    def worker_hosts(job_id: str) -> set[str]:
        """A worker pod's hostname is its name; a torchrun job's node 0 (its launcher) trains too, as `<id>-0`."""
        pods = core.list_namespaced_pod("dsportal-u-alice", label_selector=f"{LABEL_JOB}={job_id}").items
        return {pod.spec.hostname or pod.metadata.name for pod in pods
                if pod.metadata.labels[LABEL_ROLE] == "worker" or pod.spec.hostname}
    data = volumes.data_dir(kube.box) / volumes.DATA_SET
    return Box("kubernetes", hub, cluster,
               lambda user, job_id: volumes.home_dir(kube.box, user) / "jobs" / cluster / job_id, data,
               posixpath.join(PortalConfig().k8s_data_mount, volumes.DATA_SET), worker_hosts,
               lambda user: (volumes.home_dir(kube.box, user), PortalConfig().k8s_home_mount),
               lambda: kubebox.box_hub.hub_log(core)[-6000:])


@pytest.fixture(scope="module", params=["slurm", "kubernetes"])
def box(request) -> Box:
    return slurm_box(request) if request.param == "slurm" else kubernetes_box(request)


def page(box: Box, session: requests.Session, path: str, status: int = 200) -> requests.Response:
    """A dashboard page as the session's browser gets it, which must answer `status` (else the hub's log says why)."""
    answer = session.get(f"{box.hub.url}{PORTAL}{path}", timeout=60)
    assert answer.status_code == status, f"{path}: {answer.status_code}\n{answer.text[-1500:]}\n{box.hub_log()}"
    return answer


@pytest.fixture(scope="module")
def clients(box):
    return {user: token_session(box.hub, user) for user in ("alice", "bob", "admin")}


@pytest.fixture(scope="module")
def api(box):
    return api_caller(box.hub)


def job_now(box, clients, api, job_id: str) -> dict:
    """alice's job as the API shows it. On Kubernetes a cancelled job is deleted (the launcher Job is its record):
    once its objects are gone it is no job any more (404), which this reads as CANCELLED."""
    answer = api(clients["alice"], "GET", f"jobs/{job_id}")
    if answer.status_code == 404 and box.name == "kubernetes":
        return {"id": job_id, "state": "CANCELLED", "gone": True}
    assert answer.status_code == 200, answer.text[-2000:]
    return answer.json()


@pytest.fixture(scope="module")
def made(box, clients, api):
    """The jobs a test submits as alice (their ids); whatever has not ended is cancelled afterwards."""
    ids: list[str] = []
    yield ids
    for job_id in ids:
        if job_now(box, clients, api, job_id)["state"] not in ENDED_STATES:
            api(clients["alice"], "DELETE", f"jobs/{job_id}")
    for job_id in ids:
        ended(box, clients, api, job_id, CANCEL_WAIT_S)


def ended(box, clients, api, job_id: str, timeout: float) -> dict:
    return wait_for(lambda: (j := job_now(box, clients, api, job_id))["state"] in ENDED_STATES and j, timeout,
                    interval=2, what=f"job {job_id} to end")


def log_end(box, clients, job_id: str) -> str:
    """The end of alice's job's log as her dashboard shows it, for a failure's message (why it did not complete)."""
    answer = clients["alice"].get(f"{box.hub.url}{PORTAL}jobs/{job_id}/log", timeout=60)
    return f"job {job_id}'s log ({answer.status_code}):\n{answer.text[-4000:]}"


@pytest.fixture(scope="module")
def program() -> str:
    """The journeys' program: the default one (what the form offers first). What depends on the program is proven
    without a box by the program contract suite (tests/programs); each program's tiny job runs on each box in
    tests/kubernetes/test_jobs_on_both_schedulers.py::test_the_forms_default_job_runs_to_completed."""
    return PROGRAMS[0]


@pytest.fixture(scope="module")
def alice_job(box, clients, api, made, program):
    started = time.monotonic()
    response = api(clients["alice"], "POST", "jobs", json={**TINY, "template": program, "nodes": 2})
    assert response.status_code == 201, response.text
    job = response.json()
    made.append(job["id"])
    job["submitted_monotonic"] = started
    return job


def test_the_submit_form_offers_the_users_limits_and_both_kinds_of_job(box):
    form = page(box, browser(box.hub, "alice"), "submit")
    assert 'id="submit_form"' in form.text and 'name="gpus_per_node"' in form.text
    assert "(your quota: 4)" in form.text  # gpu-users' quota, the same on both boxes
    assert 'id="kind-single"' in form.text and 'id="kind-sweep"' in form.text
    # E-mail at a job's end: Slurm's MailProg sends it; a Kubernetes job has no such hook, and the form says so.
    offered, said = 'id="mail"' in form.text, 'id="mail-not-offered"' in form.text
    assert (offered, said) == ((True, False) if box.name == "slurm" else (False, True)), form.text[-3000:]
    assert not said or "No e-mail is sent when a job ends on this cluster" in html.unescape(form.text)


def test_a_site_programs_job_is_offered_taken_and_shown_with_its_own_fields(box, clients, api, made):
    """The test boxes' own program (the toy: tests/conftest.py's site_programs and site_launchers, which the hub in a
    pod gets too, its directory mounted): the form offers it beside the portal's, the API takes a job of it, and its
    page shows the program's own fields. Its jobs and sweeps run to COMPLETED on each box in
    test_jobs_on_both_schedulers.py."""
    form = page(box, browser(box.hub, "alice"), "submit")
    assert f'value="{TOY}"' in form.text, form.text[-3000:]
    images = posixpath.join(posixpath.dirname(box.data_shown), LAYOUT_NAME)  # the toy reads the demo set's PNGs
    response = api(clients["alice"], "POST", "jobs", json={**TINY, "template": TOY, "data_dir": images,
                                                          "gpus_per_node": 0, "grid": 3})
    assert response.status_code == 201, response.text
    made.append(response.json()["id"])
    shown = page(box, clients["alice"], f"jobs/{made[-1]}").text
    assert f'<dd class="col-sm-9 col-lg-4">{TOY}</dd>' in shown
    assert '<dd class="col-sm-9 col-lg-4" id="options">grid 3</dd>' in shown  # its own field


def test_alice_sees_her_job_and_bob_reaches_none_of_its_pages(box, clients, api, alice_job):
    job_id = alice_job["id"]
    assert alice_job["user"] == "alice" and alice_job["state"] in ("PENDING", "RUNNING"), alice_job
    assert "warning" in alice_job  # why it will wait, or "" (it can start now, or the scheduler cannot tell)
    mine = api(clients["alice"], "GET", f"jobs/{job_id}")
    assert mine.status_code == 200 and mine.json()["state"] in ("PENDING", "RUNNING", "COMPLETED"), mine.text
    page(box, browser(box.hub, "alice"), f"jobs/{job_id}")
    assert api(clients["bob"], "GET", f"jobs/{job_id}").status_code == 404
    assert api(clients["bob"], "DELETE", f"jobs/{job_id}").status_code == 404
    bob = browser(box.hub, "bob")
    for part in ("", "/log", "/model_card.json"):
        page(box, bob, f"jobs/{job_id}{part}", status=404)
    xsrf = xsrf_of(page(box, bob, "submit").text)  # his own form's token (his jobs page may have no form)
    for action in ("cancel", "notebook"):  # the forms of the job's page
        posted = bob.post(f"{box.hub.url}{PORTAL}jobs/{job_id}/{action}", data={"_xsrf": xsrf},
                          allow_redirects=False, timeout=60)
        assert posted.status_code == 404, (action, posted.text[-2000:])
    assert job_id not in [j["id"] for j in api(clients["bob"], "GET", "jobs").json()["jobs"]]
    state = api(clients["alice"], "GET", f"jobs/{job_id}").json()["state"]
    assert state in ("PENDING", "RUNNING", "COMPLETED"), f"bob touched alice's job: {state}"


def test_admin_sees_alices_job(clients, api, alice_job):
    listed = api(clients["admin"], "GET", "jobs").json()["jobs"]
    assert (alice_job["id"], "alice") in [(j["id"], j["user"]) for j in listed]
    assert api(clients["admin"], "GET", f"jobs/{alice_job['id']}").json()["user"] == "alice"


def test_the_job_completes_with_its_figures_log_and_tensorboard_link(box, clients, api, alice_job):
    remaining = JOB_WAIT_S - (time.monotonic() - alice_job["submitted_monotonic"])
    job = ended(box, clients, api, alice_job["id"], remaining)
    assert job["state"] == "COMPLETED", (job, log_end(box, clients, alice_job["id"]))
    job = wait_for(lambda: (j := api(clients["alice"], "GET", f"jobs/{alice_job['id']}").json())
                   ["best_mean_auroc"] is not None and j, 60, interval=3, what="the job's final metrics")
    assert job["images_per_sec"] > 0 and 0.0 <= job["best_mean_auroc"] <= 1.0, job
    assert job["epochs_done"] == 1 and job["nodes"] == 2, job
    # Across hosts: one rank on each (Horovod by mpirun, PyTorch by torchrun), and the log says where.
    text = clients["alice"].get(f"{box.hub.url}{PORTAL}jobs/{alice_job['id']}/log", timeout=60).text
    hosts = set(re.findall(r"rank \d of 2 on (\S+) ", text))
    assert len(hosts) == 2 and hosts == box.hosts(alice_job["id"]), text[-3000:]
    shown = page(box, browser(box.hub, "alice"), f"jobs/{alice_job['id']}")
    assert "COMPLETED" in shown.text
    # alice's JupyterLab is not running, so the TensorBoard panel is replaced by a link that starts it.
    assert "Start your server" in shown.text and 'href="/hub/spawn/alice"' in shown.text
    # "Open in a notebook" writes into her home: where the dashboard cannot (Kubernetes), the page says so.
    offered = f'action="{PORTAL}jobs/{alice_job["id"]}/notebook"' in shown.text
    said = "Open in a notebook is not offered here" in html.unescape(shown.text)
    assert (offered, said) == ((True, False) if box.name == "slurm" else (False, True)), shown.text[-3000:]
    listed = api(clients["alice"], "GET", "jobs").json()["jobs"]
    links = next(j["links"] for j in listed if j["id"] == alice_job["id"])
    assert links["tensorboard"] == panel_url("alice", f"{box.cluster}/{alice_job['id']}")  # its cluster's run
    if box.name == "slurm":  # its files, in her home on the machine, are hers (a pod's are in her home volume)
        job_dir, uid = Path(job["job_dir"]), pwd.getpwnam("alice").pw_uid
        for name in ("job.json", "job.sbatch", "output.log", "exit_status", "tensorboard", "checkpoints"):
            assert (job_dir / name).stat().st_uid == uid, name


def test_the_completed_jobs_model_card_downloads_and_its_hashes_hold(box, clients, api, alice_job):
    job_id = alice_job["id"]
    assert api(clients["alice"], "GET", f"jobs/{job_id}").json()["state"] == "COMPLETED"
    session = browser(box.hub, "alice")
    shown = page(box, session, f"jobs/{job_id}").text
    assert 'id="model-card"' in shown and f"jobs/{job_id}/model_card.json" in shown
    download = session.get(f"{box.hub.url}{PORTAL}jobs/{job_id}/model_card.json", timeout=60)
    assert download.status_code == 200 and "attachment" in download.headers["Content-Disposition"]
    card = download.json()
    cards.data_holds(card, box.data_dir, shown_as=box.data_shown)
    cards.checkpoint_files_hold(card, box.job_dir("alice", job_id) / "checkpoints")
    assert card["spec"]["workers"] == 2 and card["epochs_done"] == 1
    # In an image, the card names the image it ran (the digest the kubelet reports); on the Slurm box's hosts none.
    digest = card["environment"].get("image_digest")
    assert (box.name, bool(digest and digest.startswith("sha256:"))) in (("slurm", False), ("kubernetes", True)), \
        card["environment"]


def mlflow_call(box: Box, session: requests.Session, method: str, path: str, **kwargs) -> requests.Response:
    """MLflow's REST API through the dashboard (portal.service.mlflow_proxy), as the session's hub user: with a hub
    token, as the `mlflow` client with MLFLOW_TRACKING_TOKEN would ask."""
    return session.request(method, f"{box.hub.url}{PORTAL}mlflow/{path}", timeout=60, **kwargs)


def test_the_completed_job_is_alices_run_in_mlflow_and_bobs_client_cannot_read_it(box, clients, api, alice_job,
                                                                                  program):
    """Both boxes run an MLflow server (mlflow_url): the job's rank 0 logged its run as alice, with its parameters,
    its epoch's metrics, its tags and its model card; she finds it in her experiment, and bob, with his own token,
    gets MLflow's refusal for the run, its metrics, its artifact and her experiment."""
    job_id = alice_job["id"]
    assert api(clients["alice"], "GET", f"jobs/{job_id}").json()["state"] == "COMPLETED"
    alice, bob = clients["alice"], clients["bob"]
    experiment = mlflow_call(box, alice, "GET", "api/2.0/mlflow/experiments/get-by-name",
                             params={"experiment_name": "portal/alice"})
    assert experiment.status_code == 200, (experiment.status_code, experiment.text[-2000:], box.hub_log())
    experiment_id = experiment.json()["experiment"]["experiment_id"]
    search = {"experiment_ids": [experiment_id], "filter": f"tags.`dsportal.job` = '{job_id}'"}
    runs = mlflow_call(box, alice, "POST", "api/2.0/mlflow/runs/search", json=search)
    assert runs.status_code == 200 and len(runs.json().get("runs", [])) == 1, (runs.text[-2000:],
                                                                              log_end(box, clients, job_id))
    (run,) = runs.json()["runs"]
    info, data = run["info"], run["data"]
    params = {p["key"]: p["value"] for p in data.get("params", [])}
    tags = {t["key"]: t["value"] for t in data.get("tags", [])}
    assert info["status"] == "FINISHED" and info["run_name"] == f"job {job_id}", info
    assert (params.get("program"), params.get("batch_size"), params.get("image_size")) == (program, "8", "64"), params
    assert {k: tags.get(k) for k in ("dsportal.user", "dsportal.scheduler", "dsportal.program", "dsportal.job")} == \
        {"dsportal.user": "alice", "dsportal.scheduler": box.name, "dsportal.program": program, "dsportal.job": job_id}
    history = mlflow_call(box, alice, "GET", "api/2.0/mlflow/metrics/get-history",
                          params={"run_id": info["run_id"], "metric_key": "auroc/mean"})
    assert [m["step"] for m in history.json().get("metrics", [])] == [1], history.text[-2000:]
    artifact = f"api/2.0/mlflow-artifacts/artifacts/{info['artifact_uri'].split(':/', 1)[1]}/model_card.json"
    card = mlflow_call(box, alice, "GET", artifact)
    assert card.status_code == 200, (artifact, card.status_code, card.text[-1000:])
    shown = browser(box.hub, "alice").get(f"{box.hub.url}{PORTAL}jobs/{job_id}/model_card.json", timeout=60).json()
    assert card.json()["data"] == shown["data"] and card.json()["checkpoint"] == shown["checkpoint"]
    refused = {
        "run": mlflow_call(box, bob, "GET", "api/2.0/mlflow/runs/get", params={"run_id": info["run_id"]}),
        "metrics": mlflow_call(box, bob, "GET", "api/2.0/mlflow/metrics/get-history",
                               params={"run_id": info["run_id"], "metric_key": "auroc/mean"}),
        "artifact": mlflow_call(box, bob, "GET", artifact),
        "experiment": mlflow_call(box, bob, "GET", "api/2.0/mlflow/experiments/get", params={
            "experiment_id": experiment_id})}
    assert {what: answer.status_code for what, answer in refused.items()} == dict.fromkeys(refused, 403), \
        {what: answer.text[:300] for what, answer in refused.items()}
    # A search is MLflow's filter of what the asker may read: bob's of her experiment finds nothing.
    searched = mlflow_call(box, bob, "POST", "api/2.0/mlflow/runs/search", json=search)
    assert searched.status_code == 403 or not searched.json().get("runs"), searched.text[:500]
    listed = mlflow_call(box, bob, "POST", "api/2.0/mlflow/experiments/search", json={"max_results": 100})
    assert experiment_id not in [e["experiment_id"] for e in listed.json().get("experiments", [])], listed.text


def test_a_two_node_job_from_the_form_is_queued_on_two_nodes(box, clients, api, made, program):
    """The form's fields make the job (2 nodes, the form's program), which is then cancelled: a 2-node job's run to
    COMPLETED is alice_job's (test_the_job_completes_with_its_figures_log_and_tensorboard_link), the form's
    fields into a spec are the form reader's unit tests, and each program's form job runs to COMPLETED in
    test_jobs_on_both_schedulers.py. (Until 2026-12-02 this one trained too: 23 s on Slurm, 28 s on Kubernetes.)"""
    session = browser(box.hub, "alice")
    form = page(box, session, "submit")
    fields = {**{k: str(v) for k, v in TINY.items()}, "template": program, "nodes": "2", "kind": "single",
              "_xsrf": xsrf_of(form.text)}
    submitted = session.post(f"{box.hub.url}{PORTAL}submit", data=fields, allow_redirects=False, timeout=120)
    assert submitted.status_code == 302, submitted.text[-3000:]
    found = re.search(rf"{PORTAL}jobs/([^/?#]+)$", submitted.headers["Location"])
    assert found, submitted.headers["Location"]
    job_id = found.group(1)
    made.append(job_id)
    assert f"Job {job_id}" in page(box, session, f"jobs/{job_id}").text
    job = job_now(box, clients, api, job_id)
    assert (job["state"] in ("PENDING", "RUNNING"), job["nodes"], job["spec"]["template"]) == (True, 2, program), job
    assert api(clients["alice"], "DELETE", f"jobs/{job_id}").status_code in (200, 202, 204)
    ended(box, clients, api, job_id, CANCEL_WAIT_S)


def test_a_job_whose_training_fails_ends_failed_at_once_saying_why_in_its_log(box, clients, api, made, program):
    """alice points a job at a directory with no images: the program exits 2 naming it, and the job ends FAILED at
    once, on both schedulers. (On Kubernetes the launcher's Job made a new launcher pod after the failed one, which
    waited for workers that had ended until the time limit: the job read RUNNING for 15 minutes; then, until the
    launcher said its run ended in its termination message, for the Job's back-off, about a minute.)"""
    here, shown = box.home("alice")
    name = f"dsportal-test-no-images-{secrets.token_hex(4)}"  # this test's own mark: it removes it
    (here / name).mkdir(mode=0o755)
    os.chown(here / name, here.stat().st_uid, here.stat().st_gid)
    try:
        response = api(clients["alice"], "POST", "jobs",
                       json={**TINY, "template": program, "data_dir": posixpath.join(shown, name)})
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        made.append(job_id)
        job = ended(box, clients, api, job_id, FAIL_WAIT_S)
        log = page(box, browser(box.hub, "alice"), f"jobs/{job_id}/log").text
        assert job["state"] == "FAILED", f"{job}\n{log[-3000:]}"
        assert posixpath.join(shown, name) in log, log[-3000:]
    finally:
        shutil.rmtree(here / name)


def test_a_job_is_cancelled_from_its_page_and_only_with_xsrf(box, clients, api, made):
    response = api(clients["alice"], "POST", "jobs", json={**TINY, "epochs": 500, "time_limit": "00:10:00"})
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    made.append(job_id)
    session = browser(box.hub, "alice")
    shown = page(box, session, f"jobs/{job_id}")
    assert f"jobs/{job_id}/cancel" in shown.text, shown.text[-3000:]
    action = f"{box.hub.url}{PORTAL}jobs/{job_id}/cancel"
    assert session.post(action, data={}, allow_redirects=False, timeout=60).status_code == 403  # no XSRF token
    done = session.post(action, data={"_xsrf": xsrf_of(shown.text)}, allow_redirects=False, timeout=120)
    assert done.status_code == 302, done.text[-3000:]
    assert ended(box, clients, api, job_id, CANCEL_WAIT_S)["state"] == "CANCELLED"


@pytest.fixture(scope="module")
def compared(box, clients, api, made) -> dict:
    """What alice compares: a sweep of two one-epoch trials side by side and two single one-epoch jobs at two batch
    sizes, submitted together and run to their end. The sweep's page is looked at once it is submitted.

    Together they take all 4 GPUs of her quota, and a job an earlier test of the module made may still hold some
    (a cancelled one until its scheduler has ended it: Slurm's COMPLETING, a pod still terminating; one that ended
    until its scheduler lets go). The portal refuses what does not fit what is left ("gpus_per_node: you use 4 of
    your 4 GPUs ..."; "sweep.parallel: 2 is out of range ..."), so each is submitted again until it fits."""
    def submitted(request: dict) -> str:
        def accepted() -> str | None:
            response = api(clients["alice"], "POST", "jobs", json=request)
            if response.status_code == 400 and "GPUs" in response.json().get("error", "") and \
                    response.json().get("field") in ("gpus_per_node", "sweep.parallel"):
                return None  # her quota is full for now: asked again
            assert response.status_code == 201, response.text
            return response.json()["id"]
        job_id = wait_for(accepted, JOB_WAIT_S, interval=3, what=f"room in alice's GPU quota for {request}")
        made.append(job_id)
        return job_id
    ids = {"sweep": submitted({**TINY, "sweep": SWEEP})}
    for name, batch_size in (("first", 8), ("second", 4)):
        ids[name] = submitted({**TINY, "batch_size": batch_size})
    shown = page(box, browser(box.hub, "alice"), f"jobs/{ids['sweep']}").text
    assert 'id="sweep-trials"' in shown and 'data-task="0"' in shown and 'data-task="1"' in shown, shown[-3000:]
    assert "Sweep: 2 trials, at most 2 at once" in shown
    for job_id in ids.values():
        job = ended(box, clients, api, job_id, JOB_WAIT_S)
        assert job["state"] == "COMPLETED", (job, log_end(box, clients, job_id))
    return ids


def test_a_finished_sweeps_page_charts_its_trials_and_reads_at_both_widths_and_themes(box, clients, api, compared,
                                                                                       artifacts):
    """Its page names one best trial in the summary, the table and the chart (axes, ticks, the ring), counts its
    progress and wall time, and reads in Chromium at 1280 and 375 px, light and dark (axe, no sideways scroll)."""
    job_id = compared["sweep"]
    sweep = wait_for(lambda: (s := job_now(box, clients, api, job_id)["sweep"])["best"] and s, 60, interval=3,
                     what=f"sweep {job_id}'s best trial")
    best = sweep["best"]
    assert sweep["progress"]["trials_done"] == 2 and sweep["elapsed_s"] > 0, sweep
    shown = page(box, browser(box.hub, "alice"), f"jobs/{job_id}").text
    assert f"trial {best['trial']}</strong> (task {best['task']})" in shown, shown[-3000:]
    assert re.findall(r'<tr data-task="(\d+)"[^>]*data-best="true"', shown) == [str(best["task"])], shown[-3000:]
    chart = re.search(r'<svg class="scatter".*?</svg>', shown, re.S)
    assert chart and 'class="x-title"' in chart.group(0) and '<circle class="best"' in chart.group(0), shown[-3000:]
    problems = every_variant(box, f"jobs/{job_id}", "sweep-finished", artifacts)
    assert not problems, "\n".join(problems)


def test_alice_compares_a_sweeps_trials_with_two_jobs_and_bob_cannot_open_them(box, clients, api, compared,
                                                                              artifacts):
    """Her experiments page lists the four runs; the comparison shows the hyperparameters that differ, best
    and final values with their epochs, overlaid curves with axes, per-class AUROC beside the paper's and the
    lineage; bob gets 404 for its link and its JSON; it reads at both widths and themes."""
    runs = f"{compared['first']},{compared['second']},{compared['sweep']}:0,{compared['sweep']}:1"
    listed = api(clients["alice"], "GET", "experiments")
    assert listed.status_code == 200, listed.text[-2000:]
    assert set(runs.split(",")) <= {r["run"] for r in listed.json()["runs"]}, listed.text[-2000:]
    answer = api(clients["alice"], "GET", f"experiments/compare?runs={runs}")
    assert answer.status_code == 200, answer.text[-2000:]
    shown = answer.json()
    assert [r["run"] for r in shown["runs"]] == runs.split(",")
    assert {"batch_size", "lr"} <= {h["name"] for h in shown["hyperparameters"]}, shown["hyperparameters"]
    assert all(h["differs"] for h in shown["hyperparameters"]), shown["hyperparameters"]
    mean = next(m for m in shown["metrics"] if m["key"] == "auroc/mean")["runs"]
    assert all(m["final_epoch"] == 1 and m["best"] is not None for m in mean), mean
    assert len(shown["per_class_auroc"]) == 15 and shown["per_class_auroc"][0]["paper"], shown["per_class_auroc"]
    assert all(r["lineage"]["fields"] for r in shown["runs"]), [r["lineage"] for r in shown["runs"]]
    text = page(box, browser(box.hub, "alice"), f"experiments/compare?runs={runs}").text
    assert 'id="params"' in text and 'id="per-class"' in text and 'id="lineage"' in text, text[-3000:]
    curves = re.findall(r'<svg class="curves".*?</svg>', text, re.S)
    assert curves and all('class="x-title"' in c for c in curves), text[-3000:]
    assert api(clients["bob"], "GET", f"experiments/compare?runs={runs}").status_code == 404
    # She names and tags a run (kept by the dashboard, on both boxes); bob cannot.
    label = {"run": compared["first"], "name": "batch 8 baseline", "tags": ["baseline"]}
    named = api(clients["alice"], "POST", "experiments/label", json=label)
    assert named.status_code == 200 and named.json()["tags"] == ["baseline"], named.text[-2000:]
    tagged = api(clients["alice"], "GET", "experiments?tag=baseline").json()["runs"]
    assert [(r["run"], r["label"]) for r in tagged] == [(compared["first"], "batch 8 baseline")], tagged
    assert api(clients["bob"], "POST", "experiments/label", json={**label, "name": "mine"}).status_code == 404
    assert runs.split(",")[0] not in {r["run"] for r in api(clients["bob"], "GET", "experiments").json()["runs"]}
    page(box, browser(box.hub, "bob"), f"experiments/compare?runs={runs}", status=404)
    problems = every_variant(box, "experiments", "experiments", artifacts)
    problems += every_variant(box, f"experiments/compare?runs={runs}", "compare", artifacts)
    assert not problems, "\n".join(problems)


# --- in Chromium: every page through axe, and the notification when a job ends -----------------------------------

# The browser's own Notification, recorded as the page makes one (localStorage: the pages share it): permission is
# the browser's to give, and it gives it only to a secure context (https, or localhost).
RECORD_REAL_NOTIFICATIONS = """(() => {
  const Real = window.Notification;
  if (!Real) { return; }
  function Recording(title, options) {
    const notes = JSON.parse(localStorage.getItem("test-notes") || "[]");
    notes.push({title: title, body: options && options.body, tag: options && options.tag});
    localStorage.setItem("test-notes", JSON.stringify(notes));
    return new Real(title, options);
  }
  Object.defineProperty(Recording, "permission", {get: () => Real.permission});
  Recording.requestPermission = (...args) => Real.requestPermission(...args);
  window.Notification = Recording;
})();"""
NOTES = "() => JSON.parse(localStorage.getItem('test-notes') || '[]')"


def trusted_certificate_flags(hub: Hub) -> list[str]:
    """Chromium's flags to trust exactly the certificate an https hub serves (its public key's SHA-256; Python's
    requests check it against the box's CA): none for an http hub on loopback (a secure context already)."""
    if not hub.url.startswith("https://"):
        return []
    host, port = hub.url.removeprefix("https://").split(":")
    pem = ssl.get_server_certificate((host, int(port)), ca_certs=hub.ca)
    key = subprocess.run(["openssl", "x509", "-pubkey", "-noout"], input=pem.encode(), capture_output=True,
                         check=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=key, capture_output=True,
                         check=True).stdout
    return [f"--ignore-certificate-errors-spki-list={base64.b64encode(hashlib.sha256(der).digest()).decode()}"]


@pytest.fixture
def chromium(box, artifacts):
    """alice's Chromium, logged in through the hub's form, notifications allowed for the hub's origin."""
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=FLAGS + trusted_certificate_flags(box.hub))
        context = launched.new_context(viewport=WIDE, reduced_motion="reduce")
        context.grant_permissions(["notifications"], origin=box.hub.url)
        context.add_init_script(RECORD_REAL_NOTIFICATIONS)
        shown = context.new_page()
        try:
            log_in(shown, box.hub, "alice", PASSWORDS["alice"])
            shown.wait_for_url(lambda url: "/hub/login" not in url)
            yield shown
        finally:
            context.close()
            launched.close()


def look(page, box: Box, path: str, name: str, artifacts: Path) -> list[str]:
    """Open a dashboard page in the browser: 200, a screenshot (journey-<box>-<name>.png), axe's problems."""
    answer = page.goto(f"{box.hub.url}{PORTAL}{path}")
    assert answer is not None and answer.status == 200, f"{path}: {answer and answer.status}\n{box.hub_log()}"
    page.screenshot(path=str(artifacts / f"journey-{box.name}-{name}.png"), full_page=True)
    return axe_problems(page, f"journey-{box.name}-{name}", artifacts)


def every_variant(box: Box, path: str, name: str, artifacts: Path) -> list[str]:
    """A dashboard page as alice sees it at 1280 and 375 px, light and dark: a screenshot of each
    (journey-<box>-<name>-<width>-<theme>.png), axe's problems, and whether it scrolls sideways."""
    problems: list[str] = []
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=FLAGS + trusted_certificate_flags(box.hub))
        try:
            for viewport, theme in VARIANTS:
                label = f"journey-{box.name}-{name}-{viewport['width']}-{theme}"
                context = new_context(launched, viewport, theme)
                try:
                    shown = context.new_page()
                    log_in(shown, box.hub, "alice", PASSWORDS["alice"])
                    shown.wait_for_url(lambda url: "/hub/login" not in url)
                    answer = shown.goto(f"{box.hub.url}{PORTAL}{path}")
                    assert answer is not None and answer.status == 200, f"{label}: {answer and answer.status}"
                    assert shown.get_attribute("html", "data-bs-theme") == theme, label
                    shown.screenshot(path=str(artifacts / f"{label}.png"), full_page=True)
                    problems += axe_problems(shown, label, artifacts)
                    if overflow := horizontal_overflow(shown):
                        problems.append(f"{label}: the page scrolls sideways: {overflow}")
                finally:
                    context.close()
        finally:
            launched.close()
    return problems


def test_in_chromium_every_page_passes_axe_and_a_job_that_ends_is_notified(box, chromium, clients, api, made,
                                                                          artifacts):
    page = chromium
    page.goto(f"{box.hub.url}{PORTAL}jobs")
    assert page.evaluate("() => window.isSecureContext"), f"{box.hub.url} is not a secure context"
    page.click("#notify-toggle")  # the browser asks; the origin was granted it, as a person would
    playwright.expect(page.locator("#notify-toggle")).to_have_attribute("aria-pressed", "true")
    response = api(clients["alice"], "POST", "jobs", json=TINY)
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    made.append(job_id)
    problems = look(page, box, "submit", "submit", artifacts)
    problems += look(page, box, f"jobs/{job_id}", "job-submitted", artifacts)
    for name in ("templates", "usage", "cluster"):
        problems += look(page, box, name, name, artifacts)
    problems += look(page, box, "jobs", "jobs", artifacts)  # stays open: the toggle reads her jobs each period
    # The page stays open on her jobs meanwhile. A job that failed says so here, not as a note that never came.
    job = ended(box, clients, api, job_id, JOB_WAIT_S)
    assert job["state"] == "COMPLETED", (job, log_end(box, clients, job_id))
    title = f"Job {job_id} COMPLETED"
    page.wait_for_function(f"() => ({NOTES})().some((note) => note.title === {title!r})",
                           timeout=NOTE_WAIT_S * 1000)
    note = next(n for n in page.evaluate(NOTES) if n["title"] == title)
    # Its AUROC is in the note when the dashboard had read the job's last epoch by the look that saw it end.
    assert note["tag"] == f"dsportal-job-{job_id}" and note["body"].startswith(f"{TINY_MODEL}, "), note
    wait_for(lambda: job_now(box, clients, api, job_id)["best_mean_auroc"] is not None, 60, interval=3,
             what=f"job {job_id}'s final metrics")
    problems += look(page, box, f"jobs/{job_id}", "job-completed", artifacts)
    shown = page.goto(f"{box.hub.url}{PORTAL}jobs/{job_id}/log")  # plain text, not a page: no axe
    assert shown is not None and shown.status == 200 and "text/plain" in shown.headers["content-type"]
    assert re.search(r"rank \d of 1 on ", page.text_content("body")), page.text_content("body")[-2000:]
    assert not problems, "\n".join(problems)
