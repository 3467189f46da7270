"""What the Kubernetes box needs once its API server runs: the MPIJob CRD (Established) and the RBAC of
rbac.yaml applied, then the hub ServiceAccount's token, which the controller-manager makes."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path

from kubernetes.dynamic import DynamicClient

from deploy.kubernetes.kubeparts.api import ApiError, apply, load_manifests, resource
from deploy.kubernetes.kubeparts.layout import CRD_FILE, RBAC_FILE
from deploy.supervise import BoxError


def wait_until(check: Callable[[], str | None], timeout: float, what: str, log: Path) -> None:
    """Poll `check` (None when done, else why not yet) until done; BoxError naming `what` and `log`."""
    deadline = time.monotonic() + timeout
    while (reason := check()) is not None:
        if time.monotonic() > deadline:
            raise BoxError(f"{what}: not done within {timeout:.0f} s ({reason}); read {log}")
        time.sleep(0.3)


def wait_established(api: DynamicClient, crd_name: str, log: Path) -> None:
    crds = resource(api, "apiextensions.k8s.io/v1", "CustomResourceDefinition")

    def established() -> str | None:
        for condition in crds.get(name=crd_name).to_dict().get("status", {}).get("conditions") or []:
            if condition["type"] == "Established" and condition["status"] == "True":
                return None
            if condition["type"] == "NamesAccepted" and condition["status"] == "False":
                raise BoxError(f"CRD {crd_name}: names not accepted: {condition.get('message')}; read {log}")
        return "not Established yet"
    wait_until(established, 30, f"CRD {crd_name}", log)


def apply_manifests(admin: DynamicClient, log: Path) -> list[str]:
    """Apply the CRD and RBAC (waiting for the CRD to be Established); one line per object."""
    done = []
    for source in (CRD_FILE, RBAC_FILE):
        for manifest in load_manifests(source):
            try:
                done.append(apply(admin, manifest))
            except ApiError as err:
                raise BoxError(f"applying {source.name}: {err.status} {err.reason}: {err.body}; read {log}") from err
            if manifest["kind"] == "CustomResourceDefinition":
                wait_established(admin, manifest["metadata"]["name"], log)
    return done


def service_account_token(api: DynamicClient, namespace: str, name: str, log: Path) -> str:
    """The token of a ServiceAccount's token Secret, made by the controller-manager's token controller."""
    accounts, secrets = resource(api, "v1", "ServiceAccount"), resource(api, "v1", "Secret")
    found: dict[str, str] = {}

    def token_made() -> str | None:
        try:
            refs = accounts.get(name=name, namespace=namespace).to_dict().get("secrets") or []
        except ApiError as err:
            return f"{err.status} {err.reason}"
        for ref in refs:
            secret = secrets.get(name=ref["name"], namespace=namespace).to_dict()
            if secret.get("type") == "kubernetes.io/service-account-token" and "token" in secret.get("data", {}):
                found["token"] = base64.b64decode(secret["data"]["token"]).decode()
                return None
        return f"ServiceAccount {namespace}/{name} has no token Secret yet"
    wait_until(token_made, 60, f"kube-controller-manager: token for ServiceAccount {namespace}/{name}", log)
    return found["token"]
