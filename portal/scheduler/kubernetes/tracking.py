"""A training job's MLflow account on Kubernetes (docs/mlflow.md): a Secret of the job's own (`<job id>-mlflow`,
owned by its record, deleted with it) holding portal.mlflow_accounts.JOB_FILE, mounted read-only into every pod of
the job at TRACKING_FILE, where its rank 0 finds it (DSPORTAL_MLFLOW_FILE, which each launcher exports). The pods
cannot start before the Secret exists (the kubelet waits for it), so none trains without it."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import Any

from portal.mlflow_accounts import JOB_FILE, Account

TRACKING_DIR = "/etc/dsportal/mlflow"
TRACKING_FILE = posixpath.join(TRACKING_DIR, JOB_FILE)
VOLUME = "mlflow"


def secret_name(job_id: str) -> str:
    return f"{job_id}-mlflow"


def tracking_secret(account: Account, tags: dict[str, str], namespace: str, labels: dict[str, str],
                    job_id: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret_name(job_id), "namespace": namespace, "labels": dict(labels)},
            "stringData": {JOB_FILE: account.job_file(tags)}}


def pod_templates(manifest: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every pod template of a Job or an MPIJob (its launcher's and workers')."""
    spec = manifest.get("spec", {})
    if "template" in spec:
        yield spec["template"]
    for replica in (spec.get("mpiReplicaSpecs") or {}).values():
        yield replica["template"]


def mount_tracking(manifest: dict[str, Any], job_id: str) -> None:
    """The job's MLflow Secret as a read-only volume of every container of the manifest's pods (in place; a pod
    template two objects share gets it once). The file is mounted itself (subPath), not the Secret's directory,
    whose files are links into a timestamped directory: rank 0's bounded reader opens no link (programkit.userfiles)."""
    for template in pod_templates(manifest):
        pod = template["spec"]
        if any(volume["name"] == VOLUME for volume in pod.get("volumes", [])):
            continue
        pod.setdefault("volumes", []).append(
            {"name": VOLUME, "secret": {"secretName": secret_name(job_id), "defaultMode": 0o440}})
        for container in pod["containers"]:
            container.setdefault("volumeMounts", []).append(
                {"name": VOLUME, "mountPath": TRACKING_FILE, "subPath": JOB_FILE, "readOnly": True})


def with_tracking(objects: list[dict[str, Any]], account: Account, tags: dict[str, str], namespace: str,
                  labels: dict[str, str], job_id: str) -> dict[str, Any]:
    """The job's MLflow Secret, with every pod template of `objects` (the record and what it owns) mounting it."""
    for manifest in objects:
        mount_tracking(manifest, job_id)
    return tracking_secret(account, tags, namespace, labels, job_id)
