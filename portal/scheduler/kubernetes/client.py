"""The Kubernetes API client as the portal uses it: a user as the Kubernetes path knows them (`KubeUser`), a client
with the portal's credentials that impersonates them (`api_client`, `impersonate`), the API server's reason in a
failed call's answer (`api_reason`), and a plain job's own ssh key pair (`new_ssh_key`).
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import posixpath
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from portal.config import PortalConfig
from portal.errors import JobNotFound
from portal.first_import import loaded
from portal.scheduler.kubernetes.errors import KubernetesError, kubernetes_failure


@dataclass(frozen=True)
class KubeUser:
    """A user as the Kubernetes path knows them: a name, their groups (from LDAP, via the hub), the home their
    pods mount, and whether this process is theirs (a notebook in their pod) or acts for them (the dashboard)."""

    name: str
    groups: tuple[str, ...]
    home: Path
    data_root: Path
    is_caller: bool

    def can_read_dir(self, path: str) -> bool:
        """A job's data_dir: the data set volume or the user's home, as mounted in every job pod."""
        normal = posixpath.normpath(path)
        return path.startswith("/") and ".." not in path.split("/") and any(
            normal == str(root) or normal.startswith(f"{root}/") for root in (self.data_root, self.home))


@functools.cache
def login_name() -> str:
    """This process's user name (getpass: its environment, else the password database, read once: the dashboard
    asks for every user it acts for, and the password database cost it 12 % of its time at 200 pages a second)."""
    return getpass.getuser()


def kube_user(user: str | None, groups: Sequence[str] | None, cfg: PortalConfig) -> KubeUser:
    """`user` when acting for them (the dashboard), else the caller: the notebook's own user (JUPYTERHUB_USER,
    with the groups the spawner put in DSPORTAL_GROUPS), or whoever runs this with their own credentials."""
    own = os.environ.get("JUPYTERHUB_USER") or login_name()
    is_caller = user is None or user == own
    if groups is None:
        groups = os.environ.get("DSPORTAL_GROUPS", "").split(",") if is_caller else ()
    return KubeUser(name=user or own, groups=tuple(sorted({g.strip() for g in groups if g.strip()})),
                    home=Path(cfg.k8s_home_mount), data_root=Path(cfg.k8s_data_mount), is_caller=is_caller)


def api_client(cfg: PortalConfig, user: KubeUser | None = None):
    """A client with the portal's credentials (a kubeconfig, else the pod's service account); acting for a user
    who is not the caller, it impersonates them. Every client this process makes shares one configuration and one
    pool of connections to the API server (`_connection`): a client per call, each with its own pool, cost the
    dashboard a TLS handshake with the API server per call (and the kubeconfig read again), a request per page view
    of every user's jobs page. Only the impersonation headers are the client's own."""
    loaded("kubernetes")
    from kubernetes import client

    configuration, rest = _connection(cfg)
    api = client.ApiClient(configuration)
    api.rest_client = rest  # thread-safe (urllib3's PoolManager); the headers are per client, per call
    if user is not None and not user.is_caller:
        impersonate(api, cfg.user_principal(user.name), cfg.k8s_users_group)
    return api


# (connect, read) seconds of a call that gives none: the client's own default is to wait for ever, and a request
# to an API server that stopped (a restart: it drains, then goes) waited as long as it was down, a notebook's watch
# silent for 33 s instead of saying that it could not ask (seen in `make test`, stop 56).
REQUEST_TIMEOUT_S = (5, 30)
POOL_CONNECTIONS = 32  # kept open to the API server: more than the dashboard's threads that call it at once (18)
_connections: dict[str, tuple[object, tuple[Any, Any]]] = {}  # where -> (its stamp, (configuration, rest client))
_connections_lock = threading.Lock()


def _connection(cfg: PortalConfig) -> tuple[Any, Any]:
    """The portal's credentials and its pool of connections to the API server, made once per process, and again
    when the kubeconfig file changes (its mtime, size, inode). The service account's token is read again by the
    client itself as it rotates (load_incluster_config's refresh hook)."""
    loaded("kubernetes")
    from kubernetes import client, config
    from kubernetes.client import rest

    where = cfg.k8s_kubeconfig or "in-cluster"
    try:
        stamp: object = None
        if cfg.k8s_kubeconfig:
            found = os.stat(cfg.k8s_kubeconfig)
            stamp = (found.st_mtime_ns, found.st_size, found.st_ino)
        with _connections_lock:
            known = _connections.get(where)
            if known is not None and known[0] == stamp:
                return known[1]
            configuration = client.Configuration()
            if cfg.k8s_kubeconfig:
                config.load_kube_config(config_file=cfg.k8s_kubeconfig, client_configuration=configuration)
            else:
                config.load_incluster_config(client_configuration=configuration)
            configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, POOL_CONNECTIONS)
            made = (configuration, rest.RESTClientObject(configuration))
            _connections[where] = (stamp, made)
            return made
    except (config.ConfigException, OSError) as err:
        where = f"k8s_kubeconfig {cfg.k8s_kubeconfig}" if cfg.k8s_kubeconfig else \
            "the pod's service account (k8s_kubeconfig is empty and this is not a pod)"
        raise KubernetesError(f"no credentials for the Kubernetes API from {where}: {err}") from None


def impersonate(api, principal: str, group: str | None = None):
    """Make client `api` act as `principal` (in `group`): the API server checks that its credentials may
    impersonate them, then applies RBAC as them. Returns `api`."""
    api.set_default_header("Impersonate-User", principal)
    if group:
        api.set_default_header("Impersonate-Group", group)
    return api


def new_ssh_key() -> tuple[str, str]:
    """A plain job's own key pair (its launcher's ssh to its workers): (private, authorized_keys line)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, public.decode() + " dsportal-job\n"


def api_reason(err) -> str:
    """The API server's own message in a failed call's answer (its Status), else the HTTP reason."""
    try:
        return json.loads(err.body).get("message", err.reason)
    except (TypeError, ValueError, AttributeError):
        return str(err.reason)


def api_call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """One call of the `kubernetes` client, its answer as the API server sent it (plain dicts); JobNotFound for a
    404, KubernetesError saying `what` failed and why for any other refusal, or when the server did not answer
    within REQUEST_TIMEOUT_S (unless the caller gives its own `_request_timeout`, as a watch does)."""
    loaded("kubernetes")
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT_S)
    try:
        answer = fn(*args, **kwargs)
    except ApiException as err:
        if err.status == 404:
            raise JobNotFound(f"{what}: not found") from None
        raise kubernetes_failure(what, err.status, api_reason(err)) from None
    except (HTTPError, OSError) as err:
        raise kubernetes_failure(what, 0, str(err)) from None
    api = getattr(getattr(fn, "__self__", None), "api_client", None)  # a model object: as the API sent it
    return api.sanitize_for_serialization(answer) if api is not None and not isinstance(answer, dict) else answer
