# bench.kube's stock hub: the production jupyterhub_config.py (with scheduler: kubernetes), then stock
# kubespawner.KubeSpawner in place of the portal's spawner. Run as `jupyterhub -f bench/stock_kube_hub_config.py`
# with DSPORTAL_CONFIG naming that hub's settings and the repository on PYTHONPATH.
from pathlib import Path

from bench.kube import configure_stock_kube_spawner
from portal.config import load

c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)
load_subconfig(str(Path(__file__).resolve().parents[1] / "jupyterhub_config.py"))  # noqa: F821 (as get_config)
configure_stock_kube_spawner(c, load())
