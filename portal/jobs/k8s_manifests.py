"""Pure builders of the Kubernetes path: a validated spec (or a user) in, a manifest out; unit-tested without a
cluster. `portal.scheduler.kubernetes` submits them; the spawner and deploy/kubernetes/kubebox.py build a user's
namespace with the same functions.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

from portal.config import PortalConfig
from portal.jobs.record import now_utc
from portal.jobs.spec import JobSpec, minutes_of
from portal.jobs.templating import template_environment
from portal.scheduler.slurm import MPI_EXPORTED, nccl_environment

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v2beta1", "mpijobs", "MPIJob"
API_VERSION = f"{GROUP}/{VERSION}"
LABEL_USER, LABEL_JOB = "dsportal/user", "dsportal/job-id"
ANNOTATION_SPEC, ANNOTATION_SUBMITTED = "dsportal/spec", "dsportal/submitted-at"
GPU_RESOURCE = "nvidia.com/gpu"
USER_ROLE = "dsportal-user"  # the ClusterRole of deploy/kubernetes/rbac.yaml, bound in each user's namespace
LAUNCHER_RESOURCES = {"cpu": "1", "memory": "2Gi"}  # mpirun and its ssh sessions; the work is in the workers
HOME, DATA, SHM = "home", "data", "dshm"  # volume names


def user_principal(cfg: PortalConfig, user: str) -> str:
    """Portal user `user` as Kubernetes knows them: the name the portal impersonates and RBAC binds."""
    return f"{cfg.k8s_user_prefix}{user}"


def _labels(user: str) -> dict[str, str]:
    return {"app.kubernetes.io/part-of": "dsportal", LABEL_USER: user}


def user_namespace_manifest(cfg: PortalConfig, user: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": cfg.user_namespace(user), "labels": _labels(user)}}


def user_role_binding(cfg: PortalConfig, user: str) -> dict:
    """The role `dsportal-user` (deploy/kubernetes/rbac.yaml) in the user's namespace, for the user as the portal
    impersonates them and for their pods' service account (notebooks submit jobs with it)."""
    namespace = cfg.user_namespace(user)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": USER_ROLE, "namespace": namespace, "labels": _labels(user)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USER_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user_principal(cfg, user)},
                     {"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
    }


def gpu_quota_manifest(cfg: PortalConfig, user: str, gpu_quota: int) -> dict:
    """The user's group GPU quota as a ResourceQuota, so the API server refuses more GPUs than the quota even
    to a request that never went through the portal."""
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "dsportal-gpus", "namespace": cfg.user_namespace(user), "labels": _labels(user)},
            "spec": {"hard": {f"requests.{GPU_RESOURCE}": str(gpu_quota)}}}


def user_namespace_objects(cfg: PortalConfig, user: str, gpu_quota: int) -> list[dict]:
    """What makes a user's namespace theirs (the spawner applies these after KubeSpawner creates it): their
    RoleBinding and their GPU quota."""
    return [user_role_binding(cfg, user), gpu_quota_manifest(cfg, user, gpu_quota)]


def launcher_script(spec: JobSpec, job_id: str, job_dir: str, cfg: PortalConfig) -> str:
    nccl = nccl_environment(cfg)
    return template_environment().get_template(f"{spec.template}.mpijob.sh").render(
        spec=spec, job_id=job_id, job_dir=job_dir, venv_bin=str(cfg.venv / "bin"),
        python=str(cfg.venv / "bin" / "python"), nccl_env=nccl, map_by=cfg.jobs_mpi_map_by,
        bind_to=cfg.jobs_mpi_bind_to, mpirun_args=cfg.jobs_mpirun_args,
        exported=(*MPI_EXPORTED, *(name for name, _ in nccl)))


