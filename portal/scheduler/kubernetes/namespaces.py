"""A user's namespace on Kubernetes, as the portal itself (the hub's service account) makes and reads it: the
namespace, the RoleBinding that makes it the user's, their GPU ResourceQuota, the NetworkPolicies that fence its
pods in and their home claim (the manifests: portal.scheduler.kubernetes.manifests and .netpol)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from portal.config import PortalConfig
from portal.errors import JobNotFound
from portal.scheduler.kubernetes.client import KubeUser, api_call
from portal.scheduler.kubernetes.errors import KubernetesError
from portal.scheduler.kubernetes.manifests import home_claim_manifest, user_namespace_manifest, user_namespace_objects
from portal.scheduler.kubernetes.netpol import user_network_policies


def ensure_namespace(cfg: PortalConfig, api: Any, user: KubeUser) -> None:
    """Make the user's namespace theirs with the portal's client `api` (the spawner does the same on a server's
    start): a user may submit from the dashboard before ever starting a server, so their home claim is made
    too. Idempotent; the quota and the binding are replaced when they changed (the user's groups)."""
    from kubernetes import client

    core, rbac, net = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api), client.NetworkingV1Api(api)
    namespace = cfg.user_namespace(user.name)
    binding, quota = user_namespace_objects(cfg, user.name, cfg.gpu_quota_for(list(user.groups)))
    steps: list[tuple[Callable[..., Any], Callable[..., Any] | None, tuple[Any, ...]]] = [
        (core.create_namespace, None, (user_namespace_manifest(cfg, user.name),)),
        (rbac.create_namespaced_role_binding, rbac.replace_namespaced_role_binding, (namespace, binding)),
        (core.create_namespaced_resource_quota, core.replace_namespaced_resource_quota, (namespace, quota)),
        # Its pods fenced in before any starts (portal.scheduler.kubernetes.netpol).
        *((net.create_namespaced_network_policy, net.replace_namespaced_network_policy, (namespace, policy))
          for policy in user_network_policies(cfg, user.name)),
        (core.create_namespaced_persistent_volume_claim, None, (namespace, home_claim_manifest(cfg, user.name)))]
    for create, replace, args in steps:
        try:
            api_call(f"preparing namespace {namespace}", create, *args)
        except KubernetesError as err:
            if err.status != 409:
                raise
            if replace is not None:
                api_call(f"preparing namespace {namespace}", replace, args[-1]["metadata"]["name"], *args)


def namespace_exists(api: Any, cfg: PortalConfig, user: KubeUser) -> bool:
    """Whether the user's namespace exists, as the portal reads it (it may read every namespace)."""
    from kubernetes import client

    try:
        api_call(f"namespace {cfg.user_namespace(user.name)}", client.CoreV1Api(api).read_namespace,
                 cfg.user_namespace(user.name))
    except JobNotFound:
        return False
    return True
