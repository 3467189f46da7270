"""The box's Prometheus server (docs/operations.md), where prometheus_url is `box`: deploy/prometheus_server.py's
Debian `prometheus` on 127.0.0.1:hub_port + 96 (the login host's loopback, where the dashboard reads it; no node
reaches it), scraping the hub's /hub/metrics and the portal's metrics through the hub's public address, its data,
token and reader in <state_dir>/prometheus/ (root's, mode 0700)."""

from __future__ import annotations

from pathlib import Path

from deploy import prometheus_server
from deploy.local.parts.layout import LOCALHOST, Layout
from deploy.supervise import Service
from portal import prometheus_access
from portal.config import PortalConfig


def runs_here(cfg: PortalConfig) -> bool:
    return cfg.prometheus_url == "box"


def data_dir(lay: Layout) -> Path:
    return prometheus_access.box_dir(lay.cfg)


def port(cfg: PortalConfig) -> int:
    return cfg.hub_port + prometheus_access.BOX_PORT_OFFSET


def targets(cfg: PortalConfig) -> prometheus_server.Targets:
    """The hub's public address as the login host reaches it (0.0.0.0: its loopback)."""
    host = LOCALHOST if cfg.hub_ip in ("", "0.0.0.0") else cfg.hub_ip
    scheme = "https" if cfg.hub_ssl_cert else "http"
    return prometheus_server.Targets(f"{scheme}://{host}:{cfg.hub_port}", cfg.hub_ssl_cert)


def ensure_secrets(lay: Layout) -> None:
    """Before the hub starts (it registers the token): also when the server itself is not started."""
    if runs_here(lay.cfg):
        prometheus_server.ensure_secrets(data_dir(lay))


def _prepare(lay: Layout) -> None:
    token = prometheus_access.token_file(lay.cfg)
    assert token is not None  # prometheus_url is `box`
    prometheus_server.prepare(data_dir(lay), targets(lay.cfg), token)


def service() -> Service:
    return Service(
        "prometheus", "prometheus", _prepare,
        lambda lay: prometheus_server.command(data_dir(lay), LOCALHOST, port(lay.cfg)),
        lambda lay: prometheus_server.ready(data_dir(lay), prometheus_server.url(LOCALHOST, port(lay.cfg))),
        prometheus_server.READY_TIMEOUT_S, lambda lay: [(LOCALHOST, port(lay.cfg))], cwd=data_dir,
        beside=True)  # the hub does not need it to start: `up` waits for it last
