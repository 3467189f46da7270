"""The LDAP relay of the Kubernetes box's hub (kubeparts/hub.py): the pods reach only the box's bridge, and slapd
listens on 127.0.0.1, so `ldap-relay` (socat) relays the bridge address's LDAPS port to slapd's, for the pods' range
only. It runs while the hub is installed (kubebox.services)."""

from __future__ import annotations

import os

from deploy.daemons import port_in_use
from deploy.kubernetes.kubeparts.hub import directory_file, installed
from deploy.kubernetes.kubeparts.layout import KubeBox
from deploy.supervise import BoxError, Service

SOCAT = "/usr/bin/socat"


def relay_port(box: KubeBox) -> int:
    """The directory's LDAPS port: the only one relayed."""
    found = installed(box)
    if found is None:
        raise BoxError(f"ldap-relay: the hub is not installed ({directory_file(box)} is missing)")
    if "ldaps_port" not in found:
        raise BoxError(f"ldap-relay: {directory_file(box)} was written before the relay spoke LDAPS only: run "
                       "`kubebox up --hub` (make up-k8s) to install the hub again")
    return int(found["ldaps_port"])


def _relay_prepare(box: KubeBox) -> None:
    if not os.access(SOCAT, os.X_OK):
        raise BoxError(f"ldap-relay: {SOCAT} is missing: run deploy/kubernetes/build-kubernetes.sh (installs socat)")
    relay_port(box)


def relay_command(box: KubeBox) -> list[str]:
    """The bridge address's LDAPS port to slapd's on 127.0.0.1, for clients in the pods' range only: TLS end to end
    (socat carries the bytes; slapd's certificate and the hub's CA check them)."""
    port = relay_port(box)
    return [SOCAT, "-d", f"TCP-LISTEN:{port},bind={box.api_address},reuseaddr,fork,range={box.cluster_cidr}",
            f"TCP:127.0.0.1:{port}"]


def _relay_ready(box: KubeBox) -> str | None:
    return None if port_in_use(box.api_address, relay_port(box)) else "not listening yet"


def relay_service() -> Service:
    return Service("ldap-relay", "socat", _relay_prepare, relay_command, _relay_ready, 10,
                   ports=lambda box: [(box.api_address, relay_port(box))])
