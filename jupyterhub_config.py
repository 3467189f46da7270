# JupyterHub configuration of the Data Scientist Portal: wiring only. Every value comes from portal.config
# (defaults = the local demo; a site sets DSPORTAL_CONFIG=/path/to/portal.yaml or DSPORTAL_* variables).
# The authenticator's and the spawners' traits that are portal settings (the LDAP server, TLS, groups, timeouts,
# the image ...) take their values from portal.config: setting one here to another value stops the hub at startup,
# naming the setting to use (portal.traits). docs/configuration.md lists both kinds.
import importlib
import os
import sys

from portal import prometheus_access
from portal.auth import PortalLDAPAuthenticator
from portal.config import load
from portal.registrations import SCHEDULERS, split
from portal.service import HUB_TEMPLATES
from portal.service.base import COOKIE_SAMESITE, SECURITY_HEADERS
from portal.service.headers import proxy_command

portal = load()
hub_dir = portal.state_dir / "hub"
# The cluster in a box marks its hub's processes with its state dir (deploy/local/parts/hub.py): the services carry
# it too, so that what a killed hub left running is found and stopped by the next `up`.
BOX_MARKER = "CLUSTER_IN_A_BOX"
# In a pod, the Kubernetes client finds the API server through these (its in-cluster configuration): a service
# started without them has no credentials.
IN_CLUSTER = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)

c.JupyterHub.ip = portal.hub_ip
c.JupyterHub.port = portal.hub_port
c.JupyterHub.hub_ip = portal.hub_api_address
if portal.hub_connect_ip:
    c.JupyterHub.hub_connect_ip = portal.hub_connect_ip
c.JupyterHub.hub_port = portal.hub_api_port
# HTTPS at the proxy (a secure context: browser notifications, Secure cookies); the hub's own API stays inside.
for name in ("hub_ssl_cert", "hub_ssl_key"):
    if getattr(portal, name) and not os.access(getattr(portal, name), os.R_OK):
        sys.exit(f"jupyterhub_config.py: {name} {getattr(portal, name)} cannot be read by the hub")
if portal.hub_ssl_cert:
    c.JupyterHub.ssl_cert = portal.hub_ssl_cert
    c.JupyterHub.ssl_key = portal.hub_ssl_key
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{portal.proxy_api_port}"
# The proxy with Strict-Transport-Security on every answer it sends over TLS (portal/proxy_hsts.js: CHP has no
# option for a response header); none over plain HTTP.
c.ConfigurableHTTPProxy.command = proxy_command(portal.node_prefix)
c.JupyterHub.db_url = f"sqlite:///{hub_dir / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(hub_dir / "jupyterhub_cookie_secret")
# A hub restart re-attaches to running servers instead of cancelling every user's job.
c.JupyterHub.cleanup_servers = False
# The hub's own 429 (too many spawns pending) says "Try again in N seconds" rounded up to tens and sends a
# Retry-After drawn from this range: one value, a multiple of ten, makes the text and the header agree.
c.JupyterHub.spawn_throttle_retry_range = (30, 30)
# The dashboard's policy (portal.service.base) on the hub's pages too. The hub keeps its own Content-Security-Policy
# (frame-ancestors 'none'); its cookie_options reach its login and _xsrf cookies and, through the spawner, the
# servers' OAuth cookies. Lax, not Strict: the OAuth redirects back from the hub's login must carry the cookies.
c.JupyterHub.tornado_settings = {
    "headers": dict(SECURITY_HEADERS),
    # Secure on https: the hub marks its login cookies so itself, and its _xsrf cookie takes these options.
    "cookie_options": {"samesite": COOKIE_SAMESITE, **({"secure": True} if portal.hub_ssl_cert else {})},
}

c.JupyterHub.authenticator_class = PortalLDAPAuthenticator

if portal.k8s_kubeconfig:
    # Before the spawner's import: kubernetes_asyncio (KubeSpawner's client) reads KUBECONFIG once, when it loads.
    # Without a kubeconfig, KubeSpawner uses the hub pod's service account (in the cluster).
    os.environ["KUBECONFIG"] = portal.k8s_kubeconfig
# The configured scheduler's spawner, as portal.registrations names it (the settings allow only those with one).
spawner_module, spawner_name = split(SCHEDULERS[portal.scheduler].spawner)
c.JupyterHub.spawner_class = getattr(importlib.import_module(spawner_module), spawner_name)
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120

# The dashboard (portal.service): runs as the hub's user (root) and acts for each user through portal.jobs.
# It reads the settings the hub read: the hub passes services only the variables named here.
c.JupyterHub.services = [{
    "name": "portal",
    "command": [sys.executable, "-m", "portal.service"],
    "url": portal.dashboard_url,
    "oauth_no_confirm": True,
    "environment": {k: v for k, v in os.environ.items()
                    if k.startswith("DSPORTAL_") or k == BOX_MARKER or k in IN_CLUSTER},
}]
c.JupyterHub.load_roles = [
    # Groups (GPU quota) and the admin flag decide what a user may do; read:servers says whether TensorBoard runs;
    # delete:servers lets the GPU watch stop a server whose GPUs stayed idle past its grace (docs/gpus.md).
    {"name": "portal-service", "scopes": ["list:users", "read:users", "read:users:groups", "read:servers",
                                            "delete:servers"],
     "services": ["portal"]},
    # The default user role ("self") does not include any service: every user may open the dashboard.
    {"name": "user", "scopes": ["self", "access:services!service=portal"]},
]
# The server's own token (JUPYTERHUB_API_TOKEN) may also ask the dashboard, as its owner: the lab's GPU figures and
# "Keep it" go through the server (portal.lab_gpus). The first two are JupyterHub's `server` role's.
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", "access:services!service=portal"]
# The hub's page.html with a "Portal" item in the navigation bar.
c.JupyterHub.template_paths = [str(HUB_TEMPLATES)]
c.JupyterHub.template_vars = {"portal_url": "/services/portal/"}

if portal.cull_idle_timeout:
    c.JupyterHub.services.append({
        "name": "idle-culler",
        "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={portal.cull_idle_timeout}"],
        "environment": {k: v for k, v in os.environ.items() if k == BOX_MARKER},
    })
    c.JupyterHub.load_roles.append({
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    })

if prometheus_access.registered(portal):
    # The operators' Prometheus (the box's, or a site's): one token reads the hub's /hub/metrics and the portal's own
    # (docs/operations.md). Add read:users to the role for the portal's per-user series.
    c.JupyterHub.services.append({"name": "prometheus", "api_token": prometheus_access.metrics_token(portal)})
    c.JupyterHub.load_roles.append({
        "name": "metrics",
        "scopes": ["read:metrics", "access:services!service=portal"],
        "services": ["prometheus"],
    })
