"""Switching `scheduler` to kubernetes: a second hub (the test box's LDAP, the test session's real
kube-apiserver) spawns through PortalKubeSpawner. No nodes run here, so the pod stays Pending and the spawn
times out; the test reads what the hub asked the API server for: the pod, its claim, the user's namespace."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import kubernetes_validate
import pytest
import requests

from tests.conftest import PORT_OFFSET, REPO, TEST_STATE, Hub, wait_for
from tests.unit.test_jobs_kubernetes import KUBERNETES_VERSIONS

pytestmark = pytest.mark.integration
HUB_STATE = Path(os.environ.get("DSPORTAL_TEST_K8S_HUB_STATE", "/var/tmp/dsportal-test-k8s-hub"))
HUB_PORT = 18200 + PORT_OFFSET
ALICE_NS = "dsportal-u-alice"
# Short, on purpose: this box runs no node, so every spawn's pod stays Pending and the spawn ends at this timeout.
# The hub makes the pod within its spawn, so that is the wait for the pod too.
START_TIMEOUT_S = 20


@pytest.fixture(scope="module")
def k8s_hub(cluster, kube):
    """A hub with scheduler: kubernetes, beside the test box's Slurm hub (its own ports and state)."""
    shutil.rmtree(HUB_STATE, ignore_errors=True)
    (HUB_STATE / "hub").mkdir(parents=True)
    settings = {
        "state_dir": HUB_STATE, "hub_port": HUB_PORT, "hub_api_port": HUB_PORT + 81,
        "proxy_api_port": HUB_PORT + 1, "dashboard_port": HUB_PORT + 90, "cull_idle_timeout": 0,
        "ldap_port": cluster.ldap_port, "ldaps_port": cluster.ldaps_port, "ldap_ca_file": cluster.ca_file,
        "scheduler": "kubernetes", "k8s_kubeconfig": kube.kubeconfigs["hub"], "start_timeout": START_TIMEOUT_S,
        "slurm_conf": TEST_STATE / "slurm" / "slurm.conf",
    }
    config = HUB_STATE / "portal.yaml"
    config.write_text("".join(f"{k}: {v}\n" for k, v in settings.items()))
    log = (HUB_STATE / "hub.log").open("w")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DSPORTAL_")}, "DSPORTAL_CONFIG": str(config)}
    proc = subprocess.Popen([str(Path(sys.executable).with_name("jupyterhub")), "-f",
                             str(REPO / "jupyterhub_config.py")], cwd=HUB_STATE, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{HUB_PORT}"

    def up():
        if proc.poll() is not None:
            raise AssertionError(f"the Kubernetes hub exited ({proc.returncode}): {HUB_STATE}/hub.log")
        try:
            return requests.get(f"{url}/hub/api/", timeout=2).ok
        except requests.ConnectionError:
            return False
    try:
        wait_for(up, 60, what="the Kubernetes hub to answer")
        yield Hub(url)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the hub stops the proxy and the services it started
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def pod_or_none(kube) -> dict | None:
    try:
        return kube.read("v1", "Pod", "jupyter-alice", ALICE_NS)
    except Exception as err:  # kubebox.ApiError: 404 until the hub creates it
        if getattr(err, "status", None) == 404:
            return None
        raise


def test_alices_spawn_is_a_pod_with_two_v100s_her_volumes_and_her_namespace(k8s_hub, kube):
    alice = k8s_hub.login("alice")
    form = k8s_hub.spawn_form(alice, partition="v100", gpus="2", cpus="2", memory_gb="4", runtime="01:00:00")
    assert form.status_code in (200, 302), form.text[-2000:]
    try:
        pod = wait_for(lambda: pod_or_none(kube), START_TIMEOUT_S, interval=0.5, what="the hub to create alice's pod")
        spec = pod["spec"]
        (container,) = [c for c in spec["containers"] if c["name"] == "notebook"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
        assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
        assert spec["nodeSelector"] == {"nvidia": "v100"}
        assert spec["activeDeadlineSeconds"] == 3600
        assert pod["metadata"]["labels"]["dsportal/gpus"] == "2"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["home"]["persistentVolumeClaim"]["claimName"] == "home-alice"
        assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "chestxray14", "readOnly": True}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DSPORTAL_GROUPS"] == "datascientists,gpu-users"
        assert env["DSPORTAL_SCHEDULER"] == "kubernetes"
        assert pod["status"]["phase"] == "Pending"  # no nodes here
        rendered = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
                    "metadata": {k: pod["metadata"][k] for k in ("name", "namespace", "labels", "annotations")
                                 if k in pod["metadata"]}}
        for version in KUBERNETES_VERSIONS:  # what KubeSpawner rendered, checked offline as well
            kubernetes_validate.validate(rendered, version, strict=True)
        claim = kube.read("v1", "PersistentVolumeClaim", "home-alice", ALICE_NS)
        assert claim["metadata"]["name"] == "home-alice"
        quota = kube.read("v1", "ResourceQuota", "dsportal-gpus", ALICE_NS)
        assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}
        binding = kube.read("rbac.authorization.k8s.io/v1", "RoleBinding", "dsportal-user", ALICE_NS)
        assert {"dsportal:alice", "default"} <= {s["name"] for s in binding["subjects"]}
    finally:
        admin = k8s_hub.login("admin")
        k8s_hub.api(admin, "DELETE", "users/alice/server")
        wait_for(lambda: pod_or_none(kube) is None or pod_or_none(kube)["metadata"].get("deletionTimestamp"),
                 60, what="alice's pod to be deleted")


def test_the_rest_api_cannot_ask_for_a_count_that_is_not_a_profile(k8s_hub, kube):
    alice = k8s_hub.login("alice")
    wait_for(lambda: k8s_hub.server(alice, "alice") is None, 60, what="alice's server to be gone")
    response = k8s_hub.api(alice, "POST", "users/alice/server", json={"partition": "t4", "gpus": 3})
    assert response.status_code == 400, response.text
    assert "gpus: 3 is not a GPU profile; allowed: 0, 1, 2, 4" in response.json()["message"]
    time.sleep(1)
    assert pod_or_none(kube) is None  # nothing was created
