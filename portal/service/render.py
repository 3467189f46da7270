"""The dashboard's pages on JupyterHub's own page template and static files: one site, one navigation bar, one
light/dark theme (the hub keeps the choice in the browser's localStorage, which the same origin shares).

Jinja2, as the hub renders its pages: the hub's templates under the prefix "templates/" (its loader does the same),
ours first, then `HUB_TEMPLATES` (the hub's page.html with the "Portal" item, which the hub itself uses too). The
hub serves its static files itself, without a login (`<hub>/static/`); pages link them with the hub's version
argument, so a browser caches them once for both. Nothing comes from a CDN.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from jupyterhub._data import DATA_FILES_PATH
from jupyterhub.utils import url_path_join
from markupsafe import Markup
from tornado.web import StaticFileHandler

from portal.records.record import ENDED_STATES
from portal.service import HUB_TEMPLATES
from portal.service.charts import trial_chart
from portal.service.curves import curves
from portal.service.sparkline import format_duration, significant, sparkline

HUB_DATA = Path(DATA_FILES_PATH)
TEMPLATES = Path(__file__).resolve().parent / "templates"


def environment(templates: Path = TEMPLATES) -> jinja2.Environment:
    """Compiled once per process (templates are cached by the environment, and never looked at again: a template
    changes with the package, and the dashboard restarts with it; Jinja2's default stat of every template at every
    render cost the Kubernetes box's dashboard 18 % of its event loop at 200 pages a second)."""
    loader = jinja2.ChoiceLoader([
        NoncedLoader([str(templates), str(HUB_TEMPLATES)]),
        jinja2.PrefixLoader({"templates": NoncedLoader(str(HUB_DATA / "templates"))}),
    ])
    env = jinja2.Environment(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True, auto_reload=False)
    env.filters["number"] = number
    env.filters["duration"] = format_duration
    env.filters["significant"] = significant
    env.globals["sparkline"] = sparkline
    env.globals["trial_chart"] = trial_chart
    env.globals["curves"] = curves
    env.globals["ENDED_STATES"] = ENDED_STATES
    return env


# An inline <script> or <style> element's opening tag in a template's source (one with src= loads a file of the
# site, which the policy's 'self' allows). Its group 1 is the tag's name and attributes.
INLINE_TAG = re.compile(r"<((?:script|style)\b(?![^>]*\b(?:src|nonce)=)[^>]*)>", re.IGNORECASE)
NONCE_ATTRIBUTE = ' nonce="{{ csp_nonce }}"'


class NoncedLoader(jinja2.FileSystemLoader):
    """Templates whose inline <script> and <style> elements carry the response's CSP nonce (`csp_nonce`, a fresh
    one per response: portal.service.headers). Added to the templates' source, never to what they render: a
    value a template writes out (escaped anyway) can never get the nonce. This is how the hub's own page.html,
    whose inline script (require.config, window.jhdata) is in no block we could override, runs under the
    dashboard's policy, while the hub renders the same file unchanged."""

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        source, filename, uptodate = super().get_source(environment, template)
        return nonced(source), filename, uptodate


def nonced(source: str) -> str:
    """`source` with NONCE_ATTRIBUTE on each inline <script> and <style> opening tag."""
    return INLINE_TAG.sub(lambda m: f"<{m.group(1)}{NONCE_ATTRIBUTE}>", source)


def number(value: float | None, digits: int = 1) -> str:
    """A figure as the pages show it: fixed digits, "-" for none yet."""
    return "-" if value is None else f"{value:.{digits}f}"


def hub_static(hub_base_url: str) -> Callable[..., str]:
    """The hub's `static_url(path, include_version=True)` for pages outside the hub: the same URL and `?v=`
    (tornado's md5 of the file) as the hub's own pages give, so one cached copy serves both."""
    static_dir = HUB_DATA / "static"
    prefix = url_path_join(hub_base_url, "hub/static/")

    @functools.cache
    def version(path: str) -> str | None:
        return StaticFileHandler.get_version({"static_path": str(static_dir)}, path)

    def static_url(path: str, include_version: bool = True) -> str:
        url = url_path_join(prefix, path)
        tag = version(path) if include_version else None
        return f"{url}?v={tag}" if tag else url

    return static_url


class PageUser:
    """The user as the hub's page.html reads them (`json_escaped_name` goes into a script unescaped)."""

    def __init__(self, name: str, admin: bool):
        self.name, self.admin = name, admin
        self.json_escaped_name = json.dumps(name)[1:-1].replace("<", "\\u003c").replace(">", "\\u003e")


def hub_namespace(hub_base_url: str, static_url: Callable[..., str], user: Any, xsrf_token: str,
                  xsrf_form_html: str) -> dict[str, Any]:
    """What the hub's page.html reads, filled as the hub fills it (jupyterhub/handlers/base.py template_namespace)
    for a page that is not the hub's: its links point at the hub; no spawner is looked at; the admin sees the
    hub's Admin item as on the hub's pages."""
    hub = url_path_join(hub_base_url, "hub/")
    user = PageUser(user.name, user.admin) if user else None
    return {
        "base_url": hub, "prefix": hub_base_url, "static_url": static_url, "version_hash": "",
        "user": user, "admin_access": bool(user and user.admin), "no_spawner_check": True,
        "parsed_scopes": {"admin-ui"} if user and user.admin else set(), "services": [],
        "login_url": f"{hub}login", "logout_url": f"{hub}logout", "logo_url": "", "announcement": "",
        "xsrf_token": xsrf_token, "xsrf_form_html": Markup(xsrf_form_html),
    }
