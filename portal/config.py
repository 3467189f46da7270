"""Every setting of the portal, in one typed place.

The defaults are the local demo's (the cluster in a box on 127.0.0.1). A site overrides them with a YAML
file named by ``DSPORTAL_CONFIG`` and/or environment variables ``DSPORTAL_<FIELD>`` (upper case), the
environment winning. Lists are comma-separated in the environment; the GPU quota is ``group=N,group=N``.

    from portal.config import load
    cfg = load()
    cfg.ldap_url, cfg.gpu_quota_for(["gpu-users"])
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TLS_MODES = ("starttls", "ldaps", "none")
SPAWNER_BACKENDS = ("slurm", "kubernetes")
SLURM_SPAWNERS = ("portal", "batchspawner")
K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # a DNS-1123 label: namespaces, claims, label values
JOB_LAUNCHERS = ("mpirun", "srun")
# The cluster in a box's own hosts live here: 198.18.0.0/15 is reserved for benchmarking (RFC 2544), so no real
# network uses it, and the box never routes it anywhere.
BOX_NETWORK = ipaddress.ip_network("198.18.0.0/24")
BOX_NODE_PREFIX = r"^[a-z][a-z0-9]{0,7}$"  # interface names are at most 15 characters: "ve-" + prefix + number
MPI_BINDINGS = ("none", "socket", "core")


class ConfigError(ValueError):
    """A setting has a value that is not allowed; the message names the setting."""


@dataclass(frozen=True)
class PortalConfig:
    # Where everything the cluster in a box writes lives: keys, databases, logs, PIDs.
    state_dir: Path = Path("/var/lib/dsportal")
    # The Python environment that the hub and the users' jobs run (readable by every user).
    venv: Path = Path("/opt/dsportal/venv")
    # Where `npm install --prefix` put configurable-http-proxy.
    node_prefix: Path = Path("/opt/dsportal/node")

    # JupyterHub: the public (proxy) address, the hub's own API port and the proxy's API port.
    hub_ip: str = "127.0.0.1"
    hub_port: int = 8000
    hub_api_port: int = 8081
    # Where the hub's own API listens, and the address servers and services use to reach it when that is not
    # the listening one (in a cluster: listen on 0.0.0.0, connect through the hub's Service name). Empty means the
    # box's bridge address (box_subnet's first host, where its compute nodes reach the hub) with Slurm, and
    # 127.0.0.1 with Kubernetes.
    hub_api_ip: str = ""
    hub_connect_ip: str = ""
    proxy_api_port: int = 8001
    # Seconds a spawn may take before the hub gives up.
    start_timeout: int = 300
    # Stop servers idle for this many seconds (jupyterhub-idle-culler); 0 disables culling.
    cull_idle_timeout: int = 3600

    # LDAP: where the directory is and how to talk to it.
    ldap_host: str = "127.0.0.1"
    ldap_port: int = 3389
    ldaps_port: int = 6636
    ldap_tls: str = "starttls"
    # CA bundle that signs the directory's certificate; empty means <state_dir>/tls/ca.pem.
    ldap_ca_file: str = ""
    ldap_base_dn: str = "dc=dsportal,dc=local"
    # How a login name becomes a DN. With ldap_lookup_dn the DN is searched for instead (e.g. Active Directory).
    ldap_bind_dn_template: str = "uid={username},ou=people,dc=dsportal,dc=local"
    ldap_lookup_dn: bool = False
    ldap_user_search_base: str = "ou=people,dc=dsportal,dc=local"
    ldap_user_attribute: str = "uid"
    ldap_search_user: str = ""
    ldap_search_password: str = ""
    ldap_group_search_base: str = "ou=groups,dc=dsportal,dc=local"
    # Seconds to wait for the directory before telling the user it is unavailable.
    ldap_timeout: int = 5

    # Authorisation, by LDAP group name (cn) or full DN.
    allowed_groups: tuple[str, ...] = ("datascientists", "portal-admins")
    admin_groups: tuple[str, ...] = ("portal-admins",)
    gpu_quota: Mapping[str, int] = field(default_factory=lambda: {"gpu-users": 4})
    default_gpu_quota: int = 0

    # Which scheduler runs the users' servers and jobs.
    spawner_backend: str = "slurm"
    # The Slurm spawner: "portal" (spawners.slurm.PortalSlurmSpawner). "batchspawner" is stock
    # batchspawner.SlurmSpawner as its README configures it, for the spawn benchmark (portal.bench.spawn) only:
    # no form, no validation, no fail-fast.
    slurm_spawner: str = "portal"

    # Slurm: the client configuration, and the shape of the local demo node.
    slurm_conf: str = ""  # empty means <state_dir>/slurm/slurm.conf
    slurm_bin_dir: Path = Path("/usr/bin")
    slurmctld_port: int = 6817
    slurmd_port: int = 6818
    slurm_node_cpus: int = 8
    slurm_node_memory_mb: int = 20000
    slurm_node_gpus: int = 4
    # Slurm accounting: slurmdbd's port, and the port of the box's private MariaDB (which only slurmdbd uses).
    slurmdbd_port: int = 6819
    accounting_db_port: int = 6820

    # The cluster in a box's compute nodes: each a host of its own on this machine (a network and UTS namespace
    # named like its hostname, <prefix>1, <prefix>2, ...), on a bridge the box makes for box_subnet, with its own
    # slurmd and fake GPUs. The bridge takes the subnet's first address; node N the address N after it. The
    # subnet must lie in 198.18.0.0/24, so two boxes (say, `make up` and the tests) use two parts of it.
    box_nodes: int = 2
    box_node_prefix: str = "node"
    box_subnet: str = "198.18.0.0/27"

    # Training jobs (portal.jobs).
    # The data set a job reads when its spec names none; empty means the demo set that
    # portal.jobs.demo_data makes: <state_dir>/datasets/chestxray14-demo-tfrecords.
    default_data_dir: str = ""
    # The partition training jobs go to; empty means Slurm's default partition.
    jobs_partition: str = ""
    # How a Slurm job starts its Horovod workers. mpirun (the default) is what Dell's CheXNet/Horovod study
    # measured best, with --map-by socket; srun needs Slurm and Open MPI built with the same PMI (jobs_srun_mpi).
    jobs_launcher: str = "mpirun"
    # mpirun's placement: --map-by socket spreads the workers over both sockets (each near its GPUs);
    # --bind-to none leaves the threads of TensorFlow's input pipeline free to use every core of the node.
    jobs_mpi_map_by: str = "socket"
    jobs_mpi_bind_to: str = "none"
    # Extra mpirun arguments: the ob1 PML over TCP/shared memory, never the obsolete openib BTL (Horovod's advice
    # for clusters without UCX; a site with InfiniBand and UCX sets e.g. "--mca,pml,ucx").
    jobs_mpirun_args: tuple[str, ...] = ("--mca", "pml", "ob1", "--mca", "btl", "^openib")
    # srun's --mpi plugin when jobs_launcher is srun (`srun --mpi=list` shows what the site has).
    jobs_srun_mpi: str = "pmix"
    # NCCL settings exported to every worker; empty means not set (NCCL's own default).
    # NCCL_DEBUG=WARN prints why a collective failed without flooding the log; INFO shows the chosen transports.
    jobs_nccl_debug: str = "WARN"
    # The network interface(s) NCCL uses between nodes, e.g. "ib0" or "^docker0,lo".
    jobs_nccl_socket_ifname: str = ""
    # "1" where InfiniBand is absent or broken (NCCL then uses sockets), "0" to insist on it.
    jobs_nccl_ib_disable: str = ""

    # Kubernetes (spawner_backend: kubernetes): KubeSpawner for the servers, MPIJobs (kubeflow.org/v2beta1) for
    # training. The credentials: a kubeconfig file, or empty for the pod's service account (in the cluster).
    k8s_kubeconfig: str = ""
    # The hub's namespace; every user gets their own, from this template, where their server and jobs run.
    k8s_namespace: str = "dsportal"
    k8s_user_namespace_template: str = "dsportal-u-{username}"
    # The hub and the dashboard act for a user by impersonating "<prefix><name>" (group k8s_users_group), so the
    # API server's RBAC (deploy/kubernetes/rbac.yaml) keeps every user to their own namespace.
    k8s_user_prefix: str = "dsportal:"
    k8s_users_group: str = "dsportal-users"
    # The notebook + training image (docker/training) and when to pull it.
    k8s_image: str = "localhost/dsportal-training:latest"
    k8s_image_pull_policy: str = "IfNotPresent"
    # GPU node pools: a node label whose value is the GPU type (the spawner's "partition"), e.g. nvidia=t4.
    k8s_gpu_node_label: str = "nvidia"
    k8s_gpu_types: tuple[str, ...] = ("t4", "v100")
    # The GPU counts a server may ask for (profiles), within the user's group quota.
    k8s_gpu_profiles: tuple[str, ...] = ("0", "1", "2", "4", "8")
    # One GPU node's shape, and how many nodes one training job may span.
    k8s_node_cpus: int = 32
    k8s_node_memory_gb: int = 180
    k8s_node_gpus: int = 8
    k8s_max_nodes: int = 4
    # Volumes: the data set (a ReadOnlyMany claim, mounted read-only) and each user's home (a claim per user).
    k8s_data_claim: str = "chestxray14"
    k8s_data_mount: str = "/data"
    k8s_home_claim_template: str = "home-{username}"
    k8s_home_mount: str = "/home/jovyan"
    # /dev/shm as an in-memory emptyDir of this size (Horovod and tf.data use shared memory).
    k8s_shm_gb: int = 8

    # The dashboard (portal.service): a JupyterHub managed service at /services/portal/ on 127.0.0.1.
    # Its port; 0 means hub_port + 90 (8090 for the demo), so boxes with other hub ports never share it.
    dashboard_port: int = 0
    # Seconds one answer of Slurm's (squeue, scontrol) serves every request together: users refreshing the page
    # must not each run squeue.
    dashboard_refresh_s: int = 2
    # Seconds a running job's metrics (read from its TensorBoard files, as the user: a Python process) are reused.
    dashboard_metrics_refresh_s: int = 15
    # Lines of a job's output shown on its page.
    dashboard_log_lines: int = 40

    def __post_init__(self) -> None:
        if self.ldap_tls not in TLS_MODES:
            raise ConfigError(f"ldap_tls is {self.ldap_tls!r}; allowed: {', '.join(TLS_MODES)}")
        if self.spawner_backend not in SPAWNER_BACKENDS:
            raise ConfigError(
                f"spawner_backend is {self.spawner_backend!r}; allowed: {', '.join(SPAWNER_BACKENDS)}"
            )
        choices = {"jobs_launcher": JOB_LAUNCHERS, "jobs_mpi_bind_to": MPI_BINDINGS, "slurm_spawner": SLURM_SPAWNERS,
                   "jobs_nccl_ib_disable": ("", "0", "1")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} is {getattr(self, name)!r}; allowed: {', '.join(map(repr, allowed))}")
        for name in ("hub_port", "hub_api_port", "proxy_api_port", "ldap_port", "ldaps_port",
                     "slurmctld_port", "slurmd_port", "slurmdbd_port", "accounting_db_port"):
            port = getattr(self, name)
            if not 1 <= port <= 65535:
                raise ConfigError(f"{name} is {port}; allowed: 1-65535")
        if not self.ldap_lookup_dn and "{username}" not in self.ldap_bind_dn_template:
            raise ConfigError("ldap_bind_dn_template must contain {username} unless ldap_lookup_dn is set")
        for group, quota in self.gpu_quota.items():
            if quota < 0:
                raise ConfigError(f"gpu_quota[{group}] is {quota}; allowed: 0 or more")
        if not 0 <= self.dashboard_port <= 65535:
            raise ConfigError(f"dashboard_port is {self.dashboard_port}; allowed: 1-65535, or 0 for hub_port + 90")
        self._check_kubernetes()
        self._check_box()
        for name in ("dashboard_refresh_s", "dashboard_metrics_refresh_s", "dashboard_log_lines"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} is {getattr(self, name)}; allowed: 1 or more")

    def _check_kubernetes(self) -> None:
        names = {"k8s_namespace": self.k8s_namespace, "k8s_data_claim": self.k8s_data_claim,
                 **{f"k8s_gpu_types[{t}]": t for t in self.k8s_gpu_types}}
        for name, value in names.items():
            if not re.match(K8S_NAME, value) or len(value) > 63:
                raise ConfigError(f"{name} is {value!r}; allowed: lower-case letters, digits and '-' (a DNS label)")
        for name in ("k8s_user_namespace_template", "k8s_home_claim_template"):
            if "{username}" not in getattr(self, name):
                raise ConfigError(f"{name} must contain {{username}}; it is {getattr(self, name)!r}")
        if not self.k8s_gpu_types:
            raise ConfigError("k8s_gpu_types is empty; allowed: one or more GPU types (node label values)")
        if not all(p.isdigit() for p in self.k8s_gpu_profiles) or "0" not in self.k8s_gpu_profiles:
            raise ConfigError(f"k8s_gpu_profiles is {self.k8s_gpu_profiles}; allowed: whole numbers, 0 among them")
        if self.k8s_image_pull_policy not in ("Always", "IfNotPresent", "Never"):
            raise ConfigError(f"k8s_image_pull_policy is {self.k8s_image_pull_policy!r}; "
                              "allowed: Always, IfNotPresent, Never")
        for name in ("k8s_node_cpus", "k8s_node_memory_gb", "k8s_max_nodes", "k8s_shm_gb"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} is {getattr(self, name)}; allowed: 1 or more")
        if self.k8s_node_gpus < 0:
            raise ConfigError(f"k8s_node_gpus is {self.k8s_node_gpus}; allowed: 0 or more")
        for name in ("k8s_data_mount", "k8s_home_mount"):
            if not getattr(self, name).startswith("/"):
                raise ConfigError(f"{name} is {getattr(self, name)!r}; allowed: an absolute path")

    def _check_box(self) -> None:
        try:
            subnet = ipaddress.ip_network(self.box_subnet)
        except ValueError:
            raise ConfigError(f"box_subnet is {self.box_subnet!r}; allowed: a network such as 198.18.0.0/27 "
                              f"inside {BOX_NETWORK}") from None
        if not subnet.subnet_of(BOX_NETWORK):  # never 10/8, 172.16/12, 192.168/16 or anything routed
            raise ConfigError(f"box_subnet is {subnet}; allowed: a network inside {BOX_NETWORK}")
        most = subnet.num_addresses - 3  # less the network, broadcast and bridge addresses
        if not 1 <= self.box_nodes <= min(most, 99):
            raise ConfigError(f"box_nodes is {self.box_nodes}; allowed: 1-{min(most, 99)} (box_subnet {subnet})")
        if not re.match(BOX_NODE_PREFIX, self.box_node_prefix):
            raise ConfigError(f"box_node_prefix is {self.box_node_prefix!r}; allowed: a lower-case letter, then up "
                              "to 7 lower-case letters or digits")

    def gpu_profiles(self) -> tuple[int, ...]:
        return tuple(sorted({int(p) for p in self.k8s_gpu_profiles}))

    def user_namespace(self, username: str) -> str:
        return self.k8s_user_namespace_template.format(username=username)

    def home_claim(self, username: str) -> str:
        return self.k8s_home_claim_template.format(username=username)

    # Derived values: computed, never stored twice.
    @property
    def ca_file(self) -> Path:
        return Path(self.ldap_ca_file) if self.ldap_ca_file else self.state_dir / "tls" / "ca.pem"

    @property
    def slurm_conf_path(self) -> Path:
        return Path(self.slurm_conf) if self.slurm_conf else self.state_dir / "slurm" / "slurm.conf"

    @property
    def default_data_path(self) -> Path:
        if self.default_data_dir:
            return Path(self.default_data_dir)
        return self.state_dir / "datasets" / "chestxray14-demo-tfrecords"

    @property
    def box_gateway(self) -> str:
        """The address of the box's bridge on this machine: where its compute nodes reach the hub and Slurm."""
        return str(ipaddress.ip_network(self.box_subnet)[1])

    def box_node_names(self) -> tuple[str, ...]:
        return tuple(f"{self.box_node_prefix}{i}" for i in range(1, self.box_nodes + 1))

    def box_node_address(self, index: int) -> str:
        """The address of compute node `index` (1-based)."""
        return str(ipaddress.ip_network(self.box_subnet)[1 + index])

    @property
    def hub_api_address(self) -> str:
        if self.hub_api_ip:
            return self.hub_api_ip
        return self.box_gateway if self.spawner_backend == "slurm" else "127.0.0.1"

    @property
    def hub_url(self) -> str:
        return f"http://{self.hub_ip}:{self.hub_port}"

    @property
    def dashboard_service_port(self) -> int:
        return self.dashboard_port or self.hub_port + 90

    @property
    def dashboard_url(self) -> str:
        """Where the hub's proxy reaches the dashboard service (not the public address)."""
        return f"http://127.0.0.1:{self.dashboard_service_port}"

    @property
    def ldap_server_port(self) -> int:
        return self.ldaps_port if self.ldap_tls == "ldaps" else self.ldap_port

    @property
    def ldap_url(self) -> str:
        scheme = "ldaps" if self.ldap_tls == "ldaps" else "ldap"
        return f"{scheme}://{self.ldap_host}:{self.ldap_server_port}"

    def group_dn(self, group: str) -> str:
        """A group's DN: names are looked up under ldap_group_search_base, DNs are kept as given."""
        return group if "=" in group else f"cn={group},{self.ldap_group_search_base}"

    def gpu_quota_for(self, groups: list[str] | tuple[str, ...]) -> int:
        """The most GPUs a member of these groups may ask for: the largest quota among them."""
        return max([self.gpu_quota[g] for g in groups if g in self.gpu_quota], default=self.default_gpu_quota)

    def is_admin(self, groups: list[str] | tuple[str, ...]) -> bool:
        return any(g in self.admin_groups for g in groups)


