"""The Kubernetes path against a real kube-apiserver (v1.20.2, etcd, controller-manager; no nodes).

What the API server itself must enforce for the portal: the MPIJob CRD's schema, and RBAC with impersonation
keeping each user in their own namespace.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
import uuid

import pytest

from deploy.kubernetes import kubebox
from deploy.kubernetes.kubebox import ApiError, impersonating, resource
from deploy.kubernetes.kubeparts import nodes
from portal.scheduler.kubernetes.manifests import LABEL_USER, USER_ROLE

MPIJOB = ("kubeflow.org/v2beta1", "MPIJob")
ALICE_NS, BOB_NS = kubebox.user_namespace("alice"), kubebox.user_namespace("bob")


def pod_template(name: str, gpus: int) -> dict:
    container = {"name": name, "image": "dsportal/training:latest", "command": ["sleep", "infinity"]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {"metadata": {"labels": {"app": "chexnet"}}, "spec": {"containers": [container]}}


def mpijob(name: str | None = None, **spec: object) -> dict:
    """A 2-worker, 2-GPU-per-worker CheXNet MPIJob, with `spec` fields replaced."""
    body = {
        "apiVersion": MPIJOB[0], "kind": MPIJOB[1],
        "metadata": {"name": name or f"chexnet-{uuid.uuid4().hex[:8]}"},
        "spec": {
            "slotsPerWorker": 2,
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": pod_template("launcher", 0)},
                "Worker": {"replicas": 2, "restartPolicy": "Never", "template": pod_template("worker", 2)},
            },
        },
    }
    body["spec"].update(copy.deepcopy(spec))
    return body


def jobs(api):
    """The MPIJobs as client `api` reaches them: .create(body=, namespace=), .get(name=, namespace=), .delete(...)."""
    return resource(api, *MPIJOB)


def job_names(api, namespace: str) -> list[str]:
    return [job["metadata"]["name"] for job in jobs(api).get(namespace=namespace).to_dict()["items"]]


def refused(api, namespace: str, body: dict) -> ApiError:
    with pytest.raises(ApiError) as caught:
        jobs(api).create(body=body, namespace=namespace)
    return caught.value


# --- the CRD's schema ------------------------------------------------------------------------------


def test_valid_mpijob_is_accepted_with_defaults(kube):
    created = jobs(kube.admin).create(body=mpijob("valid"), namespace=ALICE_NS).to_dict()
    try:
        spec = created["spec"]
        assert spec["slotsPerWorker"] == 2
        assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
        # Defaults from the schema, filled in by the server.
        assert spec["mpiImplementation"] == "OpenMPI"
        assert spec["sshAuthMountPath"] == "/root/.ssh"
        # The pod template is kept as written (preserved, not pruned).
        worker = spec["mpiReplicaSpecs"]["Worker"]["template"]
        assert worker["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
        assert worker["metadata"]["labels"] == {"app": "chexnet"}
    finally:
        jobs(kube.admin).delete(name="valid", namespace=ALICE_NS)


def test_slots_per_worker_as_a_string_is_refused(kube):
    err = refused(kube.admin, ALICE_NS, mpijob(slotsPerWorker="2"))
    assert err.status == 422, err
    assert "spec.slotsPerWorker" in str(err)


@pytest.mark.parametrize("keys", [("Launcher", "Trainer"), ("Launcher", "Worker", "Evaluator"), ("Worker",),
                                  ("Launcher", "worker")])
def test_replica_keys_other_than_launcher_and_worker_are_refused(kube, keys):
    replica = {"replicas": 1, "template": pod_template("x", 0)}
    err = refused(kube.admin, ALICE_NS, mpijob(mpiReplicaSpecs={key: replica for key in keys}))
    assert err.status == 422, err
    assert "spec.mpiReplicaSpecs" in str(err)


@pytest.mark.parametrize("field, value", [("mpiImplementation", "LAM"), ("slotsPerWorker", 0)])
def test_values_outside_the_schema_are_refused(kube, field, value):
    err = refused(kube.admin, ALICE_NS, mpijob(**{field: value}))
    assert err.status == 422 and f"spec.{field}" in str(err), err


def test_restart_policy_outside_the_enum_is_refused(kube):
    body = mpijob()
    body["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    err = refused(kube.admin, ALICE_NS, body)
    assert err.status == 422 and "restartPolicy" in str(err), err


def test_unknown_spec_fields_are_pruned_by_the_structural_schema(kube):
    # v1.20 drops fields the schema does not name, silently (newer servers can refuse them instead).
    created = jobs(kube.admin).create(body=mpijob("pruned", gpusPerWorker=8), namespace=ALICE_NS).to_dict()
    try:
        assert "gpusPerWorker" not in created["spec"]
        assert "gpusPerWorker" not in kube.read(*MPIJOB, "pruned", ALICE_NS)["spec"]
    finally:
        jobs(kube.admin).delete(name="pruned", namespace=ALICE_NS)


# --- RBAC: each user in their own namespace, whether acting with a token or impersonated by the hub --------


@pytest.fixture(params=["own-token", "impersonated-by-hub"])
def as_user(kube, request):
    """A function: user name -> a client acting as that user, one way or the other."""
    if request.param == "own-token":
        return {"alice": kube.alice, "bob": kube.bob}.__getitem__
    return lambda name: kubebox.as_user(kube.hub, name)


def test_user_creates_lists_and_deletes_jobs_in_own_namespace(kube, as_user):
    alice = as_user("alice")
    name = jobs(alice).create(body=mpijob(), namespace=ALICE_NS).metadata.name
    assert name in job_names(alice, ALICE_NS)
    assert jobs(alice).get(name=name, namespace=ALICE_NS).spec.slotsPerWorker == 2
    jobs(alice).delete(name=name, namespace=ALICE_NS)
    assert name not in job_names(alice, ALICE_NS)


def test_user_cannot_touch_another_users_namespace(kube, as_user):
    theirs = jobs(kube.admin).create(body=mpijob(), namespace=BOB_NS).metadata.name
    alice = as_user("alice")
    try:
        for attempt in (lambda: jobs(alice).get(namespace=BOB_NS),
                        lambda: jobs(alice).get(name=theirs, namespace=BOB_NS),
                        lambda: jobs(alice).create(body=mpijob(), namespace=BOB_NS),
                        lambda: jobs(alice).delete(name=theirs, namespace=BOB_NS),
                        lambda: resource(alice, "v1", "Pod").get(namespace=BOB_NS)):
            with pytest.raises(ApiError) as caught:
                attempt()
            assert caught.value.status == 403, caught.value
        assert theirs in job_names(as_user("bob"), BOB_NS)
    finally:
        jobs(kube.admin).delete(name=theirs, namespace=BOB_NS)


def test_user_cannot_create_pods_or_see_the_hub_namespace(kube, as_user):
    alice = as_user("alice")
    for attempt in (lambda: resource(alice, "v1", "Pod").create(body=pod("direct"), namespace=ALICE_NS),
                    lambda: resource(alice, "v1", "Pod").get(namespace=kubebox.HUB_NAMESPACE),
                    lambda: resource(alice, "v1", "Secret").get(namespace=ALICE_NS)):
        with pytest.raises(ApiError) as caught:
            attempt()
        assert caught.value.status == 403, caught.value


def test_hub_cannot_impersonate_the_masters_group(kube):
    # The hub may impersonate users but only the group dsportal-users: never system:masters.
    masters = impersonating(kube.hub, "kube-admin", "system:masters")
    with pytest.raises(ApiError) as caught:
        resource(masters, "v1", "Secret").get(namespace="kube-system")
    assert caught.value.status == 403 and "impersonate" in str(caught.value), caught.value


def test_users_cannot_impersonate(kube):
    bob_as_alice = impersonating(kube.bob, kubebox.user_principal("alice"))
    with pytest.raises(ApiError) as caught:
        jobs(bob_as_alice).get(namespace=ALICE_NS)
    assert caught.value.status == 403, caught.value


def test_ensure_user_namespace_is_idempotent_and_checks_names(kube):
    assert kubebox.ensure_user_namespace(kube.hub, "alice") == ALICE_NS
    namespace = kube.read("v1", "Namespace", ALICE_NS)
    assert namespace["metadata"]["labels"][LABEL_USER] == "alice"
    binding = kube.read("rbac.authorization.k8s.io/v1", "RoleBinding", USER_ROLE, ALICE_NS)
    assert binding["roleRef"]["name"] == "dsportal-user"
    assert {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dsportal:alice"} in binding["subjects"]
    for bad in ("Alice", "al_ice", "-alice", "a" * 60, ""):
        with pytest.raises(ValueError, match="user name"):
            kubebox.ensure_user_namespace(kube.hub, bad)


# --- Pods: admitted with their ServiceAccount, scheduled onto a node -------------------------------------


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "lab", "image": "dsportal/notebook:latest",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def create_when_admitted(api, namespace: str, body: dict, timeout: float = 30) -> dict:
    """Create a Pod, retrying while its namespace's `default` ServiceAccount (or its token) is still being made
    by the controller-manager: the ServiceAccount admission plugin refuses pods until both exist."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return resource(api, "v1", "Pod").create(body=body, namespace=namespace).to_dict()
        except ApiError as err:
            if "service account" not in str(err).lower() or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def test_pod_in_user_namespace_gets_default_service_account_and_a_node(kube):
    created = create_when_admitted(kube.admin, ALICE_NS, pod("pending"))
    try:
        assert created["spec"]["serviceAccountName"] == "default"
        volumes = [v for v in created["spec"]["volumes"] if v.get("secret", {}).get("secretName", "")
                   .startswith("default-token-")]
        assert volumes, f"no ServiceAccount token volume in {created['spec']['volumes']}"
        # The scheduler binds it to a node of the GPU; its image exists nowhere, so the kubelet says so.
        deadline = time.monotonic() + 30
        while True:
            current = kube.read("v1", "Pod", "pending", ALICE_NS)
            waiting = [s["state"].get("waiting", {}).get("reason")
                       for s in current["status"].get("containerStatuses") or []]
            if waiting and waiting[0] in ("ErrImagePull", "ImagePullBackOff"):
                break
            assert time.monotonic() < deadline, \
                f"{json.dumps(current['status'].get('conditions'))}; nodes: {nodes.unschedulable(kube.box)}"
            time.sleep(0.5)
        assert current["spec"]["nodeName"].startswith(kube.box.name)
        assert current["status"]["phase"] == "Pending"
    finally:  # at once: a pod on its way out still counts against alice's GPU quota
        resource(kube.admin, "v1", "Pod").delete(name="pending", namespace=ALICE_NS, grace_period_seconds=0)


