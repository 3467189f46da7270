# JupyterHub configuration of the Data Scientist Portal: wiring only. Every value comes from portal.config
# (defaults = the local demo; a site sets DSPORTAL_CONFIG=/path/to/portal.yaml or DSPORTAL_* variables).
import sys

from portal.auth import PortalLDAPAuthenticator
from portal.config import load

portal = load()
hub_dir = portal.state_dir / "hub"
c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)

c.JupyterHub.ip = portal.hub_ip
c.JupyterHub.port = portal.hub_port
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = portal.hub_api_port
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{portal.proxy_api_port}"
c.ConfigurableHTTPProxy.command = [str(portal.node_prefix / "node_modules" / ".bin" / "configurable-http-proxy")]
c.JupyterHub.db_url = f"sqlite:///{hub_dir / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(hub_dir / "jupyterhub_cookie_secret")
# A hub restart re-attaches to running servers instead of cancelling every user's job.
c.JupyterHub.cleanup_servers = False

c.JupyterHub.authenticator_class = PortalLDAPAuthenticator

from spawners.slurm import PortalSlurmSpawner  # noqa: E402  (portal.config allows only "slurm" so far)

c.JupyterHub.spawner_class = PortalSlurmSpawner
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120

if portal.cull_idle_timeout:
    c.JupyterHub.services = [{
        "name": "idle-culler",
        "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={portal.cull_idle_timeout}"],
    }]
    c.JupyterHub.load_roles = [{
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    }]
