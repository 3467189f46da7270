"""etcd: the Kubernetes box's store, one member on 127.0.0.1, its data kept in STATE/etcd."""

from __future__ import annotations

import json
import os
import urllib.request

from deploy.kubernetes.kubeparts.layout import ETCD, LOCALHOST, KubeBox
from deploy.supervise import BoxError, Service, flags

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # etcd is on 127.0.0.1, whatever the env


def prepare(box: KubeBox) -> None:
    if not os.access(ETCD, os.X_OK):
        raise BoxError(f"etcd: {ETCD} is missing; install Debian's etcd-server (or set DSPORTAL_ETCD)")
    box.path("etcd").mkdir(mode=0o700, exist_ok=True)


def command(box: KubeBox) -> list[str]:
    peer = f"http://{LOCALHOST}:{box.etcd_peer_port}"
    return [ETCD, *flags(name="kubebox", data_dir=box.path("etcd"), listen_client_urls=box.etcd_url,
                         advertise_client_urls=box.etcd_url, listen_peer_urls=peer,
                         initial_advertise_peer_urls=peer, initial_cluster=f"kubebox={peer}",
                         initial_cluster_state="new")]


def ready(box: KubeBox) -> str | None:
    try:
        with NO_PROXY.open(f"{box.etcd_url}/health", timeout=3) as response:
            health = json.loads(response.read())
    except (OSError, ValueError) as err:
        return f"GET {box.etcd_url}/health: {err}"
    return None if health.get("health") == "true" else f"etcd health: {health}"


def service() -> Service:
    return Service("etcd", "etcd", prepare, command, ready, 30,
                   ports=lambda box: [(LOCALHOST, box.etcd_port), (LOCALHOST, box.etcd_peer_port)])
