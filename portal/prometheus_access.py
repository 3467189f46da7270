"""Where the operators' Prometheus is and the secrets between it and the portal (docs/operations.md):

    cfg.prometheus_url            "" (none), "box" (the box's own server: deploy/prometheus_server.py), or a URL
    metrics_token_file            the token Prometheus scrapes the hub's /hub/metrics and the portal's metrics with;
                                  the hub registers it as the service `prometheus` (jupyterhub_config.py)
    prometheus_reader_file        `user:password`, the basic auth the dashboard reads Prometheus' API with

A box's server keeps both under <state_dir>/prometheus/ (root's, mode 0700), made on its first start; a site names
its own files. Both are read here only, each a regular file of mode 0600, so that a FIFO never holds up the hub's
start and a secret others can read is refused with the setting's name.
"""

from __future__ import annotations

import os
from pathlib import Path
from stat import S_ISREG

from portal.config import PortalConfig
from portal.config_values import ConfigError

BOX_PORT_OFFSET = 96  # the Slurm box's server listens on 127.0.0.1:hub_port + 96 (MLflow's is + 95)
TOKEN_NAME, READER_NAME = "metrics-token", "reader"
MOST_BYTES = 4096


def box_dir(cfg: PortalConfig) -> Path:
    return cfg.state_dir / "prometheus"


def token_file(cfg: PortalConfig) -> Path | None:
    """metrics_token_file, else the box's where the box runs Prometheus; None: no Prometheus reads the metrics."""
    if cfg.metrics_token_file:
        return Path(cfg.metrics_token_file)
    return box_dir(cfg) / TOKEN_NAME if cfg.prometheus_url == "box" else None


def registered(cfg: PortalConfig) -> bool:
    """Whether the hub registers the service `prometheus`: a site's metrics_token_file is named (a missing one is
    an error at the hub's start), or the box's has been made (a hub started without the box's server has none)."""
    path = token_file(cfg)
    return path is not None and (bool(cfg.metrics_token_file) or path.exists())


def reader_file(cfg: PortalConfig) -> Path:
    return Path(cfg.prometheus_reader_file) if cfg.prometheus_reader_file else box_dir(cfg) / READER_NAME


def url(cfg: PortalConfig) -> str:
    """The server's base URL as the dashboard reaches it; "" where there is none."""
    if cfg.prometheus_url == "box":
        return f"http://127.0.0.1:{cfg.hub_port + BOX_PORT_OFFSET}"
    return cfg.prometheus_url.rstrip("/")


def secret_line(setting: str, path: Path) -> str:
    """The first line of a secret's file: ConfigError naming `setting` for one missing, not a regular file (a FIFO,
    a device), or that others may read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise ConfigError(f"{setting} {path}: {err.strerror}") from None
    with os.fdopen(fd, "rb") as held:
        mode = os.fstat(held.fileno()).st_mode
        if not S_ISREG(mode):
            raise ConfigError(f"{setting} {path} is not a regular file")
        if mode & 0o077:
            raise ConfigError(f"{setting} {path} is mode {mode & 0o777:04o}; allowed: 0600 (others could read the "
                              "secret it holds)")
        first = held.read(MOST_BYTES).split(b"\n", 1)[0]
    return first.decode("utf-8", "replace").strip()


def metrics_token(cfg: PortalConfig) -> str:
    """The token of token_file(cfg) (ConfigError when there is none, or it is shorter than 16 characters)."""
    path = token_file(cfg)
    if path is None:
        raise ConfigError("metrics_token_file is empty and prometheus_url is not `box`: no Prometheus token")
    token = secret_line("metrics_token_file", path)
    if len(token) < 16:
        raise ConfigError(f"metrics_token_file {path}: its first line holds no token of 16 characters or more")
    return token


def reader(cfg: PortalConfig) -> tuple[str, str]:
    """(user, password) the dashboard reads Prometheus with: ConfigError naming prometheus_reader_file."""
    path = reader_file(cfg)
    user, _, password = secret_line("prometheus_reader_file", path).partition(":")
    if not user or not password:
        raise ConfigError(f"prometheus_reader_file {path}: its first line is not `user:password`")
    return user, password
