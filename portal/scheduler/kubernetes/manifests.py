"""Pure builders of the Kubernetes path: a validated spec (or a user) in, a manifest out; unit-tested without a
cluster. `portal.scheduler.kubernetes.scheduler` submits them; the spawner and deploy/kubernetes/kubebox.py build a
user's namespace with the same functions.

What every training job's objects share (its record's metadata, its pods' template, volumes and tolerations) is
here; the objects of a single run are its launcher's (portal.records.launchers: `horovodjob.py`, `torchjob.py`).

A sweep (plain only) is one Job, the record, of `trials` completions and `parallel` pods at once, each pod one
trial on one node (`sweep_job_manifest`, programkit.sweep's `claim`).
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Mapping
from typing import Any

from portal.config import PortalConfig
from portal.records.programs import NAME_PATTERN
from portal.records.record import JOBS_ROOT, now_utc
from portal.records.spec import JobSpec, minutes_of
from portal.records.sweep import SweepPlan
from portal.records.templating import exported, job_environment, launch_template, program_of, program_values
from portal.scheduler.kubernetes.tracking import TRACKING_FILE
from programkit.sweep import EXIT_FINISHED, PLAN_FILE
from programkit.sweepclaims import HEARTBEAT_S, STALE_CLAIM_S

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v2beta1", "mpijobs", "MPIJob"
API_VERSION = f"{GROUP}/{VERSION}"
LABEL_USER, LABEL_JOB = "dsportal/user", "dsportal/job-id"
ANNOTATION_SPEC, ANNOTATION_SUBMITTED = "dsportal/spec", "dsportal/submitted-at"
ANNOTATION_SWEEP = "dsportal/sweep"  # a sweep's plan, on its Job
ANNOTATION_TIME_LIMIT = "dsportal/time-limit-minutes"  # on each pod of a job (pod_template)
ANNOTATION_TRIALS = "dsportal/trials"  # on each trial pod of a sweep: its trials, all rounds together
# How many worker pods run beside a torchrun job's node 0 (a Horovod job's workers are its nodes): on its record.
ANNOTATION_WORKER_PODS = "dsportal/worker-pods"
# The cluster whose directory under ~/jobs holds the job's files (portal.records.record.cluster_jobs_dir); a job
# submitted before clusters had directories of their own has none, and its files are in ~/jobs/<id>.
ANNOTATION_CLUSTER = "dsportal/cluster"
GPU_RESOURCE = "nvidia.com/gpu"
USER_ROLE = "dsportal-user"  # the ClusterRole of deploy/kubernetes/rbac.yaml, bound in each user's namespace
# mpirun and its ssh sessions, idle but for the start: the work is in the workers. Half a CPU, so that it fits
# beside a node pod on a node the cluster's own pods use a little of (each node pod has a node of its own).
LAUNCHER_RESOURCES = {"cpu": "500m", "memory": "2Gi"}
HOME, DATA, SHM, SSH, SITE = "home", "data", "dshm", "ssh", "site-programs"  # volume names
LABEL_ROLE = "dsportal/role"  # launcher or worker, on a plain job's pods
HOME_CLAIM_SIZE = "20Gi"  # what a user's home claim asks for (KubeSpawner's storage_capacity, the same)
# A plain job's launcher runs again from the last checkpoint when a worker pod is lost, at most this often; its
# pods leave a lost node after LOST_NODE_S (the default toleration is 300 s), and the workers Job replaces them.
RESTARTS, LOST_NODE_S = 2, 30
WATCH_EVERY_S = 10  # the launcher looks whether every worker still answers this often
WORKER_POLL_S = 0.5  # the launcher looks for its workers' sshd this often until all answer
STOP_GRACE_S = 10  # a cancelled job's pods: bash (sshd's and mpirun's parent) does not stop on SIGTERM
CARD_IN_LOG_BYTES = 64 * 1024  # the model card a script copies into its pod's log (a card is a few KB)
# The launchers' own lines in a pod's log start with the program's name, "chexnet: " or "chexnet-torch: "; the readers
# take any registered name's form (portal.scheduler.kubernetes.records).
PROGRAM_SAYS = rf"{NAME_PATTERN}: "
MODEL_CARD_WORDS = "model card "  # card-in-log.sh: "<program>: model card ", then the card's JSON

# What a dry run's YAML (KubernetesScheduler.render) says first: checked against the settings, not the cluster.
DRY_RUN_NOTE = ("# Checked against the configured limits (k8s_max_nodes, k8s_node_gpus, k8s_node_cpus,\n"
                "# k8s_node_memory_gb, the group GPU quotas), not against the cluster: the API server, the\n"
                "# namespace's ResourceQuota and the scheduler decide at submit.\n")

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
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": cfg.user_principal(user)},
                     {"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
    }


def gpu_quota_manifest(cfg: PortalConfig, user: str, gpu_quota: int) -> dict:
    """The user's group GPU quota as a ResourceQuota, so the API server refuses more GPUs than the quota even
    to a request that never went through the portal."""
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "dsportal-gpus", "namespace": cfg.user_namespace(user), "labels": _labels(user)},
            "spec": {"hard": {f"requests.{GPU_RESOURCE}": str(gpu_quota)}}}


def quota_in_force(quota: Mapping[str, Any]) -> bool:
    """Whether the quota controller has counted a ResourceQuota since its `spec` last changed (its status.hard is
    the spec's). Until then the API server admits every pod in the namespace without counting it (its admission
    checks only the limits in status.hard), and the controller's own first count may miss a pod it has not seen
    yet, leaving it out of `used` until its next full count (minutes): so no pod is made before."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    return bool(hard) and ((quota.get("status") or {}).get("hard") or {}) == hard