def test_hub_creates_a_pod_in_its_namespace(kube):
    created = create_when_admitted(kube.hub, kubebox.HUB_NAMESPACE, pod("jupyter-alice"))
    try:
        assert created["metadata"]["namespace"] == kubebox.HUB_NAMESPACE
        pods = resource(kube.hub, "v1", "Pod").get(namespace="dsportal").to_dict()["items"]
        names = [p["metadata"]["name"] for p in pods]
        assert "jupyter-alice" in names
    finally:
        resource(kube.hub, "v1", "Pod").delete(name="jupyter-alice", namespace=kubebox.HUB_NAMESPACE)


def test_hub_cannot_read_secrets_or_bind_other_roles_outside_its_namespace(kube):
    with pytest.raises(ApiError) as caught:  # kube-system's ServiceAccount tokens would make it an admin
        resource(kube.hub, "v1", "Secret").get(namespace="kube-system")
    assert caught.value.status == 403
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "escalate", "namespace": ALICE_NS},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
               "subjects": [{"kind": "ServiceAccount", "name": "dsportal-hub", "namespace": "dsportal"}]}
    with pytest.raises(ApiError) as caught:  # `bind` only on dsportal-user and dsportal-hub-in-user-namespace
        resource(kube.hub, binding["apiVersion"], "RoleBinding").create(body=binding, namespace=ALICE_NS)
    assert caught.value.status == 403