def _pod_template(labels: Mapping[str, str], container: dict, volumes: list[dict],
                  node_selector: Mapping[str, str] | None = None) -> dict:
    spec: dict[str, Any] = {"containers": [container], "volumes": volumes,
                            # The image's notebook user; the home volume is theirs.
                            "securityContext": {"runAsUser": 1000, "runAsGroup": 100, "fsGroup": 100}}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"metadata": {"labels": dict(labels), "annotations": {"sidecar.istio.io/inject": "false"}}, "spec": spec}


def mpijob_manifest(spec: JobSpec, job_id: str, user: str, cfg: PortalConfig, partition: str,
                    submitted_at: str = "") -> dict:
    """The MPIJob for a validated spec: a launcher running mpirun, `spec.nodes` workers with
    `slotsPerWorker` = GPUs per worker pod, the data set (read-only), the user's home and /dev/shm in memory."""
    job_dir = posixpath.join(cfg.k8s_home_mount, "jobs", job_id)
    labels = {"app.kubernetes.io/part-of": "dsportal", "app.kubernetes.io/component": "training",
              LABEL_USER: user, LABEL_JOB: job_id}
    mounts = [{"name": HOME, "mountPath": cfg.k8s_home_mount}]
    home = {"name": HOME, "persistentVolumeClaim": {"claimName": cfg.home_claim(user)}}
    worker_resources: dict[str, str] = {"cpu": str(spec.cpus_per_task * spec.workers_per_node),
                                        "memory": f"{spec.memory_gb}Gi"}
    if spec.gpus_per_node:
        worker_resources[GPU_RESOURCE] = str(spec.gpus_per_node)
    launcher = {"name": "launcher", "image": cfg.k8s_image, "imagePullPolicy": cfg.k8s_image_pull_policy,
                "command": ["/bin/bash", "-c", launcher_script(spec, job_id, job_dir, cfg)],
                "resources": {"requests": dict(LAUNCHER_RESOURCES), "limits": dict(LAUNCHER_RESOURCES)},
                "volumeMounts": mounts}
    worker = {"name": "worker", "image": cfg.k8s_image, "imagePullPolicy": cfg.k8s_image_pull_policy,
              "resources": {"requests": dict(worker_resources), "limits": dict(worker_resources)},
              "volumeMounts": [*mounts, {"name": DATA, "mountPath": cfg.k8s_data_mount, "readOnly": True},
                               {"name": SHM, "mountPath": "/dev/shm"}]}
    worker_volumes = [home, {"name": DATA, "persistentVolumeClaim": {"claimName": cfg.k8s_data_claim,
                                                                     "readOnly": True}},
                      {"name": SHM, "emptyDir": {"medium": "Memory", "sizeLimit": f"{cfg.k8s_shm_gb}Gi"}}]
    selector = {cfg.k8s_gpu_node_label: partition} if spec.gpus_per_node else None
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": job_id, "namespace": cfg.user_namespace(user), "labels": labels,
                     "annotations": {ANNOTATION_SPEC: json.dumps(spec.to_dict(), sort_keys=True),
                                     ANNOTATION_SUBMITTED: submitted_at or now_utc()}},
        "spec": {
            "slotsPerWorker": spec.workers_per_node,
            "mpiImplementation": "OpenMPI",
            # No retries (a failed training is a result to read, not to repeat); the wall time as a deadline;
            # finished pods are removed but the MPIJob (the record) is kept.
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0,
                          "activeDeadlineSeconds": minutes_of(spec.time_limit) * 60},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never",
                             "template": _pod_template(labels, launcher, [home])},
                "Worker": {"replicas": spec.nodes, "restartPolicy": "Never",
                           "template": _pod_template(labels, worker, worker_volumes, selector)},
            },
        },
    }


def manifest_yaml(manifest: Mapping[str, Any]) -> str:
    """A manifest as people read it: keys in the order built, scripts as literal blocks, no YAML anchors."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def text(dumper: yaml.SafeDumper, value: str):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    return yaml.dump(manifest, Dumper=Dumper, sort_keys=False, width=120)
