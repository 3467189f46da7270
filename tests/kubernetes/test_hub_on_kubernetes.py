"""Switching `scheduler` to kubernetes: a second hub (the test box's LDAP, the test session's Kubernetes box)
spawns through PortalKubeSpawner. alice's JupyterLab runs in a pod on one of the box's nodes, with her home and
the data set mounted and the template notebooks copied in, and the hub's proxy reaches it at /user/alice/; a
server that no node can hold fails within seconds, saying why; the REST API is held to the GPU profiles."""

from __future__ import annotations

import re
import time

import kubernetes_validate
import pytest
import requests

from tests.conftest import BUDGET_GROUP, BUDGET_HOURS, page_error, wait_for
from tests.integration.helpers import in_group, portal_client
from tests.kubernetes.conftest import START_TIMEOUT_S, TINY
from tests.unit.helpers import KUBERNETES_VERSIONS

pytestmark = pytest.mark.integration
ALICE_NS = "dsportal-u-alice"
FAILS_WITHIN_S = 15  # a pod that cannot start fails the spawn within this (KubeSpawner alone: START_TIMEOUT_S)


def pod_or_none(kube) -> dict | None:
    try:
        return kube.read("v1", "Pod", "jupyter-alice", ALICE_NS)
    except Exception as err:  # kubebox.ApiError: 404 until the hub creates it
        if getattr(err, "status", None) == 404:
            return None
        raise


def test_alice_reaches_jupyterlab_in_her_pod_with_her_gpu_volumes_and_notebooks(k8s_hub, kube):
    alice = k8s_hub.login("alice")
    form = k8s_hub.spawn_form(alice, partition="t4", gpus="1", cpus="1", memory_gb="2", runtime="01:00:00")
    assert form.status_code in (200, 302), page_error(form)
    try:
        events = k8s_hub.client(alice).progress_events("alice", START_TIMEOUT_S + 15)
        assert events[-1].get("ready"), events
        messages = [event.get("message", "") for event in events]
        assert any(m.startswith(f"Placed on node {kube.box.name}-node") for m in messages), messages
        # The kubelet's events in words, never its own (event_in_words). Which of them the stream shows is a race:
        # Kubernetes' events are sent after the fact, and the progress ends once JupyterLab answers (CI, 2026-12-03:
        # "Container started" came after it). Placing is minutes before, so it is always there.
        kubelet_words = {"The image is on the node", "Container created", "Container started: JupyterLab is starting"}
        assert kubelet_words & set(messages), messages
        assert not [m for m in messages if m.startswith(("Started container", "Created container", "Successfully"))]
        pod = kube.read("v1", "Pod", "jupyter-alice", ALICE_NS)
        assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"].startswith(kube.box.name)
        spec = pod["spec"]
        (container,) = [c for c in spec["containers"] if c["name"] == "notebook"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
        assert spec["nodeSelector"] == {"nvidia": "t4"}
        assert spec["activeDeadlineSeconds"] == 3600
        assert pod["metadata"]["labels"]["dsportal/gpus"] == "1"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["home"]["persistentVolumeClaim"]["claimName"] == "home-alice"
        assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "chestxray14", "readOnly": True}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DSPORTAL_GROUPS"] == "datascientists,gpu-users"
        assert env["DSPORTAL_SCHEDULER"] == "kubernetes"
        rendered = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
                    "metadata": {k: pod["metadata"][k] for k in ("name", "namespace", "labels", "annotations")
                                 if k in pod["metadata"]}}
        for version in KUBERNETES_VERSIONS:  # what KubeSpawner rendered, checked offline as well
            kubernetes_validate.validate(rendered, version, strict=True)
        claim = kube.read("v1", "PersistentVolumeClaim", "home-alice", ALICE_NS)
        assert claim["status"]["phase"] == "Bound" and claim["spec"]["volumeName"] == "dsportal-home-alice"
        quota = kube.read("v1", "ResourceQuota", "dsportal-gpus", ALICE_NS)
        assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}
        # Her pod was made after the quota controller had counted her new quota (the spawner waits for it), so the
        # API server counted it: `used` has it (within a moment of the read after the pod's create).
        wait_for(lambda: kube.read("v1", "ResourceQuota", "dsportal-gpus", ALICE_NS).get("status", {}).get("used") ==
                 {"requests.nvidia.com/gpu": "1"}, 30, what="her server's GPU alone in her quota's use")
        # The dashboard's usage counts her pod, as it counts a server's Slurm job.
        portal = portal_client(k8s_hub, "alice")

        def counted() -> dict | bool:
            answer = portal.get(f"{portal.base}usage", timeout=30)
            return answer.ok and answer.json()["quotas"][0]["gpus_in_use"] == 1 and answer.json()
        usage = wait_for(counted, 30, what="the dashboard to count her server")
        (held,) = usage["quotas"][0]["holders"]
        assert (held["job_id"], held["name"], held["state"], held["gpus"]) == \
            ("jupyter-alice", "JupyterLab server", "RUNNING", 1), usage
        binding = kube.read("rbac.authorization.k8s.io/v1", "RoleBinding", "dsportal-user", ALICE_NS)
        assert {"dsportal:alice", "default"} <= {s["name"] for s in binding["subjects"]}
        # JupyterLab, through the hub's proxy to the pod's address; its API lists the copied templates.
        lab = alice.get(f"{k8s_hub.url}/user/alice/lab", timeout=30)
        assert lab.status_code == 200 and "JupyterLab" in lab.text
        listing = wait_for(lambda: _templates(alice, k8s_hub.url), 30,
                           what="the template notebooks in her home")
        assert "02-train-chexnet-horovod.ipynb" in listing
        home = kube.box.path("volumes", "home", "alice", "notebooks")
        assert sorted(p.name for p in home.glob("*.ipynb")) == sorted(listing)  # on her volume, on this machine
        data = alice.get(f"{k8s_hub.url}/user/alice/api/contents/", timeout=30)
        assert data.status_code == 200
    finally:
        admin = k8s_hub.login("admin")
        k8s_hub.api(admin, "DELETE", "users/alice/server")
        wait_for(lambda: pod_or_none(kube) is None, 60, what="alice's pod to be deleted")