def home_claim_manifest(cfg: PortalConfig, user: str) -> dict:
    """The user's home claim as KubeSpawner makes it on their first server: made by the portal too, so that a job
    submitted before any server has a home to write to."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": cfg.home_claim(user), "namespace": cfg.user_namespace(user), "labels": _labels(user)},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": HOME_CLAIM_SIZE}}}}


def user_namespace_objects(cfg: PortalConfig, user: str, gpu_quota: int) -> list[dict]:
    """What makes a user's namespace theirs (the spawner applies these after KubeSpawner creates it): their
    RoleBinding and their GPU quota."""
    return [user_role_binding(cfg, user), gpu_quota_manifest(cfg, user, gpu_quota)]


def launcher_values(cfg: PortalConfig, spec: JobSpec) -> dict[str, Any]:
    """What every launcher script (MPIJob or plain) renders mpirun and the training command with."""
    environment = job_environment(cfg, shlex.quote(cfg.k8s_home_mount.rstrip("/")), TRACKING_FILE)
    values = program_values(spec, cfg)
    return {**values, "venv_bin": values["program_bin"], "portal_python": str(cfg.venv / "bin" / "python"),
            "job_env": environment,
            "card_bytes": CARD_IN_LOG_BYTES, "card_line": f"{program_of(spec).name}: {MODEL_CARD_WORDS}",
            "trainer_args": cfg.jobs_trainer_args,
            "map_by": cfg.jobs_mpi_map_by, "bind_to": cfg.jobs_mpi_bind_to, "mpirun_args": cfg.jobs_mpirun_args,
            "exported": exported(environment)}


def node_resources(spec: JobSpec) -> dict[str, str]:
    """What one node's pod of the job asks for (and is limited to): its workers' CPUs, the memory, its GPUs."""
    resources = {"cpu": str(spec.cpus_per_task * spec.workers_per_node), "memory": f"{spec.memory_gb}Gi"}
    if spec.gpus_per_node:
        resources[GPU_RESOURCE] = str(spec.gpus_per_node)
    return resources


def pod_template(labels: Mapping[str, str], container: dict, volumes: list[dict],
                  node_selector: Mapping[str, str] | None = None, *, time_limit: str) -> dict:
    """A job's pod, which says its job's time limit in minutes (ANNOTATION_TIME_LIMIT: what the weekly budget
    charges ahead for its GPUs, portal.scheduler.kubernetes.holders)."""
    spec: dict[str, Any] = {"containers": [container], "volumes": volumes,
                            # The image's notebook user; the home volume is theirs.
                            "securityContext": {"runAsUser": 1000, "runAsGroup": 100, "fsGroup": 100}}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"metadata": {"labels": dict(labels), "annotations": {
        "sidecar.istio.io/inject": "false", ANNOTATION_TIME_LIMIT: str(minutes_of(time_limit))}}, "spec": spec}


def one_per_node(template: dict, match: Mapping[str, str]) -> dict:
    """`template` with each of its job's node pods (the pods `match` selects) on a node of its own, as `-N` does on
    Slurm: a 2-node job runs on two nodes, or waits for them (a node's GPUs are one pod's); the fit check counts so
    (limits_for: own_nodes)."""
    template["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": dict(match)}}]}}
    return template


def manifest_yaml(manifest: Mapping[str, Any]) -> str:
    """A manifest as people read it: keys in the order built, scripts as literal blocks, no YAML anchors."""
    import yaml  # type: ignore[import-untyped,unused-ignore]  # which of the two: mypy cache

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def text(dumper: yaml.SafeDumper, value: str):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    return yaml.dump(manifest, Dumper=Dumper, sort_keys=False, width=120)


def job_labels(user: str, job_id: str) -> dict[str, str]:
    return {"app.kubernetes.io/part-of": "dsportal", "app.kubernetes.io/component": "training",
            LABEL_USER: user, LABEL_JOB: job_id}


def job_metadata(spec: JobSpec, job_id: str, user: str, cfg: PortalConfig, submitted_at: str) -> dict:
    """The record a job's top object carries: its name is the job id, its labels whose it is, its annotations the
    spec and the submit time."""
    return {"name": job_id, "namespace": cfg.user_namespace(user), "labels": job_labels(user, job_id),
            "annotations": record_annotations(spec, cfg, submitted_at)}


def record_annotations(spec: JobSpec, cfg: PortalConfig, submitted_at: str) -> dict[str, str]:
    return {ANNOTATION_SPEC: json.dumps(spec.to_dict(), sort_keys=True),
            ANNOTATION_SUBMITTED: submitted_at or now_utc(), ANNOTATION_CLUSTER: cfg.cluster_name}


def pod_job_dir(cfg: PortalConfig, job_id: str) -> str:
    """The job's directory as its pods see the user's home: <k8s_home_mount>/jobs/<cluster_name>/<id>."""
    return posixpath.join(cfg.k8s_home_mount, JOBS_ROOT, cfg.cluster_name, job_id)


def sweep_job_manifest(spec: JobSpec, plan: SweepPlan, job_id: str, user: str, cfg: PortalConfig, partition: str,
                       submitted_at: str = "") -> dict:
    """A sweep as one Job: `plan.trials` completions, `plan.parallel` pods at once, each pod one trial of one node
    (horovod.k8s-trial.sh). The Job is the record (its annotations hold the spec and the plan); a pod lost with
    its node is made again by the Job and takes its task over. The deadline is every round of trials' wall time."""
    job_dir = pod_job_dir(cfg, job_id)
    plan_json = json.dumps(plan.file_dict(), sort_keys=True)
    script = launch_template(spec, "k8s-trial.sh").render(
        spec=spec, plan=plan, job_id=job_id, job_dir=job_dir, plan_json=plan_json, plan_file=PLAN_FILE,
        finished_exit=EXIT_FINISHED, heartbeat_s=HEARTBEAT_S, stale_s=int(STALE_CLAIM_S), **launcher_values(cfg, spec))
    resources = node_resources(spec)
    trial = {"name": "trial", "image": cfg.k8s_image, "imagePullPolicy": cfg.k8s_image_pull_policy,
             "command": ["/bin/bash", "-c", script],
             "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
             "resources": {"requests": dict(resources), "limits": dict(resources)}}
    trial["volumeMounts"], volumes = training_volumes(cfg, user)
    selector = {cfg.k8s_gpu_node_label: partition} if spec.gpus_per_node else None
    labels = {**job_labels(user, job_id), LABEL_ROLE: "trial"}
    template = pod_template(labels, trial, volumes, selector, time_limit=spec.time_limit)
    template["metadata"]["annotations"][ANNOTATION_TRIALS] = str(plan.trials)
    template["spec"].update(restartPolicy="Never", tolerations=lost_node_tolerations(), enableServiceLinks=False,
                            automountServiceAccountToken=False, terminationGracePeriodSeconds=STOP_GRACE_S)
    rounds = -(-plan.trials // plan.parallel)
    metadata = job_metadata(spec, job_id, user, cfg, submitted_at)
    metadata["annotations"][ANNOTATION_SWEEP] = plan_json
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
            # Every pod lost with a node is one failure; a task's trial fails inside its pod, which exits 0.
            "spec": {"completions": plan.trials, "parallelism": plan.parallel,
                     "backoffLimit": plan.trials * RESTARTS,
                     "activeDeadlineSeconds": minutes_of(spec.time_limit) * 60 * rounds,
                     "template": template}}


