"""Run the dashboard (the hub starts it as a managed service): listen where the hub's service URL says."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from urllib.parse import urlparse

from tornado.httpserver import HTTPServer
from tornado.log import LogFormatter
from tornado.netutil import bind_sockets

from portal.cli import run_reporting
from portal.config import ConfigError, load
from portal.errors import Misconfigured
from portal.records.launchers import launchers
from portal.records.programs import registry

LOG_FORMAT = "[%(levelname)1.1s %(asctime)s.%(msecs).03d %(name)s %(module)s:%(lineno)d] %(message)s"


async def serve() -> None:
    from portal.service import gc_pauses
    from portal.service.app import gpu_watcher, make_app, stop_work

    gc_pauses.watch()
    cfg = load()
    programs = registry()  # the site's too (site_programs): a broken declaration stops the start, named
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", cfg.dashboard_url))
    app = make_app(cfg, watch_jobs=True)
    gc_pauses.settle()
    port = url.port or cfg.dashboard_service_port
    server = HTTPServer(app, max_body_size=app.settings["max_body_size"])
    addresses = cfg.dashboard_addresses(url.hostname or "127.0.0.1")
    for address in addresses:
        server.add_sockets(bind_sockets(port, address))  # the proxy's way, and the servers' (portal.lab_gpus)
    log = logging.getLogger("portal.service")
    log.info("dashboard listening on %s (port %d of %s)", url.geturl(), port, ", ".join(addresses))
    log.info("training programs: %s; launchers: %s%s", ", ".join(programs.names), ", ".join(launchers().names),
             f" (the site's from {cfg.site_python_path})" if cfg.site_python_path else "")
    gpu_watcher(cfg, app).start()
    # The hub stops its services with SIGINT (SIGTERM from an init system): both are a normal stop, not a crash.
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    stop_work(app)
    log.info("dashboard stopped")


def main() -> int:
    # The hub's own format (its log holds the service's output): "[I 2026-11-25 10:24:17.123 portal.service
    # board:412] submit by alice: job 12 ...".
    handler = logging.StreamHandler()
    handler.setFormatter(LogFormatter(fmt=LOG_FORMAT, datefmt="%Y-%m-%d %H:%M:%S", color=False))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    # Requests and our own messages; the libraries' start-up chatter (alembic plugins, ...) stays out.
    for name in ("portal", "tornado.access"):
        logging.getLogger(name).setLevel(logging.INFO)
    return run_reporting("portal.service", lambda: asyncio.run(serve()), (ConfigError, Misconfigured), status=2)


if __name__ == "__main__":
    sys.exit(main())
