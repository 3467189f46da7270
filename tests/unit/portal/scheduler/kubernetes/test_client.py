"""The portal's Kubernetes clients share one configuration and one pool of connections (issue 43: a client per
call cost the dashboard a TLS handshake with the API server per call); only the impersonation is each client's."""

from __future__ import annotations

import os

import pytest

from portal.config import PortalConfig
from portal.scheduler.kubernetes.client import KubeUser, api_client
from portal.scheduler.kubernetes.errors import KubernetesError

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: box, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: portal, user: {token: %s}}]
contexts: [{name: box, context: {cluster: box, user: portal}}]
current-context: box
"""


def user(name: str, is_caller: bool = False) -> KubeUser:
    return KubeUser(name=name, groups=(), home=os.path.sep, data_root=os.path.sep, is_caller=is_caller)


@pytest.fixture
def cfg(tmp_path) -> PortalConfig:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG % "first-token")
    return PortalConfig(scheduler="kubernetes", k8s_kubeconfig=str(path))


def test_clients_share_one_pool_of_connections_and_impersonate_each_their_own_user(cfg):
    alices, bobs, portals = api_client(cfg, user("alice")), api_client(cfg, user("bob")), api_client(cfg)
    assert alices.rest_client is bobs.rest_client is portals.rest_client
    assert alices.configuration is bobs.configuration
    assert alices.rest_client.pool_manager.connection_pool_kw["maxsize"] >= 18  # the dashboard's threads at once
    assert alices.default_headers["Impersonate-User"] != bobs.default_headers["Impersonate-User"]
    assert "bob" in bobs.default_headers["Impersonate-User"]
    assert "Impersonate-User" not in portals.default_headers
    assert "Impersonate-User" not in api_client(cfg, user("carol", is_caller=True)).default_headers
    assert alices.configuration.api_key["BearerToken"] == "Bearer first-token"


def test_a_changed_kubeconfig_is_read_again(cfg):
    before = api_client(cfg)
    with open(cfg.k8s_kubeconfig, "w") as changed:
        changed.write(KUBECONFIG % "second-token-longer")
    after = api_client(cfg)
    assert after.rest_client is not before.rest_client
    assert after.configuration.api_key["BearerToken"] == "Bearer second-token-longer"


def test_a_missing_kubeconfig_is_an_error_naming_the_setting(tmp_path):
    with pytest.raises(KubernetesError, match="k8s_kubeconfig .*nowhere"):
        api_client(PortalConfig(scheduler="kubernetes", k8s_kubeconfig=str(tmp_path / "nowhere")))