def _coerce(name: str, kind: Any, raw: Any) -> Any:
    """Turn a YAML or environment value into the field's type, with an error that names the field."""
    text = isinstance(raw, str)
    try:
        if kind in (int, "int"):
            return int(raw)
        if kind in (bool, "bool"):
            if text:
                if raw.lower() in ("1", "true", "yes", "on"):
                    return True
                if raw.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(raw)
            return bool(raw)
        if kind in (Path, "Path"):
            return Path(raw)
        if kind in ("tuple[str, ...]",):
            items = raw.split(",") if text else list(raw)
            return tuple(str(i).strip() for i in items if str(i).strip())
        if kind in ("Mapping[str, int]",):
            if text:
                pairs = [p.split("=", 1) for p in raw.split(",") if p.strip()]
                return {k.strip(): int(v) for k, v in pairs}
            return {str(k): int(v) for k, v in dict(raw).items()}
        return str(raw)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"setting {name}: cannot read {raw!r} as {kind}") from err


def load(env: Mapping[str, str] | None = None) -> PortalConfig:
    """Read the settings: defaults, then the YAML file in DSPORTAL_CONFIG, then DSPORTAL_* variables."""
    env = os.environ if env is None else env
    fields = {f.name: f.type for f in dataclasses.fields(PortalConfig)}
    values: dict[str, Any] = {}
    path = env.get("DSPORTAL_CONFIG")
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as err:
            raise ConfigError(f"DSPORTAL_CONFIG={path}: {err.strerror}") from err
        if not isinstance(data, dict):
            raise ConfigError(f"DSPORTAL_CONFIG={path}: expected a mapping of settings")
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ConfigError(f"{path}: unknown settings {', '.join(unknown)}; known: {', '.join(fields)}")
        values.update({k: _coerce(k, fields[k], v) for k, v in data.items()})
    for name, kind in fields.items():
        raw = env.get(f"DSPORTAL_{name.upper()}")
        if raw is not None:
            values[name] = _coerce(name, kind, raw)
    return PortalConfig(**values)
