"""Every setting of the portal, in one typed place: PortalConfig, whose fields are its own and those of the
sections it inherits (each scheduler's own: portal.scheduler.slurm.settings, portal.scheduler.kubernetes.settings;
portal.config_gpus's and portal.config_programs's).

The defaults are the local demo's (the cluster in a box on 127.0.0.1). A site overrides them with a YAML
file named by ``DSPORTAL_CONFIG`` and/or environment variables ``DSPORTAL_<FIELD>`` (upper case), the
environment winning. Lists are comma-separated in the environment; the GPU quota is ``group=N,group=N``.
Each setting carries its help text: ``python -m portal.config`` lists them all, and where each value came from.

    from portal.config import load
    cfg = load()
    cfg.ldap_url, cfg.gpu_quota_for(["gpu-users"])

A renamed setting's old name still works, in the YAML file and the environment, with a deprecation warning that
names the new one (config_values.RENAMED); setting both to different values is an error that names both.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from portal.config_checks import SettingsChecks
from portal.config_gpus import GpuSettings
from portal.config_programs import ProgramSettings
from portal.config_values import ConfigError, default_of, read_given, said_where, setting
from portal.quota import GpuHolder, GpuQuota, quota_for
from portal.registrations import SCHEDULERS, server_schedulers
from portal.scheduler.kubernetes.settings import KubernetesSettings
from portal.scheduler.slurm.settings import SlurmSettings

# The users' servers' way to the dashboard (PortalConfig.dashboard_for_servers), in their environment: no DSPORTAL_
# name, which a setting would read.
SERVER_DASHBOARD_ENV = "PORTAL_DASHBOARD_URL"


@dataclass(frozen=True)
class PortalConfig(SlurmSettings, KubernetesSettings, GpuSettings, ProgramSettings, SettingsChecks):
    """Every setting, with its help text as data: ``python -m portal.config`` lists them, docs/configuration.md
    tables them (``python -m portal.config --markdown``)."""

    state_dir: Path = setting(Path("/var/lib/dsportal"),
                              "Where everything the cluster in a box writes lives: keys, databases, logs, PIDs.")
    venv: Path = setting(Path("/opt/dsportal/venv"),
                         "The Python environment that the hub and the users' jobs run (readable by every user).")
    node_prefix: Path = setting(Path("/opt/dsportal/node"), "Where `npm install --prefix` put configurable-http-proxy.")

    # JupyterHub.
    hub_ip: str = setting("127.0.0.1", "JupyterHub's public (proxy) address.")
    hub_port: int = setting(8000, "JupyterHub's public (proxy) port.")
    hub_ssl_cert: str = setting("", "A PEM certificate (its chain after it) that the proxy serves HTTPS with, "
                                "with hub_ssl_key (JupyterHub.ssl_cert). Empty means plain HTTP: browsers then "
                                "allow notifications only on localhost.")
    hub_ssl_key: str = setting("", "The private key of hub_ssl_cert (JupyterHub.ssl_key).")
    hub_api_port: int = setting(8081, "The hub's own API port.")
    hub_api_ip: str = setting("", "Where the hub's own API listens (in a cluster: 0.0.0.0). Empty means the box's "
                              "bridge address (box_subnet's first host, where its compute nodes reach the hub) with "
                              "Slurm, and 127.0.0.1 with Kubernetes.")
    hub_connect_ip: str = setting("", "The address servers and services use to reach the hub's API when that is not "
                                  "the listening one (in a cluster: the hub's Service name). Empty means not set "
                                  "(JupyterHub's own default: the listening address).")
    proxy_api_port: int = setting(8001, "The proxy's API port.")
    start_timeout: int = setting(300, "Seconds a spawn may take before the hub gives up.")
    cull_idle_timeout: int = setting(3600, "Stop servers idle for this many seconds (jupyterhub-idle-culler); "
                                     "0 disables culling.")

    # LDAP: where the directory is and how to talk to it.
    ldap_host: str = setting("127.0.0.1", "The LDAP directory's host.")
    ldap_port: int = setting(3389, "The directory's port for plain LDAP and StartTLS.")
    ldaps_port: int = setting(6636, "The directory's port for LDAPS (ldap_tls: ldaps).")
    ldap_tls: str = setting("starttls", "How to talk to the directory: starttls, ldaps (on ldaps_port), or none "
                            "(no TLS at all: not advised).")
    ldap_ca_file: str = setting("", "CA bundle that signs the directory's certificate; empty means "
                                "<directory_dir>/tls/ca.pem.")
    ldap_base_dn: str = setting("dc=dsportal,dc=local",
                                "The directory's base DN (the cluster in a box's slapd serves it).")
    ldap_bind_dn_template: str = setting("uid={username},ou=people,dc=dsportal,dc=local",
                                         "How a login name becomes a DN (must contain {username} unless "
                                         "ldap_lookup_dn is set).")
    ldap_lookup_dn: bool = setting(False, "Search for the user's DN instead of using ldap_bind_dn_template "
                                   "(e.g. Active Directory).")
    ldap_user_search_base: str = setting("ou=people,dc=dsportal,dc=local",
                                         "Where users are searched for (with ldap_lookup_dn).")
    ldap_user_attribute: str = setting("uid", "The attribute that holds the login name (with ldap_lookup_dn; "
                                       "e.g. sAMAccountName).")
    ldap_search_user: str = setting("cn=portal,ou=services,dc=dsportal,dc=local", "The DN the portal binds as to "
                                    "read the directory (logins' groups, accounts sync, e-mail addresses); empty means "
                                    "anonymous reads. The box's slapd makes it, with a password of its own.")
    ldap_search_password: str = setting("", "ldap_search_user's password; empty means ldap_search_password_file's.",
                                        secret=True)
    ldap_search_password_file: str = setting("", "A file (mode 0600) whose first line is ldap_search_user's password; "
                                             "empty means <directory_dir>/ldap/search-password (the box's).")
    ldap_group_search_base: str = setting("ou=groups,dc=dsportal,dc=local",
                                          "Where groups named by cn (not a full DN) are looked up.")
    ldap_timeout: int = setting(5, "Seconds to wait for the directory before telling the user it is unavailable.")
    # The box's slapd (one for every box on the machine) and its password policy (ppolicy): docs/admin-guide.md.
    directory_dir: Path = setting(Path("/var/lib/dsportal-directory"), "Where the demo directory lives (slapd, its "
                                  "CA, the portal's password): one for every box on this machine, which name it alike.")
    directory_max_failures: int = setting(10, "Wrong passwords in a row (within directory_failure_window_s) that lock "
                                          "a directory account (the box's slapd: pwdMaxFailure).")
    directory_lockout_s: int = setting(900, "Seconds a locked account stays locked (pwdLockoutDuration).")
    directory_failure_window_s: int = setting(900, "Seconds a wrong password counts towards a lock "
                                              "(pwdFailureCountInterval).")

    # Authorisation, by LDAP group name (cn) or full DN.
    allowed_groups: tuple[str, ...] = setting(("datascientists", "portal-admins"),
                                              "The groups (cn or full DN) whose members may log in.")
    admin_groups: tuple[str, ...] = setting(("portal-admins",), "The groups (cn or full DN) whose members are "
                                            "hub admins.")
    gpu_quota: Mapping[str, int] = setting({"gpu-users": 4}, "The most GPUs each group's members may hold at once, "
                                           "counting everything a user runs together: their JupyterLab server and "
                                           "all their training jobs, on all nodes (the largest quota among a user's "
                                           "groups applies). The portal refuses a server or job beyond it, and the "
                                           "scheduler holds it too (Slurm: GrpTRES gres/gpu on each user's "
                                           "association; Kubernetes: a ResourceQuota in the user's namespace).")
    default_gpu_quota: int = setting(0, "The GPU quota (all of a user's servers and jobs together, as gpu_quota) of "
                                     "users in none of gpu_quota's groups.")
    max_jobs_per_user: int = setting(50, "The most jobs a user may have queued or running at once, servers included: "
                                     "the portal refuses a submit beyond it, and Slurm holds it too (MaxSubmitJobs "
                                     "on each user's association, set by `python -m portal.accounts sync`).")

    scheduler: str = setting("slurm", "Where the users' JupyterLab servers and their training jobs run: "
                             f"{' or '.join(server_schedulers())}. (Its old name, spawner_backend, still works, with "
                             "a deprecation warning.)")

    # Where this cluster keeps each job in the users' homes. Two clusters (a site's second one, or the tests' box
    # beside a user's box) may share the homes: each keeps its jobs in a directory of its own.
    cluster_name: str = setting("dsportal", "This cluster's name: Slurm's ClusterName (the box writes it into "
                                "slurm.conf) and the directory under each user's ~/jobs where this portal keeps its "
                                "jobs (~/jobs/<cluster_name>/<id>/), so two clusters that share the homes never "
                                "share a job directory, even where their job ids are the same.")
    jobs_old_layout: bool = setting(True, "Also list the job directories of the layout before per-cluster "
                                    "directories (~/jobs/<id>/) as this cluster's jobs: on for the cluster whose "
                                    "portal wrote them, off for any other cluster that shares the homes.")
    user_settings_file: str = setting(".config/dsportal/settings.json", "Each user's own portal settings (their "
                                      "default for e-mail at a job's end), relative to their home. Clusters that "
                                      "share the homes share it unless one names another file (the tests' box does).")
    user_notebooks_dir: str = setting("notebooks", "Where each user's server copies the template notebooks they have "
                                      "not had yet, at every start, relative to their home.")
    server_environment: tuple[str, ...] = setting(
        (), "Extra environment of every user's JupyterLab server, as NAME=value items; {home} stands for the "
            "user's home as the server sees it. E.g. JUPYTER_RUNTIME_DIR={home}/.cache/jupyter-runtime where homes "
            "are on a network file system; the tests' box keeps JupyterLab's workspaces, settings and runtime files "
            "in a place of its own.")

    # E-mail at a job's end: Slurm's own (--mail-type=END,FAIL); slurm.conf's MailProg is portal.jobmail, which
    # adds the job's best mean AUROC and its page and hands the message to an MTA over SMTP.
    job_mail: bool = setting(True, "Offer e-mail at a Slurm job's end (each job's `mail` field; users may turn it "
                             "off for themselves). Needs MailProg=portal.jobmail in slurm.conf and an MTA.")
    smtp_host: str = setting("127.0.0.1", "The MTA that job-end e-mail is handed to (SMTP, no authentication): "
                             "the box's exim4, or a site's relay.")
    smtp_port: int = setting(2525, "The MTA's port. The box runs Debian's exim4 there, local delivery only.")
    mail_from: str = setting("Data Scientist Portal <portal@dsportal.local>", "The From: of job-end e-mail.")
    box_mail_dir: Path = setting(Path("/var/mail"), "Where the box's exim4 delivers each user's mail (a mailbox "
                                 "file per user, as /var/mail/<user>). A second box beside a user's (the tests') "
                                 "names a directory of its own, so its mail never reaches the users' mailboxes.")

    # The cluster in a box's compute nodes: each a host of its own on this machine (a network and UTS namespace
    # named like its hostname), on a bridge the box makes for box_subnet, with its own slurmd and fake GPUs.
    box_nodes: int = setting(2, "How many compute nodes the cluster in a box runs, each a host of its own on this "
                             "machine with its own slurmd and fake GPUs.")
    box_node_prefix: str = setting("node", "The box's node names and hostnames: <prefix>1, <prefix>2, ...")
    box_subnet: str = setting("198.18.0.0/27", "The network of the bridge the box makes for its nodes: the bridge "
                              "takes the subnet's first address, node N the address N after it. It must lie in "
                              "198.18.0.0/24, so two boxes (say, `make up` and the tests) use two parts of it.")

    # Training jobs (portal.jobs).
    default_data_dir: str = setting("", "The data set a job reads when its spec names none; empty means the demo "
                                    "set that portal.jobs.demo_data makes: "
                                    "<state_dir>/datasets/chestxray14-demo-tfrecords.")
    jobs_partition: str = setting("", "The partition training jobs go to; empty means Slurm's default partition.")
    jobs_launcher: str = setting("mpirun", "How a Slurm job starts its Horovod workers. mpirun (the default) is what "
                                 "Dell's CheXNet/Horovod study measured best, with --map-by socket; srun needs "
                                 "Slurm and Open MPI built with the same PMI (jobs_srun_mpi).")
    jobs_mpi_map_by: str = setting("socket", "mpirun's placement: --map-by socket spreads the workers over both "
                                   "sockets (each near its GPUs).")
    jobs_mpi_bind_to: str = setting("none", "mpirun's --bind-to (none, socket or core): none leaves the threads of "
                                    "TensorFlow's input pipeline free to use every core of the node.")
    jobs_mpirun_args: tuple[str, ...] = setting(
        ("--mca", "pml", "ob1", "--mca", "btl", "^openib"),
        "Extra mpirun arguments: the ob1 PML over TCP/shared memory, never the obsolete openib BTL (Horovod's "
        'advice for clusters without UCX; a site with InfiniBand and UCX sets e.g. "--mca,pml,ucx").')
    jobs_trainer_args: tuple[str, ...] = setting(
        (), "Extra arguments for every job's trainer (python -m chexnet.train --help), after the spec's. The test "
            'boxes set "--graph-optimizer,off": on 2 CPU cores it saves about 25 s of start-up per training run; a '
            "GPU site leaves it empty.")
    jobs_environment: tuple[str, ...] = setting(
        (), "Extra environment of every job's workers, as NAME=value items; {home} stands for the user's home. E.g. "
            "KERAS_HOME={home}/.cache/keras; the tests' box keeps Keras's per-user file in a place of its own.")
    jobs_srun_mpi: str = setting("pmix", "srun's --mpi plugin when jobs_launcher is srun (`srun --mpi=list` shows "
                                 "what the site has).")
    jobs_nccl_debug: str = setting("WARN", "NCCL_DEBUG for every worker; empty means not set. WARN prints why a "
                                   "collective failed without flooding the log; INFO shows the chosen transports.")
    jobs_nccl_socket_ifname: str = setting("", 'NCCL_SOCKET_IFNAME: the network interface(s) NCCL uses between '
                                           'nodes, e.g. "ib0" or "^docker0,lo"; empty means not set.')
    jobs_nccl_ib_disable: str = setting("", 'NCCL_IB_DISABLE: "1" where InfiniBand is absent or broken (NCCL then '
                                        'uses sockets), "0" to insist on it; empty means not set.')

    # MLflow (docs/mlflow.md): each job's rank 0 logs its run as its owner; the dashboard shows each user theirs.
    mlflow_url: str = setting("box", "The MLflow tracking server (with MLflow's basic-auth app), as jobs and the "
                              "dashboard reach it: a URL whose path is /services/portal/mlflow (its --static-prefix). "
                              "box: the box's own; empty: no MLflow, and nothing changes.")
    mlflow_admin_file: str = setting("", "A file (mode 0600) whose first line is `user:password` of the MLflow "
                                     "server's admin, who makes each user's account; empty: <state_dir>/mlflow/admin.")

    # The dashboard (portal.service): a JupyterHub managed service at /services/portal/ on 127.0.0.1.
    dashboard_port: int = setting(0, "The dashboard's port; 0 means hub_port + 90 (8090 for the demo), so boxes "
                                  "with other hub ports never share it.")
    dashboard_refresh_s: int = setting(2, "Seconds one answer of Slurm's (squeue, scontrol) serves every request "
                                       "together: users refreshing the page must not each run squeue.")
    dashboard_metrics_refresh_s: int = setting(15, "Seconds a running job's metrics (read from its TensorBoard "
                                               "files, as the user: a Python process) are reused.")
    dashboard_log_lines: int = setting(40, "Lines of a job's output shown on its page.")
    dashboard_page_reads_per_s: int = setting(200, "Page reads a second that all open dashboard pages together are "
                                              "paced to: each page refreshes every 5 s while few are open, and "
                                              "less often as more are (5,000 open pages: every 25 s).")
    dashboard_api_rate: int = setting(20, "Requests a second one user may make to the dashboard's JSON API, over "
                                      "time; beyond it (and dashboard_api_burst) the answer is 429 with Retry-After.")
    dashboard_api_burst: int = setting(100, "Requests one user may make to the JSON API at once, before "
                                       "dashboard_api_rate applies.")

    def __post_init__(self) -> None:
        self.check_settings()  # portal.config_checks: what each setting allows, named in every refusal

    def sources(self) -> dict[str, str]:
        """Where each value came from: "default", "YAML file <path>" or "environment DSPORTAL_<NAME>", as load()
        recorded it; "code" for a value given to PortalConfig() or dataclasses.replace() directly."""
        recorded: Mapping[str, str] = getattr(self, "_sources", {})
        return {f.name: recorded.get(f.name) or ("default" if getattr(self, f.name) == default_of(f) else "code")
                for f in dataclasses.fields(self)}

    # Derived values: computed, never stored twice.
    @property
    def ca_file(self) -> Path:
        return Path(self.ldap_ca_file) if self.ldap_ca_file else self.directory_dir / "tls" / "ca.pem"

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
        registered = SCHEDULERS.get(self.scheduler)
        return self.box_gateway if registered is not None and registered.hub_api_at_gateway else "127.0.0.1"

    @property
    def hub_url(self) -> str:
        return f"{'https' if self.hub_ssl_cert else 'http'}://{self.hub_ip}:{self.hub_port}"

    @property
    def dashboard_service_port(self) -> int:
        return self.dashboard_port or self.hub_port + 90

    @property
    def dashboard_url(self) -> str:
        """Where the hub's proxy reaches the dashboard service (not the public address)."""
        return f"http://127.0.0.1:{self.dashboard_service_port}"

    def dashboard_addresses(self, proxy_address: str = "127.0.0.1") -> tuple[str, ...]:
        """Where the dashboard listens: `proxy_address`, the hub's proxy's way to it (its service URL's host), and
        the hub's API address, where the users' servers reach it too (the lab asks for its GPU figures:
        portal.lab_gpus); 0.0.0.0 covers both."""
        wanted = dict.fromkeys((proxy_address, self.hub_api_address))
        return ("0.0.0.0",) if "0.0.0.0" in wanted else tuple(wanted)

    @property
    def dashboard_for_servers(self) -> str:
        """The dashboard's URL as the users' servers reach it (the spawners put it in SERVER_DASHBOARD_ENV): where
        they reach the hub's API (its connect address in a cluster), at the dashboard's port."""
        host = self.hub_connect_ip or self.hub_api_address
        return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{self.dashboard_service_port}/services/portal/"

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

    def gpu_quota_for(self, groups: Sequence[str]) -> int:
        """The most GPUs a member of these groups may hold at once, server and jobs together: the largest quota
        among them."""
        return quota_for(self.gpu_quota, self.default_gpu_quota, groups)  # the rule: portal.quota

    def user_gpu_quota(self, groups: Sequence[str], holders: Sequence[GpuHolder] = ()) -> GpuQuota:
        """A member of `groups`'s GPU quota, with `holders`, what their server and jobs hold of it now: the one
        place every scheduler's `limits` builds it."""
        return GpuQuota(self.gpu_quota_for(groups), tuple(groups), tuple(holders))

    def is_admin(self, groups: list[str] | tuple[str, ...]) -> bool:
        return any(g in self.admin_groups for g in groups)


def load(env: Mapping[str, str] | None = None) -> PortalConfig:
    """Read the settings: defaults, then the YAML file in DSPORTAL_CONFIG, then DSPORTAL_* variables.

    The result remembers where each value came from: ``cfg.sources()``.
    """
    env = os.environ if env is None else env
    values, sources = read_given(env, {f.name: f for f in dataclasses.fields(PortalConfig)})
    try:
        cfg = PortalConfig(**values)
    except ConfigError as err:
        raise ConfigError(said_where(str(err), sources)) from None
    object.__setattr__(cfg, "_sources", MappingProxyType(sources))  # frozen: set once, here
    return cfg
