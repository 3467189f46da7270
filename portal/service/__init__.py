"""The dashboard: a JupyterHub managed service at /services/portal/ (tornado + HubOAuth).

HTML pages (`pages.py`) and the JSON API (`api.py`, under /services/portal/api/) live apart, as in JupyterHub;
both act for the logged-in user through `portal.jobs` (the service runs as root; every job command runs as the
user). Slurm's queue and nodes are read once per `dashboard_refresh_s` for everyone together (`cluster.py`).

    python -m portal.service          # started by the hub (c.JupyterHub.services), not by hand
"""

from pathlib import Path

# The hub's own templates, extended (c.JupyterHub.template_paths): a "Portal" item in the hub's navigation.
HUB_TEMPLATES = Path(__file__).resolve().parent / "hub_templates"
