"""The toy launcher on Kubernetes (launcher.py's KUBERNETES), built from the portal's own pieces
(portal.scheduler.kubernetes.manifests) as its launchers' builders are: the record Job's one pod is rank 0, which
trains (toyrun.k8s.sh); a workers Job of `nodes - 1` pods, ranks 1 and on, each on a node of its own, which end at
once (toyrun.k8s-worker.sh: the toy trains on rank 0 alone). No pod listens on anything."""

from __future__ import annotations

from portal.config import PortalConfig
from portal.records.spec import JobSpec, minutes_of
from portal.records.templating import launch_template
from portal.scheduler.kubernetes.manifests import (
    ANNOTATION_WORKER_PODS,
    LABEL_JOB,
    LABEL_ROLE,
    job_labels,
    job_metadata,
    launcher_values,
    node_resources,
    one_per_node,
    pod_job_dir,
    pod_template,
    training_volumes,
)


def toy_job_objects(spec: JobSpec, job_id: str, user: str, cfg: PortalConfig, partition: str, *,
                    plain: bool = True, submitted_at: str = "",
                    keys: tuple[str, str] | None = None) -> tuple[dict, list[dict]]:
    """(the record Job, [its workers Job], none for one node)."""
    values = {**launcher_values(cfg, spec), "spec": spec, "job_id": job_id, "job_dir": pod_job_dir(cfg, job_id)}
    resources = node_resources(spec)
    mounts, volumes = training_volumes(cfg, user)
    selector = {cfg.k8s_gpu_node_label: partition} if spec.gpus_per_node else None
    labels = job_labels(user, job_id)
    deadline = minutes_of(spec.time_limit) * 60

    def pod(role: str, script: str) -> dict:
        container = {"name": "node", "image": cfg.k8s_image, "imagePullPolicy": cfg.k8s_image_pull_policy,
                     "command": ["/bin/bash", "-c", script],
                     "resources": {"requests": dict(resources), "limits": dict(resources)}, "volumeMounts": mounts}
        template = pod_template({**labels, LABEL_ROLE: role}, container, volumes, selector, time_limit=spec.time_limit)
        template["spec"].update(restartPolicy="Never", enableServiceLinks=False, automountServiceAccountToken=False)
        one_per_node(template, {LABEL_JOB: job_id})
        return template

    metadata = job_metadata(spec, job_id, user, cfg, submitted_at)
    metadata["annotations"][ANNOTATION_WORKER_PODS] = str(spec.nodes - 1)
    record = {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
              "spec": {"backoffLimit": 0, "activeDeadlineSeconds": deadline,
                       "template": pod("launcher", launch_template(spec, "k8s.sh").render(**values))}}
    if spec.nodes == 1:
        return record, []
    workers = spec.nodes - 1
    return record, [{
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"{job_id}-workers", "namespace": cfg.user_namespace(user), "labels": labels},
        "spec": {"parallelism": workers, "completions": workers, "backoffLimit": 0, "activeDeadlineSeconds": deadline,
                 "template": pod("worker", launch_template(spec, "k8s-worker.sh").render(**values))}}]
