"""The Kubernetes box's calls, made with the official `kubernetes` client: clients per identity (impersonation
included), `apply` for the shipped manifests, and a portal user's namespace built by the portal's own builders.

Objects are reached by apiVersion and kind through the client's discovery (`DynamicClient`), so the box keeps no
table of REST paths; errors are the client's `DynamicApiError` (`.status`, and the server's message in `str()`).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as kubeconfig
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ConflictError, DynamicApiError, NotFoundError
from urllib3.exceptions import HTTPError

from deploy.kubernetes.kubeparts.layout import PORTAL, USERS_GROUP, KubeBox, user_namespace, user_principal
from deploy.supervise import BoxError
from portal.config import PortalConfig
from portal.scheduler.kubernetes.client import impersonate
from portal.scheduler.kubernetes.manifests import LABEL_USER, user_namespace_manifest, user_role_binding
from portal.scheduler.kubernetes.netpol import user_network_policies

ApiError = DynamicApiError
# Kinds whose whole content a manifest owns, so `apply` replaces them; others are only created when missing
# (replacing a ServiceAccount would drop its token reference and make the token controller mint another).
REPLACEABLE = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "CustomResourceDefinition"}


def api_client(box: KubeBox, token: str) -> k8s.ApiClient:
    """A client of the box's API server with a bearer token, trusting the box's CA only."""
    configuration = k8s.Configuration(host=box.api_url, api_key={"authorization": token},
                                      api_key_prefix={"authorization": "Bearer"})
    configuration.ssl_ca_cert = str(box.ca_file)
    return k8s.ApiClient(configuration)


def with_token(box: KubeBox, token: str) -> DynamicClient:
    """api_client's, able to reach every kind by apiVersion and kind (it asks the server which there are)."""
    return DynamicClient(api_client(box, token))


def from_kubeconfig(path: Path | str) -> DynamicClient:
    """A client with the current context of a kubeconfig (as identities.py writes them)."""
    return DynamicClient(kubeconfig.new_client_from_config(config_file=str(path)))


def impersonating(api: DynamicClient, principal: str, group: str | None = None) -> DynamicClient:
    """The same credentials, acting as `principal` (in `group`): the API server decides whether they may."""
    return DynamicClient(impersonate(k8s.ApiClient(api.configuration), principal, group))


def as_user(api: DynamicClient, name: str) -> DynamicClient:
    """The same credentials, acting as portal user `name` (needs `impersonate`, as the hub has)."""
    return impersonating(api, user_principal(name), USERS_GROUP)


def resource(api: DynamicClient, api_version: str, kind: str) -> Any:
    """The client's handle on one kind: .get/.create/.replace/.patch/.delete(name=, namespace=, body=)."""
    return api.resources.get(api_version=api_version, kind=kind)


def ready(api: k8s.ApiClient) -> str | None:
    """None when the API server answers /readyz with ok, else why not."""
    try:
        answer = api.call_api(*api.param_serialize("GET", "/readyz", auth_settings=["BearerToken"]),
                              _request_timeout=5)
        text = answer.read().decode(errors="replace").strip()
    except (ApiException, HTTPError, OSError) as err:  # refused, reset, TLS not up yet: not ready, and why
        return f"/readyz: {type(err).__name__}: {str(err)[-200:]}"
    return None if answer.status == 200 and text == "ok" else f"/readyz: {answer.status} {text[-200:]}"


def load_manifests(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def apply(api: DynamicClient, manifest: dict[str, Any], replaceable: Collection[str] = REPLACEABLE) -> str:
    """Create the object, or bring it in line when it exists and its kind is `replaceable`; returns what was
    done.

    Asked first, then created: a create of an object that exists is not always a 409. A Service with a fixed
    nodePort is refused with 422 "provided port is already allocated" (by itself), since the API server allocates
    its ports before it looks for the name: a second `up` would fail on the hub's proxy-public."""
    kind, meta = manifest["kind"], manifest["metadata"]
    handle = resource(api, manifest["apiVersion"], kind)
    label = f"{kind} {meta.get('namespace', '') + '/' if meta.get('namespace') else ''}{meta['name']}"
    current = _current(handle, meta)
    if current is not None and getattr(current.metadata, "deletionTimestamp", None):
        current = _gone(handle, meta, label)  # being deleted: replacing it would be deleted with it
    if current is None:
        try:
            handle.create(body=manifest, namespace=meta.get("namespace"))
            return f"{label}: created"
        except ConflictError:  # made meanwhile
            current = _current(handle, meta)
    if kind not in replaceable:
        return f"{label}: exists"
    if current is None:
        raise BoxError(f"{label}: the API server said it exists, then that it does not")
    replacement = {**manifest, "metadata": {**meta, "resourceVersion": current.metadata.resourceVersion}}
    handle.replace(body=replacement, namespace=meta.get("namespace"))
    return f"{label}: updated"


# An object being deleted (its finalizers at work: a Deployment deleted in the foreground waits for its ReplicaSet
# and pods) is waited for until it is gone, and then made anew. A `make test` once applied the hub's Deployment
# while the previous module's removal was still deleting it: the replace went through, the deletion then took it,
# and the new hub never came (404). This long at most.
DELETING_S = 120.0


def _gone(handle: Any, meta: dict[str, Any], label: str, timeout: float = DELETING_S,
          interval: float = 0.5) -> None:
    """None once the object is gone; BoxError naming it and its finalizers if it is still there after `timeout`."""
    deadline = time.monotonic() + timeout
    while (current := _current(handle, meta)) is not None:
        if time.monotonic() > deadline:
            finalizers = getattr(current.metadata, "finalizers", None) or []
            raise BoxError(f"{label}: still being deleted after {timeout:.0f} s (finalizers: "
                           f"{', '.join(finalizers) or 'none'}); apply it again once it is gone")
        time.sleep(interval)
    return None


def _current(handle: Any, meta: dict[str, Any]) -> Any:
    try:
        return handle.get(name=meta["name"], namespace=meta.get("namespace"))
    except NotFoundError:
        return None


def ensure_user_namespace(api: DynamicClient, name: str, portal: PortalConfig = PORTAL) -> str:
    """Give portal user `name` their namespace, its RoleBinding (dsportal-user for dsportal:<name> and the
    namespace's `default` ServiceAccount) and the NetworkPolicies that fence its pods in, built as the portal builds
    them with the settings `portal` (the box's: KubeBox.portal).

    Idempotent; what the hub does (as ServiceAccount dsportal-hub) before a user's first job. Returns the
    namespace. A namespace of that name not labelled for this user is refused, never taken over."""
    namespace = user_namespace(name)
    namespaces = resource(api, "v1", "Namespace")
    try:
        namespaces.create(body=user_namespace_manifest(PORTAL, name))
    except ConflictError as err:
        labels = namespaces.get(name=namespace).metadata.labels
        if (labels and labels[LABEL_USER]) != name:
            raise BoxError(f"namespace {namespace} exists but is not labelled {LABEL_USER}={name}: "
                           "not made by the portal, not used for this user") from err
    binding = user_role_binding(PORTAL, name)
    try:
        resource(api, binding["apiVersion"], binding["kind"]).create(body=binding, namespace=namespace)
    except ConflictError:
        pass  # made before: the binding's content is the builder's, and the same every time
    for policy in user_network_policies(portal, name):  # as the hub makes them, and brought in line
        apply(api, policy, replaceable=("NetworkPolicy",))
    return namespace
