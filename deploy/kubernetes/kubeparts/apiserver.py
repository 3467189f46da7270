"""kube-apiserver (RBAC, admission, the MPIJob CRD; no nodes) and kube-controller-manager (ServiceAccounts and
their tokens, namespace deletion, the garbage collector) of the Kubernetes box, as plain processes."""

from __future__ import annotations

import os

from supervise import BoxError, Service, flags

from kubeparts.api import api_client
from kubeparts.api import ready as api_ready
from kubeparts.identities import read_tokens
from kubeparts.layout import BUILD_SCRIPT, KUBE_BIN, LOCALHOST, KubeBox

SERVICE_CIDR = "10.0.0.0/24"  # no Service gets traffic here (no nodes, no kube-proxy); the API needs a range
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# What the controller-manager runs: default ServiceAccounts and their tokens, namespace deletion, and the
# garbage collector (a foreground delete, as the portal's cancel sends, waits for it to drop the finalizer).
# No scheduler and no nodes: nothing here runs a pod.
CONTROLLERS = "serviceaccount,serviceaccount-token,namespace,garbagecollector"


def _built(program: str) -> None:
    if not os.access(KUBE_BIN / program, os.X_OK):
        raise BoxError(f"{program}: {KUBE_BIN / program} is missing; build and install it with `make kube-build` "
                       f"({BUILD_SCRIPT})")


def apiserver_command(box: KubeBox) -> list[str]:
    tls = box.path("tls")
    return [str(KUBE_BIN / "kube-apiserver"), *flags(
        etcd_servers=box.etcd_url, bind_address=LOCALHOST, secure_port=box.api_port, advertise_address=LOCALHOST,
        cert_dir=tls, tls_cert_file=tls / "apiserver.pem", tls_private_key_file=tls / "apiserver.key",
        client_ca_file=tls / "ca.pem", token_auth_file=box.path("auth", "tokens.csv"), anonymous_auth="false",
        authorization_mode="RBAC", service_account_key_file=tls / "sa.pub",
        service_account_signing_key_file=tls / "sa.key", service_account_issuer=SERVICE_ACCOUNT_ISSUER,
        api_audiences=SERVICE_ACCOUNT_ISSUER, service_cluster_ip_range=SERVICE_CIDR,
        # The `kubernetes` Service would get 127.0.0.1 as endpoint, which Endpoints validation refuses.
        endpoint_reconciler_type="none", profiling="false")]


def apiserver_ready(box: KubeBox) -> str | None:
    return api_ready(api_client(box, read_tokens(box)["admin"]))


def controller_manager_command(box: KubeBox) -> list[str]:
    return [str(KUBE_BIN / "kube-controller-manager"), *flags(
        kubeconfig=box.path("auth", "controller-manager.kubeconfig"),
        service_account_private_key_file=box.path("tls", "sa.key"), root_ca_file=box.ca_file,
        use_service_account_credentials="true", controllers=CONTROLLERS, leader_elect="false",
        port=0, secure_port=0,  # serves nothing: no port to collide with
        profiling="false")]


def apiserver_service() -> Service:
    return Service("kube-apiserver", "kube-apiserver", lambda box: _built("kube-apiserver"), apiserver_command,
                   apiserver_ready, 90, ports=lambda box: [(LOCALHOST, box.api_port)])


def controller_manager_service() -> Service:
    # Ready at once: it serves nothing; `up` waits for what it makes (ServiceAccounts and their tokens).
    return Service("kube-controller-manager", "kube-controller-manager",
                   lambda box: _built("kube-controller-manager"), controller_manager_command, lambda box: None, 5)
