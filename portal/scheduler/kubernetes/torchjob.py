"""A torchrun job (the launcher `torchrun`, portal/launchers/torchrun.py) on Kubernetes as plain objects, as sites
run PyTorch without an operator (Kubernetes 1.20 has no Indexed Jobs, and Kubeflow's trainer needs 1.31): pure
builders, unit-tested without a cluster; `portal.scheduler.kubernetes.jobs` creates them.

- the record Job (named by the job id, its annotations the spec): one pod, node 0, hostname `<id>-0`, which is
  rank 0 (`ranked_first`), numbers the runs and trains (torchrun.k8s.sh); a pod lost with its node is made again
  and resumes;
- a workers Job of `nodes - 1` pods (torchrun.k8s-worker.sh) that join each run naming them.

Every node's torchrun meets the others in a FileStore in the job's directory on the user's home (a directory only its
owner can enter: torchrun-rendezvous.sh), never on a port of a pod's, which any pod of the cluster could reach: no
pod declares a port and the job has no Service. The workers Job is owned by the record, so deleting it (a cancel)
removes both. Every pod asks for one node's share (CPUs, memory, GPUs): the namespace's ResourceQuota counts
`nodes x gpus_per_node`, as on Slurm.
"""

from __future__ import annotations

from portal.config import PortalConfig
from portal.records.spec import JobSpec, minutes_of
from portal.records.templating import launch_template
from portal.scheduler.kubernetes.manifests import (
    ANNOTATION_WORKER_PODS,
    LABEL_JOB,
    LABEL_ROLE,
    RESTARTS,
    STOP_GRACE_S,
    WATCH_EVERY_S,
    WORKER_POLL_S,
    job_labels,
    job_metadata,
    launcher_values,
    lost_node_tolerations,
    node_resources,
    one_per_node,
    pod_job_dir,
    pod_template,
    training_volumes,
)

HEARTBEAT_S = 5  # each node touches its file in the job's nodes/ directory this often
STALE_S = 20  # a node whose file is older is lost: its run is stopped


def node0_hostname(job_id: str) -> str:
    """Node 0's hostname (its pod's name is the record Job's, with a suffix)."""
    return f"{job_id}-0"


def ranked_first(node0_address: str, worker_pod: str) -> bool:
    """Whether torchrun makes node 0 rank 0: it ranks the nodes by the address each gives (sorted), node 0 gives its
    IP address (torchrun.k8s.sh: --local-addr), a worker its pod's name (its FQDN: the name, without a subdomain)."""
    return sorted([node0_address, worker_pod])[0] == node0_address


def torchrun_job_objects(spec: JobSpec, job_id: str, user: str, cfg: PortalConfig, partition: str, *,
                         plain: bool = True, submitted_at: str = "",
                         keys: tuple[str, str] | None = None) -> tuple[dict, list[dict]]:
    """(the record Job, [its workers Job], none for one node). Plain objects always (`plain` and `keys` are other
    launchers': where the site runs MPIJobs, a torchrun program is not offered, records.limits_for)."""
    namespace = cfg.user_namespace(user)
    job_dir = pod_job_dir(cfg, job_id)
    host0 = node0_hostname(job_id)
    values = {**launcher_values(cfg, spec), "spec": spec, "job_id": job_id, "job_dir": job_dir, "host0": host0,
              "heartbeat_s": HEARTBEAT_S, "stale_s": STALE_S, "restarts": RESTARTS,
              "watch_every": WATCH_EVERY_S, "worker_poll": WORKER_POLL_S, "stop_grace": STOP_GRACE_S}
    resources = node_resources(spec)
    mounts, volumes = training_volumes(cfg, user)
    selector = {cfg.k8s_gpu_node_label: partition} if spec.gpus_per_node else None
    labels = job_labels(user, job_id)
    deadline = minutes_of(spec.time_limit) * 60

    def pod(role: str, script: str) -> dict:
        container = {"name": "node", "image": cfg.k8s_image, "imagePullPolicy": cfg.k8s_image_pull_policy,
                     "command": ["/bin/bash", "-c", script],
                     "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                             {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                     "resources": {"requests": dict(resources), "limits": dict(resources)},
                     "volumeMounts": mounts}
        template = pod_template({**labels, LABEL_ROLE: role}, container, volumes, selector, time_limit=spec.time_limit)
        template["spec"].update(restartPolicy="Never", tolerations=lost_node_tolerations(), enableServiceLinks=False,
                                automountServiceAccountToken=False, terminationGracePeriodSeconds=STOP_GRACE_S)
        one_per_node(template, {LABEL_JOB: job_id})  # node 0's pod and the workers' are the job's nodes
        if role == "launcher":
            template["spec"].update(hostname=host0)
        return template

    node0 = pod("launcher", launch_template(spec, "k8s.sh").render(**values))
    metadata = job_metadata(spec, job_id, user, cfg, submitted_at)
    metadata["annotations"][ANNOTATION_WORKER_PODS] = str(spec.nodes - 1)
    # A node-0 pod lost with its machine is made again (it resumes); the wall time is the job's deadline.
    record = {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
              "spec": {"backoffLimit": RESTARTS, "activeDeadlineSeconds": deadline, "template": node0}}
    owned: list[dict] = []
    if spec.nodes > 1:
        workers = spec.nodes - 1
        owned.append({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{job_id}-workers", "namespace": namespace, "labels": labels},
            "spec": {"parallelism": workers, "completions": workers, "backoffLimit": workers * (RESTARTS + 1),
                     "activeDeadlineSeconds": deadline,
                     "template": pod("worker", launch_template(spec, "k8s-worker.sh").render(**values))}})
    return record, owned
