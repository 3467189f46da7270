"""Strict-Transport-Security on every answer the proxy sends over TLS, never over plain HTTP (RFC 6797).

The real configurable-http-proxy, started as the hub starts it (portal.service.headers.proxy_command: with
portal/proxy_hsts.js loaded), in front of a plain HTTP backend that sends no HSTS itself: once with a
certificate (the Kubernetes box's way) and once without (the Slurm box's). Over TLS a forwarded answer and the
proxy's own error carry the header; the proxy's API (plain HTTP, the hub's) and the plain proxy never do.
"""

from __future__ import annotations

import http.server
import os
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.hub_client import wait_for
from deploy.selfsigned import ensure_ca_and_server_cert
from portal.config import load
from portal.service.headers import HSTS, proxy_command

pytestmark = pytest.mark.integration
TOKEN = "proxy-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Backend(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"backend\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def backend() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("tls")
    ensure_ca_and_server_cert(where, "proxy", ca_cn="proxy test CA", server_cn="127.0.0.1",
                              alt_names=["IP:127.0.0.1"], what="the test proxy")
    return where


def start_proxy(backend: int, tls: Path | None, logs: Path) -> tuple[subprocess.Popen, int, int]:
    chp = load().node_prefix / "node_modules" / ".bin" / "configurable-http-proxy"
    if not chp.exists():
        pytest.fail(f"{chp} is missing: deploy/local/install.sh (make install) installs configurable-http-proxy")
    port, api_port = free_port(), free_port()
    command = proxy_command(load().node_prefix) + [
        "--ip", "127.0.0.1", "--port", str(port), "--api-ip", "127.0.0.1", "--api-port", str(api_port),
        "--default-target", f"http://127.0.0.1:{backend}", "--error-target", "", "--log-level", "warn"]
    if tls is not None:
        command += ["--ssl-cert", str(tls / "proxy.pem"), "--ssl-key", str(tls / "proxy.key")]
    log = (logs / f"chp-{port}.log").open("w")
    proxy = subprocess.Popen(command, env={**os.environ, "CONFIGPROXY_AUTH_TOKEN": TOKEN},
                             stdout=log, stderr=subprocess.STDOUT)
    return proxy, port, api_port


def answer(url: str, context: ssl.SSLContext | None = None, **headers: str) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers)


def up(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        return answer(url, context)[0] == 200
    except OSError:  # not listening yet, or any other "not yet"
        return False


def test_over_tls_every_answer_carries_hsts_and_the_api_does_not(backend, tls, tmp_path):
    proxy, port, api_port = start_proxy(backend, tls, tmp_path)
    try:
        context = ssl.create_default_context(cafile=str(tls / "ca.pem"))
        wait_for(lambda: up(f"https://127.0.0.1:{port}/", context), 30, interval=0.2, what="the TLS proxy")
        status, headers = answer(f"https://127.0.0.1:{port}/anything", context)
        assert status == 200 and headers.get("Strict-Transport-Security") == HSTS, headers
        # The proxy's own answer (a route to nothing that listens: its 503), over TLS: the header too.
        api = f"http://127.0.0.1:{api_port}/api/routes/dead"
        request = urllib.request.Request(api, method="POST", data=b'{"target": "http://127.0.0.1:9"}',
                                         headers={"Authorization": f"token {TOKEN}"})
        with urllib.request.urlopen(request, timeout=5) as created:
            assert created.status == 201
            assert "Strict-Transport-Security" not in created.headers  # the API is plain HTTP
        status, headers = answer(f"https://127.0.0.1:{port}/dead/x", context)
        assert status >= 500 and headers.get("Strict-Transport-Security") == HSTS, (status, headers)
        status, headers = answer(f"http://127.0.0.1:{api_port}/api/routes", Authorization=f"token {TOKEN}")
        assert status == 200 and "Strict-Transport-Security" not in headers, headers
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)


def test_a_plain_http_proxy_never_sends_hsts(backend, tmp_path):
    proxy, port, _ = start_proxy(backend, None, tmp_path)
    try:
        wait_for(lambda: up(f"http://127.0.0.1:{port}/"), 30, interval=0.2, what="the plain proxy")
        # Even when a client says it came over https: the proxy looks at its own socket, not at what it was told.
        status, headers = answer(f"http://127.0.0.1:{port}/x", **{"X-Forwarded-Proto": "https"})
        assert status == 200 and "Strict-Transport-Security" not in headers, headers
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
