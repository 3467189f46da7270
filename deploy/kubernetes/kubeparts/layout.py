"""Where everything of the Kubernetes box lives under its state dir, the names it gives users, and its settings."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from supervise import Place

from portal.config import PortalConfig
from portal.jobs import k8s_manifests

HERE = Path(__file__).resolve().parents[1]  # deploy/kubernetes
CRD_FILE = HERE / "mpijob-crd.yaml"
RBAC_FILE = HERE / "rbac.yaml"
BUILD_SCRIPT = HERE / "build-apiserver.sh"
KUBE_BIN = Path(os.environ.get("DSPORTAL_KUBE_BIN", "/opt/dsportal/kubernetes/bin"))
ETCD = os.environ.get("DSPORTAL_ETCD", "/usr/bin/etcd")

LOCALHOST = "127.0.0.1"  # every process of the box listens here only
DEFAULT_STATE = Path("/var/lib/dsportal/kube")
DEFAULT_API_PORT = 16443  # etcd takes the next two ports unless told otherwise

# The portal's default settings name the users, groups and namespaces that rbac.yaml is written for.
PORTAL = PortalConfig()
HUB_NAMESPACE = "dsportal"
HUB_SERVICE_ACCOUNT = "dsportal-hub"
USERS_GROUP = PORTAL.k8s_users_group  # the only group the hub may impersonate
DEMO_USERS = ("alice", "bob")
ADMIN_USER = "kube-admin"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"  # bound to its role by the API server's bootstrap

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class KubeBox(Place):
    """One box: its state dir and ports. Every path is derived from these."""

    state_dir: Path = DEFAULT_STATE
    api_port: int = DEFAULT_API_PORT
    etcd_port: int = 0  # 0: api_port + 1
    etcd_peer_port: int = 0  # 0: etcd_port + 1

    script = "kubebox.py"

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        if not self.etcd_port:
            object.__setattr__(self, "etcd_port", self.api_port + 1)
        if not self.etcd_peer_port:
            object.__setattr__(self, "etcd_peer_port", self.etcd_port + 1)

    @property
    def root(self) -> Path:
        return self.state_dir

    @property
    def api_url(self) -> str:
        return f"https://{LOCALHOST}:{self.api_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://{LOCALHOST}:{self.etcd_port}"

    def path(self, *parts: str) -> Path:
        return self.state_dir.joinpath(*parts)

    @property
    def ca_file(self) -> Path:
        return self.path("tls", "ca.pem")

    def kubeconfig(self, identity: str) -> Path:
        return self.path("kubeconfig", f"{identity}.kubeconfig")


@dataclass(frozen=True)
class Cluster:
    """What `up` hands back: where the API is and how each identity reaches it."""

    state_dir: Path
    api_url: str
    ca_file: Path
    kubeconfigs: dict[str, Path] = field(default_factory=dict)  # admin, hub, alice, bob


def user_principal(name: str) -> str:
    """The Kubernetes user name of portal user `name` (what the hub impersonates)."""
    return k8s_manifests.user_principal(PORTAL, name)


def user_namespace(name: str) -> str:
    """The namespace of portal user `name`; ValueError when the name cannot be part of one."""
    limit = 63 - len(PORTAL.user_namespace(""))
    if not DNS_LABEL.match(name) or len(name) > limit:
        raise ValueError(f"user name {name!r}: for a Kubernetes namespace it must be 1 to {limit} characters "
                         "of a-z, 0-9 and '-', starting and ending with a letter or digit")
    return PORTAL.user_namespace(name)
