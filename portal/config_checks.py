"""What each of the portal's settings allows: one check per setting, each refusal naming the setting and the values
it takes. PortalConfig (portal.config) inherits `SettingsChecks` and checks itself once made: the checks read the
settings from the config itself, so this module, below portal.config, names no PortalConfig. A section of its own
(a scheduler's: portal.scheduler.<name>.settings) checks its settings in its `check_section`, called here."""

from __future__ import annotations

import ipaddress
import re
from email.utils import parseaddr
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from portal.config_values import ConfigError, check_ports
from portal.registrations import server_schedulers

TLS_MODES = ("starttls", "ldaps", "none")
JOB_LAUNCHERS = ("mpirun", "srun")
# The cluster in a box's own hosts live here: 198.18.0.0/15 is reserved for benchmarking (RFC 2544), so no real
# network uses it, and the box never routes it anywhere.
BOX_NETWORK = ipaddress.ip_network("198.18.0.0/24")
BOX_NODE_PREFIX = r"^[a-z][a-z0-9]{0,7}$"  # interface names are at most 15 characters: "ve-" + prefix + number
MPI_BINDINGS = ("none", "socket", "core")
# A cluster's name is Slurm's ClusterName (lower case; slurmdbd names its tables after it) and a directory under
# every user's ~/jobs: a letter first and no '-', so that it is never a job id (portal.records.record.JOB_ID).
CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
MLFLOW_PATH = "/services/portal/mlflow"  # the dashboard's route to MLflow (portal.mlflow_accounts.PREFIX)


class SettingsChecks:
    """The checks as a section of PortalConfig, which calls `check_settings` once made."""

    def check_settings(self) -> None:
        """ConfigError naming the first setting whose value is not allowed, and what is."""
        _check_settings(self)


def _check_settings(cfg: Any) -> None:  # a PortalConfig: every section's settings
    if cfg.ldap_tls not in TLS_MODES:
        raise ConfigError(f"ldap_tls is {cfg.ldap_tls!r}; allowed: {', '.join(TLS_MODES)}")
    if cfg.scheduler not in server_schedulers():  # those that run servers too (portal.registrations)
        raise ConfigError(f"scheduler is {cfg.scheduler!r}; allowed: {', '.join(server_schedulers())}")
    choices = {"jobs_launcher": JOB_LAUNCHERS, "jobs_mpi_bind_to": MPI_BINDINGS,
               "jobs_nccl_ib_disable": ("", "0", "1")}
    for name, allowed in choices.items():
        if getattr(cfg, name) not in allowed:
            raise ConfigError(f"{name} is {getattr(cfg, name)!r}; allowed: {', '.join(map(repr, allowed))}")
    check_ports(cfg, ("hub_port", "hub_api_port", "proxy_api_port", "ldap_port", "ldaps_port", "smtp_port"))
    if any(c in cfg.mail_from for c in "\r\n") or "@" not in parseaddr(cfg.mail_from)[1]:
        raise ConfigError(f"mail_from is {cfg.mail_from!r}; allowed: one address on one line, such as "
                          "'Portal <portal@example.org>'")
    if not cfg.ldap_lookup_dn and "{username}" not in cfg.ldap_bind_dn_template:
        raise ConfigError("ldap_bind_dn_template must contain {username} unless ldap_lookup_dn is set")
    for name in ("gpu_quota", "gpu_idle_s", "gpu_hours_budget"):  # per group: none below 0
        for group, value in getattr(cfg, name).items():
            if value < 0:
                raise ConfigError(f"{name}[{group}] is {value}; allowed: 0 or more")
    for name in ("default_gpu_quota", "default_gpu_idle_s", "gpu_idle_grace_s", "default_gpu_hours_budget"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"{name} is {getattr(cfg, name)}; allowed: 0 or more")
    if bool(cfg.hub_ssl_cert) != bool(cfg.hub_ssl_key):
        given, missing = ("hub_ssl_cert", "hub_ssl_key") if cfg.hub_ssl_cert else ("hub_ssl_key", "hub_ssl_cert")
        raise ConfigError(f"{given} is set and {missing} is not; allowed: both (HTTPS) or neither (HTTP)")
    if not 0 <= cfg.dashboard_port <= 65535:
        raise ConfigError(f"dashboard_port is {cfg.dashboard_port}; allowed: 1-65535, or 0 for hub_port + 90")
    _check_mlflow(cfg.mlflow_url)
    _check_prometheus(cfg.prometheus_url)
    for section in type(cfg).__mro__:  # each scheduler's section checks its own (portal.scheduler.<name>.settings)
        if "check_section" in vars(section):
            section.check_section(cfg)
    _check_box(cfg)
    _check_places(cfg)
    for name in ("dashboard_refresh_s", "dashboard_metrics_refresh_s", "dashboard_log_lines", "max_jobs_per_user",
                 "gpu_read_every_s",
                 "dashboard_api_rate", "dashboard_api_burst", "directory_max_failures", "directory_lockout_s",
                 "directory_failure_window_s"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name} is {getattr(cfg, name)}; allowed: 1 or more")


