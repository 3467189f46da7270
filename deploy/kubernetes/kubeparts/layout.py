"""Where everything of the Kubernetes box lives under its state dir, the names it gives users, and its settings."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from deploy.netns import Network, Node
from deploy.supervise import Place
from portal.config import PortalConfig

HERE = Path(__file__).resolve().parents[1]  # deploy/kubernetes
CRD_FILE = HERE / "mpijob-crd.yaml"
RBAC_FILE = HERE / "rbac.yaml"
BUILD_SCRIPT = HERE / "build-kubernetes.sh"
KUBE_BIN = Path(os.environ.get("DSPORTAL_KUBE_BIN", "/opt/dsportal/kubernetes/bin"))
ETCD = os.environ.get("DSPORTAL_ETCD", "/usr/bin/etcd")

LOCALHOST = "127.0.0.1"  # etcd listens here only; the API server on the box's bridge, where the nodes reach it
DEFAULT_STATE = Path("/var/lib/dsportal/kube")
DEFAULT_CACHE = Path("/var/cache/dsportal/kubebox")  # the nodes' image stores, kept when a state dir is removed
DEFAULT_API_PORT = 16443  # etcd takes the next two ports unless told otherwise
# Every address of a Kubernetes box lies in here: apart from the Slurm boxes' 198.18.0.0/24, and never 10/8,
# 172.16/12 or 192.168/16. A box takes one /20 of it (DEFAULT_NETWORK; the tests' box another).
KUBE_NETWORKS = ipaddress.ip_network("198.19.0.0/16")
DEFAULT_NETWORK = "198.19.0.0/20"
NODE_SUBNET_PREFIX = 26  # the bridge's: the host is .1, node i is .(10 + i)
NODE_POD_PREFIX = 24  # each node's pod range, cut from the box's cluster range by the controller-manager
MAX_NODES = 8

# The portal's default settings name the users, groups and namespaces that rbac.yaml is written for.
PORTAL = PortalConfig()
HUB_NAMESPACE = "dsportal"
HUB_SERVICE_ACCOUNT = "dsportal-hub"
USERS_GROUP = PORTAL.k8s_users_group  # the only group the hub may impersonate
DEMO_USERS = ("alice", "bob")
ADMIN_USER = "kube-admin"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"  # bound to its role by the API server's bootstrap
SCHEDULER_USER = "system:kube-scheduler"  # the same

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class KubeBox(Place):
    """One box: its state dir and ports. Every path is derived from these."""

    state_dir: Path = DEFAULT_STATE
    api_port: int = DEFAULT_API_PORT
    etcd_port: int = 0  # 0: api_port + 1
    etcd_peer_port: int = 0  # 0: etcd_port + 1
    name: str = "kube"  # names the bridge (br-NAME), the nodes (NAME-node1 ...) and their cgroups
    network: str = DEFAULT_NETWORK  # a /20 inside 198.19.0.0/16: nodes, Services and pods
    nodes: int = 2
    gpus_per_node: int = 4  # fake GPUs: the extended resource nvidia.com/gpu on each node
    gpu_type: str = PORTAL.k8s_gpu_types[0]  # the value of the node label k8s_gpu_node_label
    # Each node's CPU weight (its v1 cgroup's cpu.shares) against this machine's other work; 0: the kernel's
    # (1024, as a session's). The test box's is lower: the Slurm box's side, beside it, is the longer one.
    node_cpu_shares: int = 0
    cache_dir: Path = DEFAULT_CACHE
    # What the nodes get from podman (kubeparts/images.py); empty: the busybox image and PORTAL.k8s_image.
    images: tuple[str, ...] = ()
    # Settings of the hub's portal over values.yaml's, (name, value) as DSPORTAL_<NAME> takes it: the test box's
    # short GPU watch (kubeparts/hub.py box_env; its nodes' GPU readers read as often: kubeparts/gpus.py).
    hub_settings: tuple[tuple[str, str], ...] = ()
    # A directory of a site's own programs (portal.config_programs' site_python_path), offered read-only to each demo
    # user's pods as the claim site-programs (kubeparts/volumes.py); empty: none.
    site_python_path: str = ""

    script = "kubebox.py"

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        object.__setattr__(self, "cache_dir", Path(self.cache_dir))
        if not self.etcd_port:
            object.__setattr__(self, "etcd_port", self.api_port + 1)
        if not self.etcd_peer_port:
            object.__setattr__(self, "etcd_peer_port", self.etcd_port + 1)
        try:
            net = ipaddress.ip_network(self.network)
        except ValueError:
            net = None
        if net is None or net.prefixlen != 20 or not net.subnet_of(KUBE_NETWORKS):
            raise ValueError(f"network is {self.network!r}; allowed: a /20 inside {KUBE_NETWORKS}, such as "
                             f"{DEFAULT_NETWORK}")
        if not (re.fullmatch(r"[a-z][a-z0-9]{0,8}", self.name)):
            raise ValueError(f"name is {self.name!r}; allowed: 1-9 lower-case letters and digits, first a letter")
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"nodes is {self.nodes}; allowed: 1-{MAX_NODES}")
        if self.gpus_per_node < 0:
            raise ValueError(f"gpus_per_node is {self.gpus_per_node}; allowed: 0 or more")

    @property
    def root(self) -> Path:
        return self.state_dir

    # --- the network: one bridge for the nodes; Service and pod ranges cut from the same /20 ----------------

    @property
    def node_network(self) -> Network:
        subnet = next(ipaddress.ip_network(self.network).subnets(new_prefix=NODE_SUBNET_PREFIX))
        return Network(bridge=f"br-{self.name}", gateway=str(subnet[1]), prefix_length=NODE_SUBNET_PREFIX,
                       nodes=tuple(Node(f"{self.name}-node{i}", str(subnet[10 + i]), f"ve-{self.name}-{i}")
                                   for i in range(1, self.nodes + 1)))

    @property
    def api_address(self) -> str:
        """The API server's address: the host's on the bridge (loopback cannot be reached from a node)."""
        return self.node_network.gateway

    @property
    def service_cidr(self) -> str:
        return str(list(ipaddress.ip_network(self.network).subnets(new_prefix=24))[1])

    @property
    def api_service_ip(self) -> str:
        """The ClusterIP of the `kubernetes` Service (the first of the Service range)."""
        return str(ipaddress.ip_network(self.service_cidr)[1])

    @property
    def cluster_cidr(self) -> str:
        """The pods' range (the /20's upper half), a /24 per node."""
        return str(list(ipaddress.ip_network(self.network).subnets(new_prefix=21))[1])

    @property
    def api_url(self) -> str:
        return f"https://{self.api_address}:{self.api_port}"

    @property
    def portal(self) -> PortalConfig:
        """The portal's settings for the box's namespaces and its hub: the users' servers may reach the API server
        (their notebooks submit jobs with the pod's service account); NetworkPolicies name its real address."""
        return dataclasses.replace(PORTAL, k8s_server_egress=(f"{self.api_address}/32:{self.api_port}",))

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

    def node_dir(self, node: str) -> Path:
        """A node's own files: its containerd's config and socket, its kubelet's config, its private dirs."""
        return self.path("nodes", node)

    def image_store(self, node: str) -> Path:
        """A node's containerd root (its images): in the cache dir, so that a new state dir keeps the images."""
        return self.cache_dir / self.name / node


@dataclass(frozen=True)
class Cluster:
    """What `up` hands back: where the API is and how each identity reaches it."""

    state_dir: Path
    api_url: str
    ca_file: Path
    kubeconfigs: dict[str, Path] = field(default_factory=dict)  # admin, hub, alice, bob


def user_principal(name: str) -> str:
    """The Kubernetes user name of portal user `name` (what the hub impersonates)."""
    return PORTAL.user_principal(name)


def user_namespace(name: str) -> str:
    """The namespace of portal user `name`; ValueError when the name cannot be part of one."""
    limit = 63 - len(PORTAL.user_namespace(""))
    if not DNS_LABEL.match(name) or len(name) > limit:
        raise ValueError(f"user name {name!r}: for a Kubernetes namespace it must be 1 to {limit} characters "
                         "of a-z, 0-9 and '-', starting and ending with a letter or digit")
    return PORTAL.user_namespace(name)
