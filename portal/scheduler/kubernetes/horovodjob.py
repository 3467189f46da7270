"""A Horovod job on Kubernetes (the launcher `horovod`, portal/launchers/horovod.py): pure builders, unit-tested
without a cluster; `portal.scheduler.kubernetes.jobs` creates what they build. One of two shapes (setting `k8s_jobs`):

- "plain" (the default; no operator needed), as NetApp's procedure runs Horovod: a launcher Job (the job's record,
  named by the job id) running mpirun over ssh, a workers Job of `spec.nodes` pods running sshd, and a Secret with
  the job's ssh key, both owned by the launcher Job so that deleting it removes all (`plain_job_objects`);
- "mpijob": an MPIJob (kubeflow.org/v2beta1) for clusters that run the Kubeflow MPI Operator (`mpijob_manifest`).
"""

from __future__ import annotations

from portal.config import PortalConfig
from portal.records.spec import JobSpec, minutes_of
from portal.records.templating import launch_template
from portal.scheduler.kubernetes.client import new_ssh_key
from portal.scheduler.kubernetes.manifests import (
    API_VERSION,
    DATA,
    HOME,
    KIND,
    LABEL_JOB,
    LABEL_ROLE,
    LABEL_USER,
    LAUNCHER_RESOURCES,
    RESTARTS,
    SHM,
    SSH,
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
    record_annotations,
    site_programs_volume,
)

SSH_PORT = 2222  # each worker pod's sshd (as the notebook user, so not 22)
LAUNCH_ATTEMPTS = 3  # a Horovod run that started no process (a new pod's policy not programmed yet), again
SSH_ATTEMPTS = 10  # mpirun's ssh to a worker that refuses, once a second (its NetworkPolicy being programmed)
SSH_DIR = "/etc/dsportal-ssh"  # the job's Secret, mounted read-only
PROBE_AGAIN_S = 3  # a worker that did not answer is asked again after this; lost only when it fails twice
SERVE_POLL_S = 2  # a worker looks for workers-done, and for its published file, this often


def horovod_job_objects(spec: JobSpec, job_id: str, user: str, cfg: PortalConfig, partition: str, *, plain: bool,
                        submitted_at: str = "", keys: tuple[str, str] | None = None) -> tuple[dict, list[dict]]:
    """(the record, [what it owns]): plain objects, or where the site runs MPIJobs (`plain` False) the MPIJob alone.
    `keys`: a plain job's (private, public) ssh key, made here when None."""
    if not plain:
        return mpijob_manifest(spec, job_id, user, cfg, partition, submitted_at=submitted_at), []
    private_key, public_key = keys or new_ssh_key()
    return plain_job_objects(spec, job_id, user, cfg, partition, private_key=private_key, public_key=public_key,
                             submitted_at=submitted_at)


def launcher_script(spec: JobSpec, job_id: str, job_dir: str, cfg: PortalConfig) -> str:
    return launch_template(spec, "mpijob.sh").render(
        spec=spec, job_id=job_id, job_dir=job_dir, **launcher_values(cfg, spec))


def mpijob_manifest(spec: JobSpec, job_id: str, user: str, cfg: PortalConfig, partition: str,
                    submitted_at: str = "") -> dict:
    """The MPIJob for a validated spec: a launcher running mpirun, `spec.nodes` workers with
    `slotsPerWorker` = GPUs per worker pod, the data set (read-only), the user's home and /dev/shm in memory."""
    job_dir = pod_job_dir(cfg, job_id)
    labels = {"app.kubernetes.io/part-of": "dsportal", "app.kubernetes.io/component": "training",
              LABEL_USER: user, LABEL_JOB: job_id}
    mounts = [{"name": HOME, "mountPath": cfg.k8s_home_mount}]
    home = {"name": HOME, "persistentVolumeClaim": {"claimName": cfg.home_claim(user)}}
    worker_resources = node_resources(spec)
    site_mounts, site_volumes = site_programs_volume(cfg)  # where a site's program runs on the workers
    launcher = {"name": "launcher", "image": cfg.k8s_image, "imagePullPolicy": cfg.k8s_image_pull_policy,
                "command": ["/bin/bash", "-c", launcher_script(spec, job_id, job_dir, cfg)],
                "resources": {"requests": dict(LAUNCHER_RESOURCES), "limits": dict(LAUNCHER_RESOURCES)},
                "volumeMounts": mounts}
    worker = {"name": "worker", "image": cfg.k8s_image, "imagePullPolicy": cfg.k8s_image_pull_policy,
              "resources": {"requests": dict(worker_resources), "limits": dict(worker_resources)},
              "volumeMounts": [*mounts, {"name": DATA, "mountPath": cfg.k8s_data_mount, "readOnly": True},
                               {"name": SHM, "mountPath": "/dev/shm"}, *site_mounts]}
    worker_volumes = [home, {"name": DATA, "persistentVolumeClaim": {"claimName": cfg.k8s_data_claim,
                                                                     "readOnly": True}},
                      {"name": SHM, "emptyDir": {"medium": "Memory", "sizeLimit": f"{cfg.k8s_shm_gb}Gi"}},
                      *site_volumes]
    selector = {cfg.k8s_gpu_node_label: partition} if spec.gpus_per_node else None
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": job_id, "namespace": cfg.user_namespace(user), "labels": labels,
                     "annotations": record_annotations(spec, cfg, submitted_at)},
        "spec": {
            "slotsPerWorker": spec.workers_per_node,
            "mpiImplementation": "OpenMPI",
            # No retries (a failed training is a result to read, not to repeat); the wall time as a deadline;
            # finished pods are removed but the MPIJob (the record) is kept.
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0,
                          "activeDeadlineSeconds": minutes_of(spec.time_limit) * 60},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never",
                             "template": pod_template(labels, launcher, [home], time_limit=spec.time_limit)},
                "Worker": {"replicas": spec.nodes, "restartPolicy": "Never",
                           "template": one_per_node(pod_template({**labels, LABEL_ROLE: "worker"}, worker,
                                                                 worker_volumes, selector, time_limit=spec.time_limit),
                                                    {LABEL_JOB: job_id, LABEL_ROLE: "worker"})},
            },
        },
    }


