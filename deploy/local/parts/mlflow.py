"""The box's MLflow tracking server (docs/mlflow.md), where mlflow_url is `box`: deploy/mlflow_server.py's `mlflow
server` on the bridge's address (where the jobs on the compute nodes reach it, and the dashboard), port hub_port +
95, its databases, artifacts and admin in <state_dir>/mlflow/ (root's, mode 0700)."""

from __future__ import annotations

from pathlib import Path

from deploy import mlflow_server
from deploy.local.parts.layout import Layout
from deploy.local.parts.nodes import ensure_bridge
from deploy.supervise import Service
from portal.config import PortalConfig
from portal.mlflow_accounts import BOX_PORT_OFFSET, tracking_uri


def runs_here(cfg: PortalConfig) -> bool:
    """Whether the box runs the server: mlflow_url is `box` (empty: no MLflow; a URL: the site's own server)."""
    return cfg.mlflow_url == "box"


def data_dir(lay: Layout) -> Path:
    return lay.root / "mlflow"


def port(cfg: PortalConfig) -> int:
    return cfg.hub_port + BOX_PORT_OFFSET


def _prepare(lay: Layout) -> None:
    ensure_bridge(lay)  # it listens on the bridge's address
    mlflow_server.prepare(data_dir(lay))


def service() -> Service:
    return Service(
        "mlflow", "mlflow", _prepare,
        lambda lay: mlflow_server.command(data_dir(lay), lay.cfg.box_gateway, port(lay.cfg)),
        lambda lay: mlflow_server.ready(tracking_uri(lay.cfg)), mlflow_server.READY_TIMEOUT_S,
        lambda lay: [(lay.cfg.box_gateway, port(lay.cfg))],
        env=lambda lay: mlflow_server.environment(data_dir(lay)), cwd=data_dir,
        beside=True)  # the hub does not need it to start: `up` waits for it last
