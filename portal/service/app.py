"""The dashboard's tornado application: routes, settings, and the shared state (cluster cache, job board)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jupyterhub.utils import url_path_join
from tornado.web import Application, RequestHandler

from portal.config import PortalConfig
from portal.gpus import readings_dir
from portal.mlflow_accounts import Accounts
from portal.scheduler.registry import job_id_patterns, scheduler_for
from portal.scheduler.snapshot import ClusterCache
from portal.service import api, experiment_handlers, gpu_pages, mlflow_proxy, operations, pages, render
from portal.service.base import NotFoundHandler, OAuthCallbackHandler, StaticFiles
from portal.service.board import JobBoard
from portal.service.fairness import RateLimits, UserShares
from portal.service.gpu_watch import GpuWatcher
from portal.service.hub import HubDirectory
from portal.service.pace import Pace
from portal.service.scans import change_stamps
from portal.templates import templates_dir

HERE = Path(__file__).resolve().parent
# Every scheduler's job ids, from the schedulers themselves (Scheduler.job_ids): a Kubernetes job's page is as
# reachable as a Slurm job's. One spelling per job (ASCII digits, no leading zero), so "0002" is no route at all
# rather than a second name for job 2.
JOB_ID = "(" + "|".join(job_id_patterns().values()) + ")"
# Blocking work at once (each a runuser'd command): enough for a few users, few enough for a small hub host.
WORKERS = 8
# Submits and cancels (about ten commands each as the user, a second or more on a busy host) run in a pool of
# their own: sharing one pool, fifty users submitting at once held every thread and every page view queued behind
# them (1,000 users' jobs pages at p99 61 s). A burst of actions now waits only for other actions.
ACTION_WORKERS = 8
# One user's requests hold at most this many of each pool's workers at once; the rest of theirs wait without one
# (portal.service.fairness.UserShares): 6 of 8 stay free for the others, whatever one user's files do.
WORKERS_PER_USER = 2
GPU_WATCH_WORKERS = 1  # the GPU watch's blocking calls (a snapshot, the readings, a mail, a cancel), one at a time
MIN_POLL_S = 5  # an open page asks for its rows or its job's state at most this often (portal.service.pace)
# The most a request body may be before tornado stops reading it and closes the connection (the proxy then shows
# its own error page), so that no request holds more memory than this. Bodies up to it are answered by the
# dashboard itself: over portal.inputs.MAX_BODY_BYTES a 413 (PortalHandler.prepare), in JSON for the API, in the
# page for a form (the submit form: beside its fields). MLflow's route takes bodies up to this (an artifact of a few
# MB from its UI: portal.service.mlflow_proxy).
MAX_BODY_SIZE = 4 * 1024 * 1024
# Every path under the service prefix (api/: JSON, the rest: pages; a browser test visits every page it lists).
ROUTES: list[tuple[str, type[RequestHandler]]] = [
    ("oauth_callback", OAuthCallbackHandler),
    ("api/jobs", api.JobsAPIHandler),
    (f"api/jobs/{JOB_ID}", api.JobAPIHandler),
    ("api/cluster", api.ClusterAPIHandler),
    ("api/usage", api.UsageAPIHandler),
    ("api/settings", api.SettingsAPIHandler),
    ("api/gpus", gpu_pages.GpusAPIHandler),
    ("api/gpus/keep", gpu_pages.KeepAPIHandler),
    ("api/experiments", experiment_handlers.ExperimentsAPIHandler),
    ("api/experiments/compare", experiment_handlers.CompareAPIHandler),
    ("api/experiments/label", experiment_handlers.LabelAPIHandler),
    ("metrics", operations.MetricsHandler),  # Prometheus' text, for a token with read:metrics
    ("", pages.HomeHandler),
    ("templates", pages.TemplatesHandler),
    ("jobs", pages.JobsPageHandler),
    (f"jobs/{JOB_ID}", pages.JobPageHandler),
    (f"jobs/{JOB_ID}/log", pages.JobLogHandler),
    (f"jobs/{JOB_ID}/model_card.json", pages.ModelCardHandler),
    (f"jobs/{JOB_ID}/cancel", pages.CancelHandler),
    (f"jobs/{JOB_ID}/notebook", pages.JobNotebookHandler),
    ("submit", pages.SubmitPageHandler),
    ("settings", pages.SettingsPageHandler),
    ("cluster", pages.ClusterPageHandler),
    ("operations", operations.OperationsPageHandler),  # the admins' charts, from the operators' Prometheus
    ("usage", pages.UsagePageHandler),
    ("gpus", gpu_pages.GpusPageHandler),
    ("experiments", experiment_handlers.ExperimentsPageHandler),
    ("experiments/compare", experiment_handlers.ComparePageHandler),
    ("experiments/label", experiment_handlers.LabelPageHandler),
    # The portal's MLflow server, as the user (its UI's pages and files, its API). Always routed: where there is no
    # server (mlflow_url empty) a link or bookmark gets a 404 that says so, not "no such page".
    ("mlflow", mlflow_proxy.MlflowProxyHandler),
    ("mlflow/(.*)", mlflow_proxy.MlflowProxyHandler),
]


def make_app(cfg: PortalConfig, *, prefix: str | None = None, hub_base_url: str | None = None,
             cluster: ClusterCache | None = None, board: JobBoard | None = None,
             directory: HubDirectory | None = None, notebooks_dir: Path | None = None,
             accounts: Accounts | None = None, watch_jobs: bool = False,
             gpu_watch: GpuWatcher | None = None) -> Application:
    """The dashboard. `watch_jobs` (the service itself, not tests): on Kubernetes, one watch of the API server says
    whose jobs changed (portal.service.scans.change_stamps); without it each user's jobs are listed every rescan.
    `accounts`: the users' MLflow accounts (one per process: it remembers those it made). `gpu_watch`: the GPU
    watch whose warnings the GPUs page shows (the service makes one with `gpu_watcher`; tests give theirs)."""
    if not prefix:
        prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/portal/")
    if not hub_base_url:
        hub_base_url = os.environ.get("JUPYTERHUB_BASE_URL", "/")
    cluster = cluster or ClusterCache(cfg, scheduler_for(cfg))
    board = board or JobBoard(cfg, cluster, base_url=hub_base_url, service_prefix=prefix,
                              dir_stamp=change_stamps(cfg) if watch_jobs else None)
    directory = directory or HubDirectory(ttl_s=cfg.dashboard_refresh_s)
    return Application(
        [(url_path_join(prefix, path), handler) for path, handler in ROUTES],
        pages=render.environment(), hub_static_url=render.hub_static(hub_base_url),
        # The portal's own stylesheet and script (everything else is the hub's, linked from the hub).
        static_path=str(HERE / "static"), static_url_prefix=url_path_join(prefix, "static/"),
        static_handler_class=StaticFiles,
        # Unknown paths get a 404 with the security headers too (base.SecurityHeaders sets them and the cookies').
        default_handler_class=NotFoundHandler, default_handler_args={"status_code": 404},
        # The service's own cookie (the user's OAuth token) only needs to outlive this process.
        cookie_secret=os.urandom(32),
        max_body_size=MAX_BODY_SIZE,  # read by portal.service.__main__ for the HTTP server (an HTTPServer setting)
        board=board, cluster=cluster, directory=directory, mlflow_accounts=accounts or Accounts(cfg),
        executor=ThreadPoolExecutor(WORKERS, thread_name_prefix="portal-read"),
        action_executor=ThreadPoolExecutor(ACTION_WORKERS, thread_name_prefix="portal-act"),
        read_shares=UserShares(WORKERS_PER_USER), action_shares=UserShares(WORKERS_PER_USER),
        rate_limits=RateLimits(cfg.dashboard_api_rate, cfg.dashboard_api_burst),
        service_prefix=prefix, hub_base_url=hub_base_url, notebooks_dir=notebooks_dir or templates_dir(),
        pace=Pace(max(MIN_POLL_S, cfg.dashboard_refresh_s), cfg.dashboard_page_reads_per_s),
        log_lines=cfg.dashboard_log_lines, gpu_readings=readings_dir(cfg), gpu_watch=gpu_watch,
    )


def gpu_watcher(cfg: PortalConfig, app: Application) -> GpuWatcher:
    """The service's GPU watch (portal.service.gpu_watch), on the app's scheduler, hub and board, in a pool of its
    own (its mail and cancels never wait behind page views), shown by the app's GPUs page; `start` it."""
    board = app.settings["board"]
    watcher = GpuWatcher(cfg, lambda: board.scheduler.snapshot(time.monotonic), app.settings["directory"], board,
                         ThreadPoolExecutor(GPU_WATCH_WORKERS, thread_name_prefix="portal-gpus"))
    app.settings["gpu_watch"] = watcher
    return watcher


def stop_work(app: Application) -> None:
    """At a stop: the queued work is dropped (page views and background reads that nobody waits for any more), the
    running finishes (a submit is never left half-done). Python joins the pools' threads at exit, so with queued
    metrics reads a stop took minutes; now it takes as long as the commands running at that moment."""
    watcher = app.settings.get("gpu_watch")
    if watcher is not None:
        watcher.stop()
        watcher.executor.shutdown(wait=False, cancel_futures=True)
    for name in ("executor", "action_executor"):
        app.settings[name].shutdown(wait=False, cancel_futures=True)
    app.settings["board"].stop()
