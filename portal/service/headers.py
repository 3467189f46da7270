"""The dashboard's security headers, built in one place (portal.service.base.SecurityHeaders sends them).

- Content-Security-Policy. A page: `default-src 'self'` (everything it loads is the site's own: the hub's static
  files, the portal's, TensorBoard's frame under /user/<name>/, the API it polls) and scripts and <style> elements
  only from the site or carrying this response's nonce (`script-src 'self' 'nonce-...'`); no inline handler
  (`onclick=`) nor style attribute runs. Images also from `data:` (Bootstrap's CSS draws its icons as data:
  SVGs). No plugins, no <base>, forms post only to the site. JSON and text load nothing (`default-src 'none'`).
  Both keep what JupyterHub sends on its own pages: `frame-ancestors 'none'` (nothing of the portal is framed;
  the dashboard frames TensorBoard, never the other way round) and violations reported to the hub.
- MLflow's answers through the dashboard (portal.service.mlflow_proxy) that bring no policy of their own: its web
  UI's, which the page policy would break (its components add <style> elements as they render, which no nonce of
  ours can be on): mlflow_policy.
- Strict-Transport-Security, only on an answer the browser got over https (RFC 6797 8.1: never over plain http,
  where a man in the middle could set or strip it), as the proxy saw it (X-Forwarded-Proto). The proxy adds it to
  every https answer itself (portal/proxy_hsts.js); this covers a dashboard behind another TLS terminator.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from jupyterhub.utils import url_path_join

# What JupyterHub 6 sends on its own pages (tornado_settings["headers"], jupyterhub_config.py) as well.
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers that ignore CSP
    "X-Content-Type-Options": "nosniff",  # a job's log is text/plain, never a script or a page
    "Referrer-Policy": "same-origin",  # job ids and paths in URLs stay on this site
}
# Loaded into configurable-http-proxy (proxy_command): HSTS on every answer it sends over TLS.
PROXY_HSTS = Path(__file__).resolve().parent.parent / "proxy_hsts.js"
NONCE_BYTES = 16  # 128 bits, as CSP Level 3 asks for at least
# A year, the usual minimum for browsers' preload lists; without includeSubDomains: the hub's host may share its
# parent domain with sites the portal does not run.
HSTS = "max-age=31536000"


def new_nonce() -> str:
    """A fresh nonce for one response (base64url: only characters CSP's nonce-source allows)."""
    return secrets.token_urlsafe(NONCE_BYTES)


def content_security_policy(hub_base_url: str, nonce: str | None) -> str:
    """A page's policy with its nonce; with no nonce, the policy of an answer that is not a page (JSON, text):
    it loads nothing at all."""
    tail = ["frame-ancestors 'none'", f"report-uri {url_path_join(hub_base_url, 'hub/security/csp-report')}"]
    if nonce is None:
        return "; ".join(["default-src 'none'", *tail])
    if not nonce or any(not (c.isascii() and (c.isalnum() or c in "+/-_=")) for c in nonce):
        raise ValueError(f"nonce is {nonce!r}; allowed: base64 characters (new_nonce())")
    source = f"'nonce-{nonce}'"
    return "; ".join([
        "default-src 'self'",
        f"script-src 'self' {source}",
        f"style-src 'self' {source}",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        *tail,
    ])


def mlflow_policy(hub_base_url: str) -> str:
    """The policy of an answer of MLflow's UI (portal.service.mlflow_proxy): everything loaded from the site itself,
    scripts only from its files (MLflow's index.html has no inline script), but styles inline too
    ('unsafe-inline': its components write them as they render); images and workers also from data: and blob:
    (its charts' image downloads, its artifact previews). Framed by the site only, as MLflow's own X-Frame-Options
    (SAMEORIGIN) says; violations reported to the hub, as the dashboard's are."""
    return "; ".join([
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'self'",
        f"report-uri {url_path_join(hub_base_url, 'hub/security/csp-report')}",
    ])


def strict_transport_security(browser_protocol: str) -> str | None:
    """The Strict-Transport-Security value for an answer the browser receives over `browser_protocol`; None over
    anything but https."""
    return HSTS if browser_protocol == "https" else None


def proxy_command(node_prefix: Path) -> list[str]:
    """configurable-http-proxy as installed under `node_prefix`, with PROXY_HSTS loaded before it starts
    (c.ConfigurableHTTPProxy.command)."""
    chp = node_prefix / "node_modules" / ".bin" / "configurable-http-proxy"
    return ["node", "--require", str(PROXY_HSTS), str(chp)]
