"""JupyterHub (with configurable-http-proxy and its services) on the login host."""

from __future__ import annotations

import os
import urllib.error
import urllib.request

from supervise import BoxError, Service

from parts.layout import LOCALHOST, REPO, Layout, make_dir
from parts.nodes import ensure_bridge


def ensure_hub(lay: Layout) -> None:
    if not (REPO / "jupyterhub_config.py").exists():
        raise BoxError(f"hub: {REPO / 'jupyterhub_config.py'} is missing (use `up --no-hub` without it)")
    make_dir(lay.hub, 0o700)
    ensure_bridge(lay)  # the hub's API listens on the bridge, where the servers on the nodes reach it


def hub_env(lay: Layout) -> dict[str, str]:
    cfg = lay.cfg
    path = f"{cfg.venv}/bin:{cfg.node_prefix}/node_modules/.bin:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {**os.environ, "PYTHONPATH": str(REPO), "PATH": path}


def hub_ready(lay: Layout) -> str | None:
    url = f"http://{lay.cfg.hub_ip}:{lay.cfg.hub_port}/hub/api/"
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return None if response.status == 200 else f"GET {url}: {response.status}"
    except (urllib.error.URLError, OSError) as err:
        return f"GET {url}: {err}"


def service() -> Service:
    return Service(
        "hub", "jupyterhub", ensure_hub,
        lambda lay: [f"{lay.cfg.venv}/bin/jupyterhub", "-f", str(REPO / "jupyterhub_config.py")],
        hub_ready, 60,
        lambda lay: [(lay.cfg.hub_ip, lay.cfg.hub_port), (lay.cfg.hub_api_address, lay.cfg.hub_api_port),
                     (LOCALHOST, lay.cfg.proxy_api_port)],
        env=hub_env, cwd=lambda lay: lay.hub)