def plain_job_objects(spec: JobSpec, job_id: str, user: str, cfg: PortalConfig, partition: str, *,
                      private_key: str, public_key: str, submitted_at: str = "") -> tuple[dict, list[dict]]:
    """A Horovod job with plain objects: (the launcher Job, [its Secret, the workers Job]). The two are created
    after the launcher, with an owner reference to it (`owned_by`), so the garbage collector deletes them with
    it; the launcher waits for the workers itself (horovod.k8s.sh)."""
    job_dir = pod_job_dir(cfg, job_id)
    secret_name, workers_name = f"{job_id}-ssh", f"{job_id}-workers"
    home = {"name": HOME, "persistentVolumeClaim": {"claimName": cfg.home_claim(user)}}
    mounts = [{"name": HOME, "mountPath": cfg.k8s_home_mount}, {"name": SSH, "mountPath": SSH_DIR, "readOnly": True}]
    ssh = {"name": SSH, "secret": {"secretName": secret_name, "defaultMode": 0o440}}
    values = {"spec": spec, "job_id": job_id, "job_dir": job_dir, "ssh_port": SSH_PORT}
    launcher_script = launch_template(spec, "k8s.sh").render(
        **values, **launcher_values(cfg, spec), key_file=f"{SSH_DIR}/id_ed25519", restarts=RESTARTS,
        watch_every=WATCH_EVERY_S, worker_poll=WORKER_POLL_S, stop_grace=STOP_GRACE_S, ssh_attempts=SSH_ATTEMPTS,
        launch_attempts=LAUNCH_ATTEMPTS, probe_again_s=PROBE_AGAIN_S)
    worker_script = launch_template(spec, "k8s-worker.sh").render(
        **values, authorized_keys=f"{SSH_DIR}/authorized_keys", serve_poll_s=SERVE_POLL_S)
    worker_resources = node_resources(spec)
    site_mounts, site_volumes = site_programs_volume(cfg)  # where a site's program runs on the workers
    deadline = minutes_of(spec.time_limit) * 60
    tolerations = lost_node_tolerations()  # the workers Job replaces a lost node's pods on the nodes left
    launcher = {"name": "launcher", "image": cfg.k8s_image, "imagePullPolicy": cfg.k8s_image_pull_policy,
                "command": ["/bin/bash", "-c", launcher_script],
                "resources": {"requests": dict(LAUNCHER_RESOURCES), "limits": dict(LAUNCHER_RESOURCES)},
                "volumeMounts": mounts}
    worker = {"name": "worker", "image": cfg.k8s_image, "imagePullPolicy": cfg.k8s_image_pull_policy,
              "command": ["/bin/bash", "-c", worker_script],
              "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                      {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
              "ports": [{"name": "ssh", "containerPort": SSH_PORT}],
              "readinessProbe": {"tcpSocket": {"port": SSH_PORT}, "periodSeconds": 10},
              "resources": {"requests": dict(worker_resources), "limits": dict(worker_resources)},
              "volumeMounts": [*mounts, {"name": DATA, "mountPath": cfg.k8s_data_mount, "readOnly": True},
                               {"name": SHM, "mountPath": "/dev/shm"}, *site_mounts]}
    worker_volumes = [home, ssh, {"name": DATA, "persistentVolumeClaim": {"claimName": cfg.k8s_data_claim,
                                                                          "readOnly": True}},
                      {"name": SHM, "emptyDir": {"medium": "Memory", "sizeLimit": f"{cfg.k8s_shm_gb}Gi"}},
                      *site_volumes]
    selector = {cfg.k8s_gpu_node_label: partition} if spec.gpus_per_node else None
    labels = job_labels(user, job_id)

    def pod(role: str, container: dict, volumes: list[dict], node_selector=None) -> dict:
        template = pod_template({**labels, LABEL_ROLE: role}, container, volumes, node_selector,
                                time_limit=spec.time_limit)
        template["spec"].update(restartPolicy="Never", tolerations=tolerations, enableServiceLinks=False,
                                automountServiceAccountToken=False, terminationGracePeriodSeconds=STOP_GRACE_S)
        if role == "worker":  # the worker pods are the job's nodes; the launcher may share one's node
            one_per_node(template, {LABEL_JOB: job_id, LABEL_ROLE: "worker"})
        return template

    launcher_job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": job_metadata(spec, job_id, user, cfg, submitted_at),
        # A launcher pod lost with its node is made again (it resumes); the wall time is the job's deadline.
        "spec": {"backoffLimit": RESTARTS, "activeDeadlineSeconds": deadline,
                 "template": pod("launcher", launcher, [home, ssh])}}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": secret_name, "namespace": cfg.user_namespace(user), "labels": labels},
              "stringData": {"id_ed25519": private_key, "authorized_keys": public_key}}
    workers = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": workers_name, "namespace": cfg.user_namespace(user), "labels": labels},
        "spec": {"parallelism": spec.nodes, "completions": spec.nodes, "backoffLimit": spec.nodes * (RESTARTS + 1),
                 "activeDeadlineSeconds": deadline,
                 "template": pod("worker", worker, worker_volumes, selector)}}
    return launcher_job, [secret, workers]
