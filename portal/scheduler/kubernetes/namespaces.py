"""A user's namespace on Kubernetes, as the portal itself (the hub's service account) makes and reads it: the
namespace, the RoleBinding that makes it the user's, their GPU ResourceQuota, the NetworkPolicies that fence its
pods in and their home claim (the manifests: portal.scheduler.kubernetes.manifests and .netpol)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from portal.config import PortalConfig
from portal.errors import JobNotFound
from portal.first_import import loaded
from portal.scheduler.kubernetes.client import KubeUser, api_call
from portal.scheduler.kubernetes.errors import KubernetesError, KubernetesUnavailable
from portal.scheduler.kubernetes.manifests import (
    home_claim_manifest,
    quota_in_force,
    user_namespace_manifest,
    user_namespace_objects,
)
from portal.scheduler.kubernetes.netpol import user_network_policies

QUOTA_COUNTED_S = 20.0  # the quota controller counts a new or changed quota within a second on a quiet cluster
QUOTA_LOOK_S = 0.1


def quota_not_counted(namespace: str, waited_s: float) -> KubernetesUnavailable:
    return KubernetesUnavailable(
        f"the Kubernetes quota controller has not counted the GPU quota of namespace {namespace} after "
        f"{waited_s:.0f} s (is kube-controller-manager running?); nothing is started there before it has, since "
        "until then the API server counts no pod against it")


def wait_until_counted(read: Callable[[], Mapping[str, Any]], namespace: str, timeout_s: float = QUOTA_COUNTED_S,
                       clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> None:
    """Return once the namespace's ResourceQuota, as `read` answers it, is in force (manifests.quota_in_force);
    KubernetesUnavailable after `timeout_s`. At once when it already was (the quota did not change)."""
    deadline = clock() + timeout_s
    while not quota_in_force(read()):
        if clock() >= deadline:
            raise quota_not_counted(namespace, timeout_s)
        sleep(QUOTA_LOOK_S)


def ensure_namespace(cfg: PortalConfig, api: Any, user: KubeUser) -> None:
    """Make the user's namespace theirs with the portal's client `api`, for a job's submit and a server's start
    alike (spawners.kubernetes calls it through the scheduler): a user may submit from the dashboard before ever
    starting a server, so their home claim is made too. Idempotent; the quota and the binding are replaced when
    they changed (the user's groups). Returns once the quota is in force (`wait_until_counted`)."""
    loaded("kubernetes")
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
    wait_until_counted(lambda: api_call(f"the GPU quota of namespace {namespace}", core.read_namespaced_resource_quota,
                                        quota["metadata"]["name"], namespace), namespace)


def namespace_exists(api: Any, cfg: PortalConfig, user: KubeUser) -> bool:
    """Whether the user's namespace exists, as the portal reads it (it may read every namespace)."""
    loaded("kubernetes")
    from kubernetes import client

    try:
        api_call(f"namespace {cfg.user_namespace(user.name)}", client.CoreV1Api(api).read_namespace,
                 cfg.user_namespace(user.name))
    except JobNotFound:
        return False
    return True
