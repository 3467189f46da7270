"""The box's Prometheus server's files (deploy/prometheus_server.py): the secrets made once and only root's, the
scrape config reading both targets with the token (and the hub's CA on https), the web config's hash matching
the reader's password; both files as Prometheus' own `promtool` checks them."""

from __future__ import annotations

import crypt
import subprocess

import yaml

from deploy import prometheus_server as server


def test_the_secrets_are_made_once_and_only_root_reads_them(tmp_path):
    data = tmp_path / "prometheus"
    server.ensure_secrets(data)
    token, reader = server.token_file(data).read_text(), server.reader_file(data).read_text()
    assert len(token.strip()) >= 32 and reader.startswith(f"{server.READER_USER}:")
    server.ensure_secrets(data)
    assert (server.token_file(data).read_text(), server.reader_file(data).read_text()) == (token, reader)
    assert {p.stat().st_mode & 0o777 for p in (server.token_file(data), server.reader_file(data))} == {0o600}
    assert data.stat().st_mode & 0o777 == 0o700


def test_it_scrapes_the_hub_and_the_portal_with_the_token_and_asks_its_readers_for_the_password(tmp_path):
    data = tmp_path / "prometheus"
    ca = tmp_path / "ca.pem"
    server.prepare(data, server.Targets("https://198.18.5.2:30080", str(ca)), tmp_path / "token")
    config = yaml.safe_load((data / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {name: job["metrics_path"] for name, job in jobs.items()} == {"hub": "/hub/metrics",
                                                                         "portal": "/services/portal/metrics"}
    for job in jobs.values():
        assert job["scheme"] == "https" and job["static_configs"] == [{"targets": ["198.18.5.2:30080"]}]
        assert job["authorization"] == {"type": "Bearer", "credentials_file": str(tmp_path / "token")}
        assert job["tls_config"] == {"ca_file": str(ca)}
    users = yaml.safe_load((data / "web.yml").read_text())["basic_auth_users"]
    user, _, password = server.reader_file(data).read_text().strip().partition(":")
    assert list(users) == [user] and crypt.crypt(password, users[user]) == users[user]
    assert crypt.crypt("guess", users[user]) != users[user]
    (tmp_path / "token").write_text("t" * 32)
    ca.write_text("")
    checked = subprocess.run(["promtool", "check", "config", "--syntax-only", str(data / "prometheus.yml")],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    checked = subprocess.run(["promtool", "check", "web-config", str(data / "web.yml")], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert server.command(data, "127.0.0.1", 8196)[3] == "--web.listen-address=127.0.0.1:8196"


def test_a_plain_http_hub_is_scraped_without_tls_settings(tmp_path):
    server.prepare(tmp_path / "p", server.Targets("http://127.0.0.1:8000"), tmp_path / "token")
    jobs = yaml.safe_load((tmp_path / "p" / "prometheus.yml").read_text())["scrape_configs"]
    assert [(job["scheme"], "tls_config" in job) for job in jobs] == [("http", False), ("http", False)]
