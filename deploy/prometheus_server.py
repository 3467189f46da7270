"""The Prometheus server a box runs for its operators (docs/operations.md): Debian's `prometheus`, scraping the
hub's /hub/metrics and the portal's own metrics, through the hub's public address, with the token the hub registers
as the service `prometheus`; its own API and web UI behind basic auth, read by the dashboard's Operations page.

    <data_dir>/metrics-token    the token it scrapes with (mode 0600), made on its first start; the hub registers it
    <data_dir>/reader           `portal:<password>` (mode 0600), made on its first start: the dashboard reads with it
    <data_dir>/web.yml          its --web.config.file: the reader's bcrypt hash (written on every start)
    <data_dir>/prometheus.yml   what it scrapes: the two targets (written on every start)
    <data_dir>/data/            its time series (--storage.tsdb.path), kept RETENTION

Nothing listens unauthenticated: every path of its listener (the UI, the API, /metrics) asks for the reader's
password. The Slurm box (deploy/local/parts/prometheus.py) and the Kubernetes box (kubeparts/prometheus.py) start
it through here, each with its own targets and address.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import secrets
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

import yaml

from deploy.supervise import make_once, write_if_changed
from portal.prometheus_access import READER_NAME, TOKEN_NAME

PROGRAM = "/usr/bin/prometheus"  # Debian's package (deploy/local/install.sh)
READER_USER = "portal"
SCRAPE_S = 15  # how often it reads both targets (and so the Operations page's finest step)
RETENTION = "15d"
READY_TIMEOUT_S = 60.0
HUB_PATH, PORTAL_PATH = "/hub/metrics", "/services/portal/metrics"


@dataclass(frozen=True)
class Targets:
    """Where it reads the hub: the hub's public URL (scheme, host:port) and, for https, the CA that signed it."""

    hub_url: str
    ca_file: str = ""


def token_file(data_dir: Path) -> Path:
    return data_dir / TOKEN_NAME


def reader_file(data_dir: Path) -> Path:
    return data_dir / READER_NAME


def ensure_secrets(data_dir: Path) -> None:
    """The data dir (root's, mode 0700), the scrape token and the reader's password: made once, kept (the hub
    registers the token at its start, so a box makes them before its hub starts)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    make_once(token_file(data_dir), secrets.token_urlsafe(32) + "\n")
    make_once(reader_file(data_dir), f"{READER_USER}:{secrets.token_urlsafe(24)}\n")


def bcrypt_hash(password: str) -> str:
    """The password's bcrypt hash, as Prometheus' web config wants it (glibc's crypt: Debian's libxcrypt has it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # `crypt` goes in Python 3.13; the venv is 3.11
        import crypt
    hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 10))
    if not hashed or not hashed.startswith("$2"):
        raise RuntimeError("this machine's crypt(3) makes no bcrypt hashes; Prometheus' basic auth needs them")
    return hashed


def scrape_config(targets: Targets, token: Path) -> dict:
    """prometheus.yml: both targets through the hub's public address, with the token as a bearer credential."""
    scheme, _, address = targets.hub_url.partition("://")
    common = {"scheme": scheme, "authorization": {"type": "Bearer", "credentials_file": str(token)},
              "static_configs": [{"targets": [address.rstrip("/")]}]}
    if scheme == "https" and targets.ca_file:
        common["tls_config"] = {"ca_file": targets.ca_file}
    jobs = [{"job_name": name, "metrics_path": path, **copy.deepcopy(common)}  # no YAML anchors: each job whole
            for name, path in (("hub", HUB_PATH), ("portal", PORTAL_PATH))]
    return {"global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
            "scrape_configs": jobs}


def prepare(data_dir: Path, targets: Targets, token: Path) -> None:
    """Secrets (made once), the web config with the reader's hash and the scrape config (written every start).
    `token`: the file it scrapes with (the data dir's, or a site's metrics_token_file)."""
    ensure_secrets(data_dir)
    (data_dir / "data").mkdir(mode=0o700, exist_ok=True)
    user, _, password = reader_file(data_dir).read_text().strip().partition(":")
    header = "# Written by deploy/prometheus_server.py at every start (docs/operations.md).\n"
    users = {"basic_auth_users": {user: bcrypt_hash(password)}}
    write_if_changed(data_dir / "web.yml", header + yaml.safe_dump(users), mode=0o600)
    scrapes = yaml.safe_dump(scrape_config(targets, token), sort_keys=False)
    write_if_changed(data_dir / "prometheus.yml", header + scrapes, mode=0o600)


def command(data_dir: Path, host: str, port: int) -> list[str]:
    return [PROGRAM, f"--config.file={data_dir / 'prometheus.yml'}", f"--web.config.file={data_dir / 'web.yml'}",
            f"--web.listen-address={host}:{port}", f"--storage.tsdb.path={data_dir / 'data'}",
            f"--storage.tsdb.retention.time={RETENTION}", "--log.level=warn"]


def url(host: str, port: int) -> str:
    return f"http://{host}:{port}"


def auth_header(data_dir: Path) -> str:
    return "Basic " + base64.b64encode(reader_file(data_dir).read_text().strip().encode()).decode()


def ready(data_dir: Path, base: str) -> str | None:
    """None once it answers /-/ready to the reader, else why not yet."""
    request = urllib.request.Request(f"{base}/-/ready", headers={"Authorization": auth_header(data_dir)})
    try:
        with urllib.request.urlopen(request, timeout=3) as response:
            return None if response.status == 200 else f"GET {base}/-/ready: {response.status}"
    except (urllib.error.URLError, OSError) as err:
        return f"GET {base}/-/ready: {err}"


def targets_up(data_dir: Path, base: str) -> dict[str, float]:
    """Each scrape job's last `up` (1: read, 0: failed), as its API answers the reader (what the tests wait for)."""
    request = urllib.request.Request(f"{base}/api/v1/query?query=up", headers={"Authorization": auth_header(data_dir)})
    with urllib.request.urlopen(request, timeout=5) as response:
        answer = json.loads(response.read(1 << 20))
    return {item["metric"].get("job", "?"): float(item["value"][1]) for item in answer["data"]["result"]}
