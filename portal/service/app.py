"""The dashboard's tornado application: routes, settings, and the shared state (cluster cache, job board)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jupyterhub.services.auth import HubOAuthCallbackHandler
from jupyterhub.utils import url_path_join
from tornado.web import Application

from portal.config import PortalConfig
from portal.notebook import templates_dir
from portal.service import api, pages
from portal.service.board import JobBoard
from portal.service.cluster import ClusterCache
from portal.service.hub import HubDirectory

HERE = Path(__file__).resolve().parent
JOB_ID = r"(\d{1,12}|local-[0-9T]{15}-[0-9a-f]{6})"  # portal.jobs.record.JOB_ID, without its anchors
# Blocking work at once (each a runuser'd command): enough for a few users, few enough for a small hub host.
WORKERS = 8
MIN_POLL_S = 5  # the job page asks for its job's state at most this often


def make_app(cfg: PortalConfig, *, prefix: str | None = None, hub_base_url: str | None = None,
             cluster: ClusterCache | None = None, board: JobBoard | None = None,
             directory: HubDirectory | None = None, notebooks_dir: Path | None = None) -> Application:
    prefix = prefix or os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/portal/")
    hub_base_url = hub_base_url or os.environ.get("JUPYTERHUB_BASE_URL", "/")
    cluster = cluster or ClusterCache(cfg)
    board = board or JobBoard(cfg, cluster, base_url=hub_base_url, service_prefix=prefix)
    directory = directory or HubDirectory(ttl_s=cfg.dashboard_refresh_s)
    routes = [
        ("oauth_callback", HubOAuthCallbackHandler),
        ("api/jobs", api.JobsAPIHandler),
        (f"api/jobs/{JOB_ID}", api.JobAPIHandler),
        ("api/cluster", api.ClusterAPIHandler),
        ("api/usage", api.UsageAPIHandler),
        ("", pages.HomeHandler),
        ("templates", pages.TemplatesHandler),
        ("jobs", pages.JobsPageHandler),
        (f"jobs/{JOB_ID}", pages.JobPageHandler),
        (f"jobs/{JOB_ID}/log", pages.JobLogHandler),
        (f"jobs/{JOB_ID}/cancel", pages.CancelHandler),
        ("submit", pages.SubmitPageHandler),
        ("cluster", pages.ClusterPageHandler),
        ("usage", pages.UsagePageHandler),
    ]
    return Application(
        [(url_path_join(prefix, path), handler) for path, handler in routes],
        template_path=str(HERE / "templates"),
        # The service's own cookie (the user's OAuth token) only needs to outlive this process.
        cookie_secret=os.urandom(32),
        board=board, cluster=cluster, directory=directory, executor=ThreadPoolExecutor(WORKERS),
        service_prefix=prefix, hub_base_url=hub_base_url, notebooks_dir=notebooks_dir or templates_dir(),
        poll_s=max(MIN_POLL_S, cfg.dashboard_refresh_s), log_lines=cfg.dashboard_log_lines,
    )
