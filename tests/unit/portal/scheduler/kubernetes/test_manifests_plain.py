"""A plain Kubernetes job (k8s_jobs: plain, no operator), built and read without a cluster: the launcher Job and
what it owns, its scripts, its state from the Job and its pods, and its ssh key."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import kubernetes_validate
import pytest

from portal.quota import GpuQuota
from portal.scheduler.kubernetes.client import new_ssh_key
from portal.scheduler.kubernetes.holders import pod_holders, pod_queue
from portal.scheduler.kubernetes.horovodjob import plain_job_objects
from portal.scheduler.kubernetes.manifests import (
    ANNOTATION_SPEC,
    ANNOTATION_TIME_LIMIT,
    LABEL_JOB,
    LABEL_ROLE,
    owned_by,
)
from portal.scheduler.kubernetes.records import RUN_ENDED, limits_for, plain_job_state
from portal.scheduler.snapshot import ClusterSnapshot
from portal.service.summary import quota_of
from spawners.forms import OptionsError, parse_server_options
from tests.unit.helpers import K8S_CFG as CFG
from tests.unit.helpers import K8S_JOB_ID as JOB_ID
from tests.unit.helpers import KUBERNETES_VERSIONS, bash_syntax_ok, plain_job, pod_of_job, required_apart
from tests.unit.helpers import k8s_spec as spec


def objects(**raw):
    launcher, (secret, workers) = plain_job_objects(spec(**raw), JOB_ID, "alice", CFG, "v100", private_key="KEY",
                                                    public_key="ssh-ed25519 AAAA dsportal-job\n",
                                                    submitted_at="2026-11-21T10:15:00+00:00")
    return launcher, secret, workers


def test_two_nodes_is_a_launcher_job_a_workers_job_of_two_pods_and_a_secret():
    launcher, secret, workers = objects(nodes=2, gpus_per_node=4, cpus_per_task=2, memory_gb=64,
                                        time_limit="02:00:00")
    assert (launcher["kind"], launcher["metadata"]["name"]) == ("Job", JOB_ID)
    assert json.loads(launcher["metadata"]["annotations"][ANNOTATION_SPEC])["nodes"] == 2
    assert (workers["metadata"]["name"], workers["spec"]["parallelism"], workers["spec"]["completions"]) == \
        (f"{JOB_ID}-workers", 2, 2)
    worker = workers["spec"]["template"]["spec"]
    limits = worker["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}  # 4 workers x 2 CPUs
    assert worker["nodeSelector"] == {"nvidia": "v100"}
    assert required_apart(worker) == {LABEL_JOB: JOB_ID, LABEL_ROLE: "worker"}  # a node each; the launcher joins one
    assert "affinity" not in launcher["spec"]["template"]["spec"]
    assert workers["spec"]["template"]["metadata"]["labels"][LABEL_ROLE] == "worker"
    assert launcher["spec"]["template"]["metadata"]["labels"][LABEL_ROLE] == "launcher"
    assert launcher["spec"]["activeDeadlineSeconds"] == workers["spec"]["activeDeadlineSeconds"] == 7200
    assert secret["stringData"] == {"id_ed25519": "KEY", "authorized_keys": "ssh-ed25519 AAAA dsportal-job\n"}
    for job in (launcher, workers):  # no API access from the job's pods; a lost node's pods go in 30 s
        pod = job["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
        assert {t["tolerationSeconds"] for t in pod["tolerations"]} == {30}
        assert job["spec"]["template"]["metadata"]["annotations"][ANNOTATION_TIME_LIMIT] == "120"  # charged ahead


def test_what_the_launcher_owns_goes_with_it():
    _, secret, workers = objects()
    created = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB_ID, "uid": "u-1"}}
    for manifest in (secret, workers):
        (reference,) = owned_by(manifest, created)["metadata"]["ownerReferences"]
        assert reference == {"apiVersion": "batch/v1", "kind": "Job", "name": JOB_ID, "uid": "u-1",
                             "blockOwnerDeletion": True}
        assert "ownerReferences" not in manifest["metadata"]  # the builder's dict is not changed


def test_the_scripts_are_bash_and_wait_for_every_worker():
    launcher, _, workers = objects(nodes=3, gpus_per_node=2)
    launch = launcher["spec"]["template"]["spec"]["containers"][0]["command"][2]
    work = workers["spec"]["template"]["spec"]["containers"][0]["command"][2]
    bash_syntax_ok(launch)
    bash_syntax_ok(work)
    assert 'wait_for_pods answering "$job_dir/hosts.ready" 3 chexnet' in launch and "slots=2" in launch
    assert "mpirun -np 6 --hostfile" in launch and "plm_rsh_agent" in launch
    assert "--resume" in launch and "workers-done" in launch and "workers-done" in work
    assert f'echo "{RUN_ENDED} (exit status $1)" 2>/dev/null > /dev/termination-log' in launch
    assert "Port 2222" in work and "/usr/sbin/sshd -D -e" in work


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_objects_validate_strictly(version):
    launcher, secret, workers = objects(nodes=2, gpus_per_node=2)
    for manifest in (launcher, workers, pod_of_job(launcher), pod_of_job(workers)):
        kubernetes_validate.validate({**manifest, "metadata": {**manifest["metadata"]}}, version, strict=True)
    kubernetes_validate.validate(secret, version, strict=True)


def pod(role: str, phase: str, deleting: bool = False, message: str | None = None) -> dict:
    meta = {"labels": {LABEL_JOB: JOB_ID, LABEL_ROLE: role}, **({"deletionTimestamp": "x"} if deleting else {})}
    ended = [{"name": role, "state": {"terminated": {"exitCode": 2, "message": message}}}] if message else []
    return {"metadata": meta, "status": {"phase": phase, "containerStatuses": ended}}


ENDED = f"{RUN_ENDED} (exit status 2)\n"


@pytest.mark.parametrize(("conditions", "deleting", "pods", "state"), [
    ((), False, [], "PENDING"),
    ((), False, [pod("launcher", "Running"), pod("worker", "Running"), pod("worker", "Pending")], "PENDING"),
    ((), False, [pod("launcher", "Running"), pod("worker", "Running"), pod("worker", "Running")], "RUNNING"),
    ((), False, [pod("launcher", "Running"), pod("worker", "Running"), pod("worker", "Running", True)],
     "PENDING"),  # a lost worker being replaced
    ((("Complete", ""),), False, [], "COMPLETED"),
    ((("Failed", "BackoffLimitExceeded"),), False, [], "FAILED"),
    ((("Failed", "DeadlineExceeded"),), False, [], "TIMEOUT"),
    ((), True, [pod("launcher", "Running")], "CANCELLED"),
    # The launcher said its run failed: FAILED at once, while the Job makes its next pod (its backoff).
    ((), False, [pod("launcher", "Failed", message=ENDED), pod("worker", "Running")], "FAILED"),
    ((), False, [pod("launcher", "Failed", message=ENDED), pod("launcher", "Pending")], "FAILED"),
    # Only a launcher's word, and only that word: a worker's, or another message, is not the run's end.
    ((), False, [pod("launcher", "Running"), pod("worker", "Failed", message=ENDED)], "PENDING"),
    ((), False, [pod("launcher", "Failed", message="Error: something else"), pod("launcher", "Pending")],
     "PENDING"),
])
def test_the_state_comes_from_the_job_and_its_pods(conditions, deleting, pods, state):
    assert plain_job_state(plain_job(conditions, deleting), pods) == state


def test_each_job_gets_its_own_openssh_key():
    private, public = new_ssh_key()
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert public.startswith("ssh-ed25519 ") and public.endswith(" dsportal-job\n")
    assert new_ssh_key()[1] != public


def test_what_holds_the_users_gpus_comes_from_their_pods():
    def gpu_pod(name, gpus, phase="Running", job=None):
        labels = {LABEL_JOB: job} if job else {"component": "singleuser-server"}
        return {"metadata": {"name": name, "labels": labels}, "status": {"phase": phase},
                "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}
    pods = [gpu_pod("jupyter-alice", 1), gpu_pod("w-1", 2, job=JOB_ID), gpu_pod("w-2", 2, "Pending", job=JOB_ID),
            gpu_pod("launcher", 0, job=JOB_ID), gpu_pod("old", 4, "Succeeded", job="k8s-20261121-090000-000000")]
    holders = pod_holders(pods)
    assert [(h.describe(), h.gpus) for h in holders] == [("your server", 1), (f"job {JOB_ID}", 4)]
    configured = limits_for(CFG, ("gpu-users",))  # the spawn form: alice's quota 8, 5 held
    limits = dataclasses.replace(configured, quota=GpuQuota(configured.quota.limit, ("gpu-users",), holders))
    with pytest.raises(OptionsError) as refused:
        parse_server_options({"partition": "t4", "gpus": "4", "cpus": "1", "memory_gb": "2",
                              "runtime": "01:00:00"}, limits)
    assert f"(you use 5 of your 8 GPUs: your server, job {JOB_ID})" in str(refused.value)


def test_the_dashboards_queue_on_kubernetes_is_the_users_gpu_pods():
    """What quota_of reads on Slurm from squeue: per job (its pods together) and per server, only in the users'
    namespaces, only pods that have not ended; a job waits while any of its pods does, with the reason in words."""
    def gpu_pod(name, gpus, phase="Running", job=None, namespace="dsportal-u-alice", node="node1", waiting=""):
        labels = {LABEL_JOB: job} if job else {"component": "singleuser-server"}
        status = {"phase": phase, "startTime": "2026-11-26T10:00:00Z"}
        if waiting:
            status["conditions"] = [{"type": "PodScheduled", "status": "False", "message": waiting}]
        return {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "status": status,
                "spec": {"nodeName": node if phase == "Running" else None,
                         "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}
    other = "k8s-20261126-100000-bbbbbb"
    pods = [gpu_pod("jupyter-alice", 1), gpu_pod("w-1", 1, job=JOB_ID), gpu_pod("w-2", 1, job=JOB_ID, node="node2"),
            gpu_pod("launcher", 0, job=JOB_ID),
            gpu_pod("b-1", 2, "Pending", job=other, namespace="dsportal-u-bob",
                    waiting="0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
            gpu_pod("b-2", 2, job=other, namespace="dsportal-u-bob"),
            gpu_pod("old", 4, "Succeeded", job="k8s-20261121-090000-000000"),
            gpu_pod("elsewhere", 1, namespace="kube-system")]
    now = datetime(2026, 11, 26, 10, 5, 30, tzinfo=UTC)
    queue = pod_queue(pods, CFG.namespace_user, now)
    assert sorted(queue) == ["jupyter-alice", JOB_ID, other]
    server, job, bobs = queue["jupyter-alice"], queue[JOB_ID], queue[other]
    assert (server.user, server.state, server.gpus, server.name) == ("alice", "RUNNING", 1, "JupyterLab server")
    assert (job.state, job.gpus, job.nodes, job.node_list, job.elapsed) == ("RUNNING", 2, 2, "node1,node2", "5:30")
    assert (bobs.user, bobs.state, bobs.gpus) == ("bob", "PENDING", 4)
    assert bobs.reason == "none of the 2 nodes can run it now: 2 with too few free GPUs"
    assert (bobs.reason_words, bobs.waits_for_resources) == (bobs.reason, True)  # in words already, about the nodes
    assert (server.server, job.server, bobs.server) == (True, False, False)
    assert (job.reason_words, job.waits_for_resources) == ("", False)
    assert quota_of("alice", 4, ClusterSnapshot(taken_at=0, queue=queue))["gpus_in_use"] == 3
    # bob's pods labelled with alice's job id stay his, and hers stay 2 GPUs
    forged = pod_queue([*pods, gpu_pod("b-3", 4, job=JOB_ID, namespace="dsportal-u-bob")], CFG.namespace_user, now)
    assert (forged[JOB_ID].user, forged[JOB_ID].gpus) == ("alice", 2)
    assert (forged[f"dsportal-u-bob/{JOB_ID}"].user, forged[f"dsportal-u-bob/{JOB_ID}"].gpus) == ("bob", 4)
    assert quota_of("alice", 4, ClusterSnapshot(taken_at=0, queue=forged))["gpus_in_use"] == 3
