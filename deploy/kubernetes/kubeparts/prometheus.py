"""The Kubernetes box's Prometheus server (docs/operations.md), while the hub is installed: deploy/
prometheus_server.py's Debian `prometheus` on the bridge's address (where the hub's pod reaches it; every other
reader is refused without the reader's password), port api_port + 4, scraping the hub's /hub/metrics and the
portal's metrics through the proxy's NodePort (HTTPS, signed by the box's CA), its data and secrets in
<state>/prometheus/. The hub's pod gets both secrets as the Secret dsportal-prometheus and the server's URL in its
environment (hub_env)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deploy import prometheus_server
from deploy.kubernetes.kubeparts.layout import HUB_NAMESPACE, KubeBox
from deploy.supervise import Service

SECRET = "dsportal-prometheus"
MOUNT = "/etc/dsportal/prometheus"  # the Secret's `token` and `reader`
PORT_OFFSET = 4  # etcd takes api_port + 1 and + 2, MLflow + 3


def data_dir(box: KubeBox) -> Path:
    return box.path("prometheus")


def port(box: KubeBox) -> int:
    return box.api_port + PORT_OFFSET


def url(box: KubeBox) -> str:
    return prometheus_server.url(box.api_address, port(box))


def hub_env(box: KubeBox) -> dict[str, str]:
    return {"DSPORTAL_PROMETHEUS_URL": url(box), "DSPORTAL_METRICS_TOKEN_FILE": f"{MOUNT}/token",
            "DSPORTAL_PROMETHEUS_READER_FILE": f"{MOUNT}/reader"}


def secret(box: KubeBox, labels: dict[str, str]) -> dict[str, Any]:
    """The token the hub registers and the reader the dashboard reads with (made here first: the hub needs both)."""
    prometheus_server.ensure_secrets(data_dir(box))
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": SECRET, "namespace": HUB_NAMESPACE, "labels": labels},
            "stringData": {"token": prometheus_server.token_file(data_dir(box)).read_text(),
                           "reader": prometheus_server.reader_file(data_dir(box)).read_text()}}


def mount() -> tuple[dict[str, Any], dict[str, Any]]:
    """The hub container's volume mount and the pod's volume of the Secret (mode 0400: the token is checked so)."""
    return ({"name": "prometheus", "mountPath": MOUNT, "readOnly": True},
            {"name": "prometheus", "secret": {"secretName": SECRET, "defaultMode": 0o400}})


def forget(box: KubeBox) -> None:
    """Its data and secrets, with the hub's state (kubebox.remove_hub: the tests' undo)."""
    shutil.rmtree(data_dir(box), ignore_errors=True)


def service(hub_url: Callable[[KubeBox], str]) -> Service:
    """`hub_url`: the hub's public URL (kubeparts/hub.py's, which imports this part)."""
    def prepare(box: KubeBox) -> None:
        prometheus_server.prepare(data_dir(box), prometheus_server.Targets(hub_url(box), str(box.ca_file)),
                                  prometheus_server.token_file(data_dir(box)))

    return Service(
        "prometheus", "prometheus", prepare,
        lambda box: prometheus_server.command(data_dir(box), box.api_address, port(box)),
        lambda box: prometheus_server.ready(data_dir(box), url(box)), prometheus_server.READY_TIMEOUT_S,
        lambda box: [(box.api_address, port(box))], cwd=data_dir)
