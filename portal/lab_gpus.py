"""The lab's way to the portal's GPU figures (docs/gpus.md): a Jupyter server extension of every user's server
(enabled by the spawners' default `args`: spawners.singleuser.SINGLEUSER_PORTAL), so that the lab's idle-GPU
notice and its status bar line (deploy/jupyterlab/gpu-notice) ask their own server:

    GET  <base_url>dsportal/gpus         the user's warnings and what their server's GPUs do now (api/gpus)
    POST <base_url>dsportal/gpus/keep    {"holder": "..."}: "Keep it" (api/gpus/keep)

The lab cannot ask the dashboard itself: JupyterHub refuses a cookie-authenticated request of a page to another
service without that service's XSRF token, and no lab page has the dashboard's. So its server asks for it, with the
server's own API token (JUPYTERHUB_API_TOKEN, which the hub gives `access:services!service=portal`:
jupyterhub_config.py's server_token_scopes), at the dashboard's address for servers (PORTAL_DASHBOARD_URL, set by
the spawners: the Slurm box's bridge, the hub's Service on Kubernetes). The token is the server's owner's, so the
dashboard answers with what is theirs alone; who may ask the server is JupyterHub's own rule (the owner, and whom
they share it with), and a POST needs the server's XSRF token, as every request of the lab does.

The dashboard's answer is passed on as it came (its status and JSON object), read to at most MOST_BYTES; a
dashboard that does not answer, or answers something else, is a 502 that says so.
"""

from __future__ import annotations

import json
import os
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from portal.config import SERVER_DASHBOARD_ENV
from portal.gpus.readings import HOLDER  # a warned server's or job's id, as api/gpus names it

TOKEN_ENV = "JUPYTERHUB_API_TOKEN"
MOST_BYTES = 1 << 20
TIMEOUT_S = 15.0


async def ask(method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    """(status, JSON object) of the dashboard's answer to `method path`, asked with the server's token."""
    base, token = os.environ.get(SERVER_DASHBOARD_ENV, ""), os.environ.get(TOKEN_ENV, "")
    if not base or not token:
        missing = SERVER_DASHBOARD_ENV if not base else TOKEN_ENV
        return 503, {"error": f"this server has no way to the portal ({missing} is not set)"}
    request = HTTPRequest(f"{base.rstrip('/')}/{path}", method=method, follow_redirects=False,
                          request_timeout=TIMEOUT_S, body=None if body is None else json.dumps(body),
                          headers={"Authorization": f"token {token}", "Accept": "application/json",
                                   **({"Content-Type": "application/json"} if body is not None else {})})
    client = AsyncHTTPClient(force_instance=True, max_body_size=MOST_BYTES)
    try:
        response = await client.fetch(request, raise_error=False)
    except OSError as err:
        return 502, {"error": f"the portal at {base} did not answer: {err.strerror or err}"}
    finally:
        client.close()
    if response.code == 599:  # tornado's own: no answer (refused, timed out, too long)
        return 502, {"error": f"the portal at {base} did not answer: {response.error}"}
    try:
        data = json.loads(response.body or b"")
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return 502, {"error": f"the portal at {base} answered {response.code} without a JSON object"}
    return response.code, data


class GpusHandler(APIHandler):
    @web.authenticated
    async def get(self) -> None:
        status, data = await ask("GET", "api/gpus")
        self.set_status(status)
        self.finish(json.dumps(data))


class KeepHandler(APIHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.get_json_body()
        holder = body.get("holder") if isinstance(body, dict) else None
        if not isinstance(holder, str) or not HOLDER.fullmatch(holder):
            self.set_status(400)
            self.finish(json.dumps({"error": "holder: the id of a warned server or job of yours is required",
                                    "field": "holder"}))
            return
        status, data = await ask("POST", "api/gpus/keep", {"holder": holder})
        self.set_status(status)
        self.finish(json.dumps(data))


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "portal.lab_gpus"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(".*$", [(url_path_join(base, "dsportal/gpus"), GpusHandler),
                                           (url_path_join(base, "dsportal/gpus/keep"), KeepHandler)])
