"""MPIJobs (k8s_jobs: mpijob) on the Kubernetes box's API server: what the server stores (validated by the CRD's
schema), states read from the conditions the MPI operator writes, cancel deletes, a notebook's own credentials
reach only its own namespace. The box runs no MPI operator (it is not packaged for Debian; the box runs training
as plain Jobs, test_training_on_kubernetes.py), so the state tests patch the status subresource with the
conditions the operator writes, as its own API (v2beta1) documents them: the one place a test writes a status."""

from __future__ import annotations

import dataclasses
import time

import pytest

from deploy.kubernetes import kubebox
from portal import jobs
from portal.config import load
from portal.scheduler.kubernetes.manifests import API_VERSION, KIND
from portal.scheduler.kubernetes.scheduler import KubernetesError
from tests.conftest import wait_for
from tests.kubernetes.conftest import ALICE, TINY

pytestmark = pytest.mark.integration


@pytest.fixture
def cfg(kube):
    return dataclasses.replace(load(), scheduler="kubernetes", k8s_kubeconfig=str(kube.kubeconfigs["hub"]),
                               k8s_jobs="mpijob")


def operator_says(kube, job: jobs.Job, *conditions: tuple[str, str]) -> None:
    """Patch the MPIJob's status subresource the way the MPI operator does: conditions of (type, reason)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"conditions": [{"type": kind, "status": "True", "reason": reason, "message": reason,
                              "lastTransitionTime": now, "lastUpdateTime": now} for kind, reason in conditions],
              "startTime": now}
    mpijobs = kubebox.resource(kube.admin, API_VERSION, KIND)
    mpijobs.status.patch(body={"status": status}, name=job.id, namespace=f"dsportal-u-{job.record.user}",
                         content_type="application/merge-patch+json")


def stored(kube, job) -> dict:
    return kube.read(API_VERSION, KIND, job.id, f"dsportal-u-{job.record.user}")


def test_the_server_stores_the_mpijob_as_rendered(kube, cfg):
    # 2 nodes of 1 GPU (2 GPUs a node would be 2 CPUs a worker pod: two of those and the launcher can never fit the
    # box's nodes of 2 CPUs, and are refused at submit)
    job = jobs.submit({**TINY, "nodes": 2, "gpus_per_node": 1}, user=ALICE[0], groups=ALICE[1], cfg=cfg)
    try:
        mpijob = stored(kube, job)
        assert mpijob["spec"]["slotsPerWorker"] == 1
        worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]
        assert worker["replicas"] == 2
        limits = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "1"
        assert worker["template"]["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        assert job.logs() == ""  # no launcher pod: no operator runs here
        assert job.metrics().images_per_sec is None
    finally:
        job.cancel()


# One case: the status subresource's round trip. Each condition's state is the unit tests' (tests/unit/portal/
# scheduler/kubernetes/test_manifests.py::test_the_state_comes_from_the_conditions).
@pytest.mark.parametrize(("conditions", "state"), [
    ((("Created", "MPIJobCreated"), ("Failed", "DeadlineExceeded")), "TIMEOUT"),
])
def test_states_follow_the_operators_conditions(kube, cfg, conditions, state):
    job = jobs.submit(TINY, user=ALICE[0], groups=ALICE[1], cfg=cfg)
    assert job.state == "PENDING"
    operator_says(kube, job, *conditions)
    assert job.state == state and job.done
    job.cancel()  # removes the finished job's record


def test_cancel_deletes_the_mpijob(kube, cfg):
    job = jobs.submit(TINY, user=ALICE[0], groups=ALICE[1], cfg=cfg)
    job.cancel()
    assert job.state == "CANCELLED"  # at once: deleting (foreground: its pods first), then gone

    def gone() -> bool:
        try:
            stored(kube, job)
        except Exception as err:  # kubebox.ApiError
            return getattr(err, "status", None) == 404
        return False
    wait_for(gone, 30, what=f"MPIJob {job.id} to be deleted")
    assert job.state == "CANCELLED"
    assert job.id not in [j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=cfg)]


def test_a_notebook_with_its_own_credentials_reaches_only_its_own_namespace(kube, monkeypatch):
    own = dataclasses.replace(load(), scheduler="kubernetes", k8s_kubeconfig=str(kube.kubeconfigs["alice"]))
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    monkeypatch.setenv("DSPORTAL_GROUPS", "datascientists,gpu-users")
    job = jobs.submit(TINY, cfg=own)  # as alice herself: no impersonation
    try:
        assert job.record.user == "alice" and job.state == "PENDING"
        with pytest.raises(KubernetesError) as refused:  # she may not act as bob
            jobs.jobs(user="bob", groups=["datascientists"], cfg=own)
        assert refused.value.status == 403
    finally:
        job.cancel()
