"""The Kubernetes box's MLflow tracking server (docs/mlflow.md), while the hub is installed: deploy/mlflow_server.py's
`mlflow server` on the bridge's address (where every pod reaches the machine: the hub's for the dashboard, the
training pods' rank 0, the users' servers through their NetworkPolicy), port api_port + 3, its databases,
artifacts and admin in <state>/mlflow/. The hub's pod gets the admin's file as the Secret dsportal-mlflow-admin and
the server's URL in its environment (DSPORTAL_MLFLOW_URL, DSPORTAL_MLFLOW_ADMIN_FILE)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from deploy import mlflow_server
from deploy.kubernetes.kubeparts.layout import HUB_NAMESPACE, KubeBox
from deploy.supervise import Service

ADMIN_SECRET = "dsportal-mlflow-admin"
ADMIN_MOUNT = "/etc/dsportal/mlflow-admin"  # the Secret's `admin`
PORT_OFFSET = 3  # etcd takes api_port + 1 and + 2


def data_dir(box: KubeBox) -> Path:
    return box.path("mlflow")


def port(box: KubeBox) -> int:
    return box.api_port + PORT_OFFSET


def tracking_url(box: KubeBox) -> str:
    return mlflow_server.url(box.api_address, port(box))


def hub_env(box: KubeBox) -> dict[str, str]:
    return {"DSPORTAL_MLFLOW_URL": tracking_url(box), "DSPORTAL_MLFLOW_ADMIN_FILE": f"{ADMIN_MOUNT}/admin"}


def admin_text(box: KubeBox) -> str:
    admin = mlflow_server.admin_file(data_dir(box))
    return admin.read_text() if admin.exists() else ""


def admin_secret(text: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": ADMIN_SECRET, "namespace": HUB_NAMESPACE, "labels": labels},
            "stringData": {"admin": text}}


def forget(box: KubeBox) -> None:
    """Its databases and artifacts, with the hub's state (kubebox.remove_hub: the tests' undo)."""
    shutil.rmtree(data_dir(box), ignore_errors=True)


def service() -> Service:
    return Service(
        "mlflow", "mlflow", lambda box: mlflow_server.prepare(data_dir(box)),
        lambda box: mlflow_server.command(data_dir(box), box.api_address, port(box)),
        lambda box: mlflow_server.ready(tracking_url(box)), mlflow_server.READY_TIMEOUT_S,
        lambda box: [(box.api_address, port(box))],
        env=lambda box: mlflow_server.environment(data_dir(box)), cwd=data_dir)