def _check_mlflow(url: str) -> None:
    """mlflow_url: empty, box, or an http(s) URL of a server whose --static-prefix is the dashboard's route."""
    if url in ("", "box"):
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
            or parts.path.rstrip("/") != MLFLOW_PATH or any(c.isspace() for c in url):
        raise ConfigError(f"mlflow_url is {url!r}; allowed: empty (no MLflow), box, or http(s)://host:port"
                          f"{MLFLOW_PATH} (the server's --static-prefix)")


def _check_prometheus(url: str) -> None:
    """prometheus_url: empty, box, or an http(s) URL of a server (its API under it: /api/v1/...)."""
    if url in ("", "box"):
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
            or parts.username or any(c.isspace() for c in url):
        raise ConfigError(f"prometheus_url is {url!r}; allowed: empty (no charts), box, or http(s)://host:port[/path] "
                          "(credentials go in prometheus_reader_file)")


def _check_box(cfg: Any) -> None:
    try:
        subnet = ipaddress.ip_network(cfg.box_subnet)
    except ValueError:
        raise ConfigError(f"box_subnet is {cfg.box_subnet!r}; allowed: a network such as 198.18.0.0/27 "
                          f"inside {BOX_NETWORK}") from None
    if not subnet.subnet_of(BOX_NETWORK):  # never 10/8, 172.16/12, 192.168/16 or anything routed
        raise ConfigError(f"box_subnet is {subnet}; allowed: a network inside {BOX_NETWORK}")
    most = subnet.num_addresses - 3  # less the network, broadcast and bridge addresses
    if not 1 <= cfg.box_nodes <= min(most, 99):
        raise ConfigError(f"box_nodes is {cfg.box_nodes}; allowed: 1-{min(most, 99)} (box_subnet {subnet})")
    if not re.match(BOX_NODE_PREFIX, cfg.box_node_prefix):
        raise ConfigError(f"box_node_prefix is {cfg.box_node_prefix!r}; allowed: a lower-case letter, then up "
                          "to 7 lower-case letters or digits")


def _check_places(cfg: Any) -> None:
    # Not "jobs": ~/jobs/jobs/<id> would read as a job of the older layout (portal.records.record.JOBS_ROOT).
    if not CLUSTER_NAME.match(cfg.cluster_name) or cfg.cluster_name == "jobs":
        raise ConfigError(f"cluster_name is {cfg.cluster_name[:40]!r}; allowed: a lower-case letter, then up to 39 "
                          "lower-case letters, digits or '_', other than 'jobs'")
    settings_file = PurePosixPath(cfg.user_settings_file)
    if settings_file.is_absolute() or ".." in settings_file.parts or not settings_file.name \
            or str(settings_file) in (".", ""):
        raise ConfigError(f"user_settings_file is {cfg.user_settings_file[:60]!r}; allowed: a file's path inside "
                          "each user's home, relative to it, such as .config/dsportal/settings.json")
    notebooks = PurePosixPath(cfg.user_notebooks_dir)
    if notebooks.is_absolute() or ".." in notebooks.parts or str(notebooks) in (".", ""):
        raise ConfigError(f"user_notebooks_dir is {cfg.user_notebooks_dir[:60]!r}; allowed: a directory inside each "
                          "user's home, relative to it, such as notebooks")
    for setting_name in ("server_environment", "jobs_environment"):
        for item in getattr(cfg, setting_name):
            name, equals, value = item.partition("=")
            if not equals or not ENV_NAME.match(name) or any(c in value for c in "\r\n\0"):
                raise ConfigError(f"{setting_name} has {item[:60]!r}; allowed: NAME=value items, NAME of letters, "
                                  "digits and '_', the value on one line ({home}: the user's home)")
    if not cfg.box_mail_dir.is_absolute():
        raise ConfigError(f"box_mail_dir is {str(cfg.box_mail_dir)[:60]!r}; allowed: an absolute path")