def training_volumes(cfg: PortalConfig, user: str) -> tuple[list[dict], list[dict]]:
    """(mounts, volumes) of a pod that trains without ssh (a sweep's trial, a torchrun job's node): the user's home,
    the data set read-only, /dev/shm in memory."""
    mounts: list[dict] = [{"name": HOME, "mountPath": cfg.k8s_home_mount},
              {"name": DATA, "mountPath": cfg.k8s_data_mount, "readOnly": True},
              {"name": SHM, "mountPath": "/dev/shm"}]
    volumes: list[dict] = [
        {"name": HOME, "persistentVolumeClaim": {"claimName": cfg.home_claim(user)}},
        {"name": DATA, "persistentVolumeClaim": {"claimName": cfg.k8s_data_claim, "readOnly": True}},
        {"name": SHM, "emptyDir": {"medium": "Memory", "sizeLimit": f"{cfg.k8s_shm_gb}Gi"}}]
    site_mounts, site_volumes = site_programs_volume(cfg)
    return mounts + site_mounts, volumes + site_volumes


def site_programs_volume(cfg: PortalConfig) -> tuple[list[dict], list[dict]]:
    """(mounts, volumes) of the site's programs' claim (k8s_site_programs_claim), read-only at site_python_path,
    which the jobs' PYTHONPATH names (portal.config_programs); none where it is not set."""
    if not cfg.k8s_site_programs_claim:
        return [], []
    return ([{"name": SITE, "mountPath": cfg.site_python_path, "readOnly": True}],
            [{"name": SITE, "persistentVolumeClaim": {"claimName": cfg.k8s_site_programs_claim, "readOnly": True}}])


def lost_node_tolerations() -> list[dict]:
    """A lost node's pods go after LOST_NODE_S (not the default 300 s), so their Job replaces them elsewhere."""
    return [{"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": LOST_NODE_S} for taint in ("unreachable", "not-ready")]


def owned_by(manifest: Mapping[str, Any], owner: Mapping[str, Any]) -> dict:
    """`manifest` with an owner reference to `owner` (as the API server returned it, with its uid)."""
    meta = owner["metadata"]
    reference = {"apiVersion": owner.get("apiVersion", "batch/v1"), "kind": owner.get("kind", "Job"),
                 "name": meta["name"], "uid": meta["uid"], "blockOwnerDeletion": True}
    return {**manifest, "metadata": {**manifest["metadata"], "ownerReferences": [reference]}}
