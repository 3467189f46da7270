"""JupyterHub (with configurable-http-proxy and its services) on the login host."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

from deploy.daemons import SurvivedKill, running_pid, terminate
from deploy.local.parts import prometheus
from deploy.local.parts.layout import LOCALHOST, REPO, Layout, make_dir
from deploy.local.parts.nodes import describe_process, ensure_bridge
from deploy.supervise import BoxError, Service

# In the environment of the hub, its proxy (which inherits it) and its services (jupyterhub_config.py passes it):
# the box's state dir. What a killed hub left running is found by it.
MARKER = "CLUSTER_IN_A_BOX"
LEFTOVER_GRACE_S = 5.0


def ensure_hub(lay: Layout) -> None:
    if not (REPO / "jupyterhub_config.py").exists():
        raise BoxError(f"hub: {REPO / 'jupyterhub_config.py'} is missing (use `up --no-hub` without it)")
    make_dir(lay.hub, 0o700)
    prometheus.ensure_secrets(lay)  # the token it registers for the box's Prometheus
    ensure_bridge(lay)  # the hub's API listens on the bridge, where the servers on the nodes reach it
    stop_leftovers(lay)


def hub_env(lay: Layout) -> dict[str, str]:
    cfg = lay.cfg
    path = f"{cfg.venv}/bin:{cfg.node_prefix}/node_modules/.bin:{os.environ.get('PATH', '/usr/bin:/bin')}"
    # No PYTHONPATH: the hub and its services import the venv's copy of dsportal, as the users' servers (which
    # inherit the hub's PYTHONPATH through Spawner.env_keep) must: the checkout may be unreadable to them.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return {**env, "PATH": path, MARKER: str(lay.root)}


def leftovers(lay: Layout) -> list[int]:
    """Root's processes marked as this box's hub's, when no hub of this box runs: the proxy and services that a
    killed hub (SIGKILL, a crash) left behind, reparented; they hold the hub's ports. A user cannot make a root
    process, so a marker in a user's own environment counts for nothing."""
    if running_pid(lay.pid_file("hub"), "jupyterhub"):
        return []
    mark = f"{MARKER}={lay.root}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if proc.stat().st_uid == 0 and mark in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue  # gone meanwhile
    return found


def stop_leftovers(lay: Layout) -> None:
    pids = leftovers(lay)
    if not pids:
        return
    print(f"hub: stopping what a hub killed earlier left running: "
          f"{'; '.join(describe_process(pid) for pid in pids)}", flush=True)
    for pid in pids:
        try:
            terminate(pid, LEFTOVER_GRACE_S, with_descendants=True)
        except SurvivedKill as err:
            raise BoxError(f"hub: {err}") from err


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
        env=hub_env, cwd=lambda lay: lay.hub, after_stop=stop_leftovers)
