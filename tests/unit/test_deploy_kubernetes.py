"""What deploy/kubernetes ships, checked offline: the Helm values wire classes that exist, and every built-in
kind validates strictly (kubernetes-validate) for the Kubernetes versions docs/admin-guide.md claims."""

from __future__ import annotations

import importlib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from traitlets.config import Config

from portal.config import PortalConfig
from portal.jobs.k8s_manifests import user_namespace_objects
from tests.unit.test_jobs_kubernetes import KUBERNETES_VERSIONS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
BUILT_IN = ("rbac.yaml",)  # mpijob-crd.yaml is a CustomResourceDefinition: checked by the real API server


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_helm_values_wire_our_authenticator_spawner_and_dashboard(monkeypatch):
    values = yaml.safe_load((DEPLOY / "values.yaml").read_text())
    for name, value in values["hub"]["extraEnv"].items():
        monkeypatch.setenv(name, str(value))
    c = Config()
    c.JupyterHub.services = []
    c.JupyterHub.load_roles = []
    for snippet in values["hub"]["extraConfig"].values():
        exec(compile(snippet, "values.yaml:hub.extraConfig", "exec"), {"c": c})
    assert resolve(c.JupyterHub.authenticator_class).__name__ == "PortalLDAPAuthenticator"
    assert resolve(c.JupyterHub.spawner_class).__name__ == "PortalKubeSpawner"
    (service,) = c.JupyterHub.services
    assert service["name"] == "portal" and service["environment"]["DSPORTAL_SCHEDULER"] == "kubernetes"
    ports = {p["port"] for p in values["hub"]["service"]["extraPorts"]}
    assert service["url"].endswith(":8090") and 8090 in ports


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_built_in_manifest_we_ship_validates_strictly(version):
    shipped = [d for name in BUILT_IN for d in documents(name)]
    made = user_namespace_objects(PortalConfig(), "alice", 4)
    assert len(shipped) >= 4
    for document in (*shipped, *made):
        kubernetes_validate.validate(document, version, strict=True)
