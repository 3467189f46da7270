"""The control plane of the Kubernetes box, as plain processes: kube-apiserver (Node and RBAC authorization, the
MPIJob CRD), kube-controller-manager (every default controller, and the nodes' pod ranges) and kube-scheduler."""

from __future__ import annotations

import os

from deploy.kubernetes.kubeparts.api import api_client
from deploy.kubernetes.kubeparts.api import ready as api_ready
from deploy.kubernetes.kubeparts.identities import read_tokens
from deploy.kubernetes.kubeparts.layout import BUILD_SCRIPT, KUBE_BIN, NODE_POD_PREFIX, KubeBox
from deploy.supervise import BoxError, Service, flags

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Every controller a cluster has by default (Jobs, ReplicaSets, quotas, claims binding, node lifecycle, the garbage
# collector that a foreground delete waits for ...). Node lifecycle marks a lost node NotReady after
# NODE_GRACE and taints it, so that its pods are evicted after the toleration the admission adds (300 s).
CONTROLLERS = "*"
NODE_GRACE = "20s"


def _built(program: str) -> None:
    if not os.access(KUBE_BIN / program, os.X_OK):
        raise BoxError(f"{program}: {KUBE_BIN / program} is missing; build and install it with `make kube-build` "
                       f"({BUILD_SCRIPT})")


def apiserver_command(box: KubeBox) -> list[str]:
    tls = box.path("tls")
    return [str(KUBE_BIN / "kube-apiserver"), *flags(
        etcd_servers=box.etcd_url, bind_address=box.api_address, secure_port=box.api_port,
        advertise_address=box.api_address, cert_dir=tls, tls_cert_file=tls / "apiserver.pem",
        tls_private_key_file=tls / "apiserver.key", client_ca_file=tls / "ca.pem",
        token_auth_file=box.path("auth", "tokens.csv"), anonymous_auth="false",
        authorization_mode="Node,RBAC", enable_admission_plugins="NodeRestriction",
        kubelet_client_certificate=tls / "kubelet-client.pem", kubelet_client_key=tls / "kubelet-client.key",
        kubelet_preferred_address_types="InternalIP",
        service_account_key_file=tls / "sa.pub",
        service_account_signing_key_file=tls / "sa.key", service_account_issuer=SERVICE_ACCOUNT_ISSUER,
        api_audiences=SERVICE_ACCOUNT_ISSUER, service_cluster_ip_range=box.service_cidr, profiling="false")]


def apiserver_ready(box: KubeBox) -> str | None:
    return api_ready(api_client(box, read_tokens(box)["admin"]))


def controller_manager_command(box: KubeBox) -> list[str]:
    return [str(KUBE_BIN / "kube-controller-manager"), *flags(
        kubeconfig=box.path("auth", "controller-manager.kubeconfig"),
        service_account_private_key_file=box.path("tls", "sa.key"), root_ca_file=box.ca_file,
        use_service_account_credentials="true", controllers=CONTROLLERS, leader_elect="false",
        allocate_node_cidrs="true", cluster_cidr=box.cluster_cidr, node_cidr_mask_size=NODE_POD_PREFIX,
        service_cluster_ip_range=box.service_cidr, node_monitor_grace_period=NODE_GRACE,
        port=0, secure_port=0,  # serves nothing: no port to collide with
        profiling="false")]


def scheduler_command(box: KubeBox) -> list[str]:
    return [str(KUBE_BIN / "kube-scheduler"), *flags(
        kubeconfig=box.path("auth", "scheduler.kubeconfig"), leader_elect="false", port=0, secure_port=0,
        profiling="false")]


def apiserver_service() -> Service:
    return Service("kube-apiserver", "kube-apiserver", lambda box: _built("kube-apiserver"), apiserver_command,
                   apiserver_ready, 90, ports=lambda box: [(box.api_address, box.api_port)])


def controller_manager_service() -> Service:
    # Ready at once: it serves nothing; `up` waits for what it makes (ServiceAccounts and their tokens).
    return Service("kube-controller-manager", "kube-controller-manager",
                   lambda box: _built("kube-controller-manager"), controller_manager_command, lambda box: None, 5)


def scheduler_service() -> Service:
    # Ready at once, like the controller-manager: a pod it binds is what shows it works.
    return Service("kube-scheduler", "kube-scheduler", lambda box: _built("kube-scheduler"), scheduler_command,
                   lambda box: None, 5)
