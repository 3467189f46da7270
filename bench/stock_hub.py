"""The spawn benchmark's baseline: a second hub beside the box's, whose spawner is stock batchspawner.SlurmSpawner.

It runs bench/stock_hub_config.py, which loads the production jupyterhub_config.py and then sets the stock spawner
(`configure_stock_slurm_spawner`): the product never imports the benchmark. It has ports and a database of its
own (hub_port + 40..43) and shares the box's slapd and Slurm.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from bench.hub_client import wait_until_up
from portal.config import PortalConfig
from portal.directory import search_password_file

REPO = Path(__file__).resolve().parents[1]
STOCK_HUB_CONFIG = Path(__file__).with_name("stock_hub_config.py")
STOCK_PORT_SHIFT = 40  # the stock hub: hub_port + 40 (public), + 41 (proxy API), + 42 (hub API), + 43 (dashboard)
# The same server for both spawners: what the benchmark's form asks ours for and stock's req_* traits say.
PARTITION, GPUS, CPUS, MEMORY_GB, RUNTIME = "gpu", 1, 2, 4, "01:00:00"


def configure_stock_slurm_spawner(c: Any, portal: PortalConfig) -> None:
    """Stock batchspawner.SlurmSpawner as batchspawner's README configures it, plus only what this box needs.

    README: the class, `import batchspawner` (registers the hub API that batchspawner-singleuser reports its port
    to), http_timeout 120 (jupyterhub_config.py sets it for both), and the req_* job resources, here equal to what
    the benchmark asks the portal's spawner for. The box needs: `exec_prefix` (the hub runs as root and sudo is
    not installed: runuser; batchspawner runs squeue and scancel without the spawner's environment, so the prefix
    sets SLURM_CONF), SLURM_CONF and PATH in the job's environment (the box's slurm.conf is not
    /etc/slurm/slurm.conf; srun and the venv's programs must be found), and `cmd` / `batchspawner_singleuser_cmd`
    as the venv's programs (platform notes). start_timeout is the portal's, as ours has it.
    """
    import batchspawner  # noqa: F401  (registers /hub/api/batchspawner)

    from portal.runas import RUNUSER

    c.JupyterHub.spawner_class = "batchspawner.SlurmSpawner"
    c.BatchSpawnerBase.req_partition = PARTITION
    c.BatchSpawnerBase.req_nprocs = str(CPUS)
    c.BatchSpawnerBase.req_memory = f"{MEMORY_GB}G"
    c.BatchSpawnerBase.req_runtime = RUNTIME
    c.SlurmSpawner.req_gres = f"gpu:{GPUS}" if GPUS else ""
    c.BatchSpawnerBase.exec_prefix = f"{RUNUSER} -u {{username}} -- /usr/bin/env SLURM_CONF={portal.slurm_conf_path}"
    c.Spawner.environment = {
        "SLURM_CONF": str(portal.slurm_conf_path),
        "PATH": f"{portal.venv / 'bin'}:{portal.slurm_bin_dir}:/usr/local/bin:/usr/bin:/bin",
    }
    c.Spawner.cmd = [str(portal.venv / "bin" / "jupyterhub-singleuser")]
    c.BatchSpawnerBase.batchspawner_singleuser_cmd = str(portal.venv / "bin" / "batchspawner-singleuser")
    c.Spawner.start_timeout = portal.start_timeout


def _yaml_value(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict) or hasattr(value, "items"):
        return dict(value)
    return value


def stock_hub_settings(cfg: PortalConfig, state_dir: Path) -> dict[str, Any]:
    """The box's settings, for a hub with stock batchspawner on ports of its own and its own database."""
    settings = {f.name: _yaml_value(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    port = cfg.hub_port + STOCK_PORT_SHIFT
    settings.update(state_dir=str(state_dir), slurm_conf=str(cfg.slurm_conf_path), ldap_ca_file=str(cfg.ca_file),
                    ldap_search_password_file=str(search_password_file(cfg)), hub_port=port, proxy_api_port=port + 1,
                    hub_api_port=port + 2, dashboard_port=port + 3)
    return settings


class HubProcess:
    """A jupyterhub process of the benchmark's own (`hub_config` with `settings`, in `state_dir`, public on `port`)
    for the length of a `with`."""

    def __init__(self, cfg: PortalConfig, state_dir: Path, settings: dict[str, Any], hub_config: Path, port: int):
        import yaml

        self.state_dir = state_dir
        (self.state_dir / "hub").mkdir(parents=True, exist_ok=True)
        self.config = self.state_dir / "portal.yaml"
        self.config.write_text(yaml.safe_dump(settings))
        self.hub_config = hub_config
        self.log = self.state_dir / "hub.log"
        self.url = f"http://{cfg.hub_ip}:{port}"
        self.cfg = cfg
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> HubProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DSPORTAL_")}
        env.update(DSPORTAL_CONFIG=str(self.config), PYTHONPATH=str(REPO),
                   PATH=f"{self.cfg.venv}/bin:{self.cfg.node_prefix}/node_modules/.bin:{env.get('PATH', '/usr/bin')}")
        with self.log.open("ab") as log:
            command = [str(self.cfg.venv / "bin" / "jupyterhub"), "-f", str(self.hub_config)]
            self.proc = subprocess.Popen(command, cwd=self.state_dir / "hub", env=env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

        wait_until_up(self.url, 60, alive=lambda: self.proc.poll() is None)
        return self

    def __exit__(self, *exc: object) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)  # the hub stops its proxy and services
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


class StockHub(HubProcess):
    """A second hub (jupyterhub_config.py, then stock batchspawner) beside the box's."""

    def __init__(self, cfg: PortalConfig):
        state_dir = cfg.state_dir / "bench-spawn-stock"
        super().__init__(cfg, state_dir, stock_hub_settings(cfg, state_dir), STOCK_HUB_CONFIG,
                         cfg.hub_port + STOCK_PORT_SHIFT)