def test_foreground_delete_of_an_mpijob_completes(kube):
    # The portal cancels with propagationPolicy=Foreground: the garbage collector must finish it.
    alice = kubebox.as_user(kube.hub, "alice")
    name = jobs(alice).create(body=mpijob(), namespace=ALICE_NS).metadata.name
    jobs(alice).delete(name=name, namespace=ALICE_NS, propagation_policy="Foreground")
    deadline = time.monotonic() + 20
    while name in job_names(alice, ALICE_NS):
        assert time.monotonic() < deadline, f"MPIJob {name} still there 20 s after a foreground delete"
        time.sleep(0.3)


# --- the box itself -------------------------------------------------------------------------------------


def test_second_up_reuses_state_and_keeps_running(kube):
    def digest() -> dict:
        return {name: hashlib.sha256(kube.box.path(*name.split("/")).read_bytes()).hexdigest()
                for name in ("tls/ca.pem", "tls/apiserver.pem", "tls/sa.key", "auth/tokens.json")}
    before, pids = digest(), kubebox.status(kube.box)
    assert all(pids.values()), pids
    lines: list[str] = []
    cluster = kubebox.up(kube.box, report=lines.append)
    assert digest() == before
    assert kubebox.status(kube.box) == pids
    assert any("already running" in line for line in lines), lines
    # The kubeconfig written again still names alice with her token: she lists her namespace's MPIJobs as the
    # session's client of hers does (a token made anew would be refused, 401).
    assert job_names(kubebox.from_kubeconfig(cluster.kubeconfigs["alice"]), ALICE_NS) == job_names(kube.alice,
                                                                                                   ALICE_NS)