def _templates(session: requests.Session, url: str) -> list[str] | None:
    answer = session.get(f"{url}/user/alice/api/contents/notebooks", timeout=30)
    if answer.status_code != 200:
        return None
    return [item["name"] for item in answer.json()["content"] if item["name"].endswith(".ipynb")] or None


def test_a_server_no_node_can_hold_fails_in_seconds_saying_why(k8s_hub, kube):
    """The box has no v100 nodes: the scheduler can place the pod nowhere. The spawn fails at once with that in
    words (KubeSpawner alone would wait out start_timeout), and the pod is deleted."""
    alice = k8s_hub.login("alice")
    wait_for(lambda: k8s_hub.server(alice, "alice") is None, 60, what="alice's server to be gone")
    began = time.monotonic()
    answer = k8s_hub.api(alice, "POST", "users/alice/server",
                         json={"partition": "v100", "gpus": 1, "cpus": 1, "memory_gb": 2, "runtime": "01:00:00"})
    if answer.status_code == 503:  # failed before the hub answered (JupyterHub waits up to 10 s)
        message = answer.json()["message"]
    else:  # failed later: the progress stream says so, as the spawn-pending page shows it
        assert answer.status_code == 202, answer.text
        events = k8s_hub.client(alice).progress_events("alice", START_TIMEOUT_S)
        assert events[-1].get("failed"), events
        message = events[-1]["message"]
    took = time.monotonic() - began
    assert took < FAILS_WITHIN_S, (took, message)
    assert "Your server cannot start: none of the 2 nodes can run it now: 2 not of the GPU type asked for" in \
        message, message
    wait_for(lambda: pod_or_none(kube) is None, 60, what="the pod that could not start to be deleted")




def test_a_job_over_the_weekly_budget_is_refused_with_the_arithmetic_by_its_dashboard(k8s_hub, directory):
    """alice in the budget group (the Slurm test box's setting): Kubernetes keeps no accounting, so this week's use is
    the GPU watch's count where nodes' readers feed it, else unknown (this hub's: none here) and the whole budget is
    weighed; a job that could cost more is refused naming time_limit, with the arithmetic, as on Slurm."""
    with in_group(directory, BUDGET_GROUP, ("alice",), gid=10198):
        portal = portal_client(k8s_hub, "alice")  # a login gives the hub her groups; a submit reads them now
        refused = portal.post(f"{portal.base}jobs", json={**TINY, "time_limit": "168:00:00"}, timeout=60)
        if refused.status_code == 201:  # not refused: the job is cancelled, and the test fails below
            portal.delete(f"{portal.base}jobs/{refused.json()['id']}", timeout=60)
    k8s_hub.login("alice")  # her groups as they were, for the hub too
    assert refused.status_code == 400 and refused.json()["field"] == "time_limit", refused.text
    words = (r"time_limit: this job can cost up to 168 GPU-hours \(1 node x 1 GPU x 168 h\), more than your weekly "
             rf"{BUDGET_HOURS} GPU-hours \(this week's use unknown: GPU-hours are not counted here: [^)]*\); "
             rf"a time limit of at most {BUDGET_HOURS}:00:00 \({BUDGET_HOURS} h\) fits")
    assert re.match(words, refused.json()["error"]), refused.text
