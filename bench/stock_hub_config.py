# The spawn benchmark's stock hub (bench/stock_hub.py): the production jupyterhub_config.py, then stock
# batchspawner.SlurmSpawner in place of the portal's spawner. Run as `jupyterhub -f bench/stock_hub_config.py`
# with DSPORTAL_CONFIG naming the stock hub's settings and the repository on PYTHONPATH.
from pathlib import Path

from bench.stock_hub import configure_stock_slurm_spawner
from portal.config import load

c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)
load_subconfig(str(Path(__file__).resolve().parents[1] / "jupyterhub_config.py"))  # noqa: F821 (as get_config)
configure_stock_slurm_spawner(c, load())
