"""Where the operators' Prometheus is and the two secrets between it and the portal (portal.prometheus_access):
the box's own under the state dir, a site's named; each a regular file only root may read, else an error naming
its setting."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import pytest

from portal import prometheus_access as access
from portal.config import PortalConfig
from portal.config_values import ConfigError

REPO = Path(__file__).resolve().parents[3]


def secret(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_box_keeps_both_secrets_under_its_state_dir_and_a_site_names_its_own(tmp_path):
    box = PortalConfig(state_dir=tmp_path, hub_port=8100)
    assert access.token_file(box) == tmp_path / "prometheus" / "metrics-token"
    assert access.reader_file(box) == tmp_path / "prometheus" / "reader"
    assert access.url(box) == "http://127.0.0.1:8196"
    assert not access.registered(box)  # the box has not made its token yet: the hub registers no service
    site = PortalConfig(state_dir=tmp_path, prometheus_url="https://prom.example:9090/", metrics_token_file="/t")
    assert (access.url(site), access.token_file(site), access.registered(site)) == ("https://prom.example:9090",
                                                                                   Path("/t"), True)
    none = PortalConfig(state_dir=tmp_path, prometheus_url="")
    assert (access.url(none), access.token_file(none), access.registered(none)) == ("", None, False)
    with pytest.raises(ConfigError, match="no Prometheus token"):
        access.metrics_token(none)


@pytest.mark.parametrize("url", ["ftp://prom:9090", "http://", "http://user:pw@prom:9090", "http://prom:9090/?q=1",
                                 "http://prom 9090"])
def test_a_prometheus_url_that_is_no_server_is_refused_naming_the_setting(url):
    with pytest.raises(ConfigError, match=r"prometheus_url is .*allowed: empty \(no charts\), box"):
        PortalConfig(prometheus_url=url)


def test_a_secret_others_may_read_or_that_is_no_regular_file_is_refused_naming_its_setting(tmp_path):
    reader = secret(tmp_path / "reader", "portal:s3cret\n", 0o640)
    cfg = PortalConfig(state_dir=tmp_path, prometheus_reader_file=str(reader))
    with pytest.raises(ConfigError, match=r"prometheus_reader_file .* is mode 0640; allowed: 0600"):
        access.reader(cfg)
    reader.chmod(0o400)
    assert access.reader(cfg) == ("portal", "s3cret")
    secret(reader, "no colon here\n")
    with pytest.raises(ConfigError, match="its first line is not `user:password`"):
        access.reader(cfg)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)  # never waited on: opened without blocking, refused for what it is
    with pytest.raises(ConfigError, match=r"prometheus_reader_file .*fifo is not a regular file"):
        access.reader(PortalConfig(prometheus_reader_file=str(fifo)))
    with pytest.raises(ConfigError, match=r"metrics_token_file .*missing: No such file"):
        access.metrics_token(PortalConfig(metrics_token_file=str(tmp_path / "missing")))
    secret(tmp_path / "long", "x" * 10_000_000)  # one endless line: only its first 4,096 bytes are read
    assert len(access.metrics_token(PortalConfig(metrics_token_file=str(tmp_path / "long")))) == access.MOST_BYTES


def test_the_hub_registers_the_boxs_token_once_the_box_made_it(monkeypatch, tmp_path):
    from traitlets.config import Config

    secret((tmp_path / "prometheus").mkdir() or tmp_path / "prometheus" / "metrics-token", "t" * 32 + "\n")
    monkeypatch.setenv("DSPORTAL_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("DSPORTAL_METRICS_TOKEN_FILE", "")  # the test box's settings name one: none here
    monkeypatch.setenv("DSPORTAL_PROMETHEUS_URL", "box")
    config = Config()
    runpy.run_path(str(REPO / "jupyterhub_config.py"), init_globals={"get_config": lambda: config})
    assert {"name": "prometheus", "api_token": "t" * 32} in config.JupyterHub.services
