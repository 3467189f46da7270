"""Kubernetes in a box: etcd, kube-apiserver and kube-controller-manager as plain processes, no containers.

Run as root from the repository root (after `make kube-build`, which builds the two Kubernetes binaries):

    /opt/dsportal/venv/bin/python deploy/kubernetes/kubebox.py up     [--state DIR] [--port 16443] [--etcd-port N]
    /opt/dsportal/venv/bin/python deploy/kubernetes/kubebox.py status [--state DIR]
    /opt/dsportal/venv/bin/python deploy/kubernetes/kubebox.py down   [--state DIR]

It is the Kubernetes side of the cluster in a box: a real API server (RBAC, admission, the MPIJob CRD with its
schema enforced) but no nodes, so Pods are accepted and stay Pending. `up` starts what is stopped, waits for
/readyz, applies mpijob-crd.yaml (waits until Established) and rbac.yaml, waits for the hub ServiceAccount's
token and writes a kubeconfig per identity. `down` stops the processes by their recorded PIDs.

Identities (static tokens, made once, in auth/tokens.csv; and one ServiceAccount token):

    admin                    user kube-admin, group system:masters        kubeconfig/admin.kubeconfig
    hub                      ServiceAccount dsportal/dsportal-hub         kubeconfig/hub.kubeconfig
    alice, bob               user dsportal:<name>, group dsportal-users   kubeconfig/<name>.kubeconfig
    (controller-manager)     user system:kube-controller-manager          auth/controller-manager.kubeconfig

Everything lives under the state dir; certificates, keys, tokens and etcd's data are kept, so `down` then `up`
gives back the same cluster:

    tls/ca.pem, ca.key          a CA made for this box (openssl, as deploy/local/box.py does)
    tls/apiserver.pem, .key     the API server's certificate: 127.0.0.1, localhost, kubernetes.default...
    tls/sa.key, sa.pub          ServiceAccount token signing key
    auth/tokens.json, .csv      the static tokens (0600)
    etcd/                       etcd's data
    kubeconfig/NAME.kubeconfig  one per identity (0600)
    run/NAME.pid, log/NAME.log  recorded PIDs and each process's output

As a module (stdlib and PyYAML only), for the portal and the tests:

    box = KubeBox(Path("/var/lib/dsportal/kube"), api_port=16443)
    cluster = up(box)                       # -> Cluster: api_url, ca_file, kubeconfigs
    hub = Api.from_kubeconfig(cluster.kubeconfigs["hub"])
    namespace = ensure_user_namespace(hub, "alice")          # "dsportal-u-alice", with its RoleBinding
    hub.as_user("alice").get(resource_path("kubeflow.org/v2beta1", "MPIJob", namespace))
    down(box)
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import re
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # daemons.py and selfsigned.py, shared with deploy/local/box.py

from daemons import SurvivedKill, port_in_use, running_pid, tail, terminate  # noqa: E402
from selfsigned import ensure_ca_and_server_cert  # noqa: E402

CRD_FILE = HERE / "mpijob-crd.yaml"
RBAC_FILE = HERE / "rbac.yaml"
BUILD_SCRIPT = HERE / "build-apiserver.sh"
KUBE_BIN = Path(os.environ.get("DSPORTAL_KUBE_BIN", "/opt/dsportal/kubernetes/bin"))
ETCD = os.environ.get("DSPORTAL_ETCD", "/usr/bin/etcd")

LOCALHOST = "127.0.0.1"  # every process of the box listens here only
DEFAULT_STATE = Path("/var/lib/dsportal/kube")
DEFAULT_API_PORT = 16443  # etcd takes the next two ports unless told otherwise
SERVICE_CIDR = "10.0.0.0/24"  # no Service gets traffic here (no nodes, no kube-proxy); the API needs a range
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL

HUB_NAMESPACE = "dsportal"
HUB_SERVICE_ACCOUNT = "dsportal-hub"
USER_PREFIX = "dsportal:"  # a portal user's name as Kubernetes knows it
USERS_GROUP = "dsportal-users"  # the only group the hub may impersonate
USER_NAMESPACE_PREFIX = "dsportal-u-"
USER_ROLE = "dsportal-user"  # the ClusterRole of rbac.yaml bound in each user's namespace
USER_LABEL = "dsportal/user"
DEMO_USERS = ("alice", "bob")
ADMIN_USER = "kube-admin"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"  # bound to its role by the API server's bootstrap
# What the controller-manager runs: default ServiceAccounts and their tokens, namespace deletion, and the
# garbage collector (a foreground delete, as the portal's cancel sends, waits for it to drop the finalizer).
# No scheduler and no nodes: nothing here runs a pod.
CONTROLLERS = "serviceaccount,serviceaccount-token,namespace,garbagecollector"

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # everything here is on 127.0.0.1


class KubeBoxError(RuntimeError):
    """Something the box cannot do; the message says what failed and which log to read."""

    def __init__(self, message: str, log: Path | None = None) -> None:
        super().__init__(message if log is None else f"{message}; read {log}")
        self.log = log


class ApiError(KubeBoxError):
    """The API server answered a request with an error status."""

    def __init__(self, method: str, path: str, status: int, body: dict[str, Any]) -> None:
        self.method, self.path, self.status, self.body = method, path, status, body
        self.reason = str(body.get("reason", ""))
        super().__init__(f"{method} {path}: {status} {self.reason}: {body.get('message', body)}")


# --- layout -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KubeBox:
    """One box: its state dir and ports. Every path is derived from these."""

    state_dir: Path = DEFAULT_STATE
    api_port: int = DEFAULT_API_PORT
    etcd_port: int = 0  # 0: api_port + 1
    etcd_peer_port: int = 0  # 0: etcd_port + 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        if not self.etcd_port:
            object.__setattr__(self, "etcd_port", self.api_port + 1)
        if not self.etcd_peer_port:
            object.__setattr__(self, "etcd_peer_port", self.etcd_port + 1)

    @property
    def api_url(self) -> str:
        return f"https://{LOCALHOST}:{self.api_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://{LOCALHOST}:{self.etcd_port}"

    def path(self, *parts: str) -> Path:
        return self.state_dir.joinpath(*parts)

    @property
    def ca_file(self) -> Path:
        return self.path("tls", "ca.pem")

    def kubeconfig(self, identity: str) -> Path:
        return self.path("kubeconfig", f"{identity}.kubeconfig")

    def pid_file(self, process: str) -> Path:
        return self.path("run", f"{process}.pid")

    def log_file(self, process: str) -> Path:
        return self.path("log", f"{process}.log")


@dataclass(frozen=True)
class Cluster:
    """What `up` hands back: where the API is and how each identity reaches it."""

    state_dir: Path
    api_url: str
    ca_file: Path
    kubeconfigs: dict[str, Path] = field(default_factory=dict)  # admin, hub, alice, bob


def user_principal(name: str) -> str:
    """The Kubernetes user name of portal user `name` (what the hub impersonates)."""
    return f"{USER_PREFIX}{name}"


def user_namespace(name: str) -> str:
    """The namespace of portal user `name`; ValueError when the name cannot be part of one."""
    limit = 63 - len(USER_NAMESPACE_PREFIX)
    if not DNS_LABEL.match(name) or len(name) > limit:
        raise ValueError(f"user name {name!r}: for a Kubernetes namespace it must be 1 to {limit} characters "
                         "of a-z, 0-9 and '-', starting and ending with a letter or digit")
    return f"{USER_NAMESPACE_PREFIX}{name}"


# --- small helpers ----------------------------------------------------------------------------------


def run(cmd: list[str], what: str) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; on failure raise KubeBoxError naming `what` and the command's output."""
    try:
        return subprocess.run(cmd, check=True, text=True, capture_output=True)
    except FileNotFoundError as err:
        raise KubeBoxError(f"{what}: {cmd[0]} is not installed") from err
    except subprocess.CalledProcessError as err:
        output = " ".join((err.stderr or err.stdout or "").split())
        raise KubeBoxError(f"{what}: `{' '.join(cmd)}` exited {err.returncode}: {output}") from err


def write_private(path: Path, text: str) -> None:
    """Write a file only root may read (keys, tokens, kubeconfigs), replacing it atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.touch(mode=0o600)
    os.chmod(tmp, 0o600)
    tmp.write_text(text)
    tmp.replace(path)


def wait_until(check: Callable[[], str | None], timeout: float, what: str, log: Path | None,
               alive: Callable[[], bool] = lambda: True, interval: float = 0.3) -> None:
    """Poll `check` (None when done, else why not yet) until done; KubeBoxError naming `what` and `log`."""
    deadline = time.monotonic() + timeout
    while True:
        reason = check()
        if reason is None:
            return
        if not alive():
            raise KubeBoxError(f"{what}: the process exited ({reason})", log)
        if time.monotonic() > deadline:
            raise KubeBoxError(f"{what}: not done within {timeout:.0f} s ({reason})", log)
        time.sleep(interval)


# --- TLS and tokens -----------------------------------------------------------------------------------


def ensure_tls(box: KubeBox) -> None:
    """A CA, the API server's certificate and the ServiceAccount signing key, each made once."""
    tls = box.path("tls")
    tls.mkdir(parents=True, exist_ok=True)
    # The names a client in or out of the (absent) cluster would use, and the Service IP of `kubernetes`.
    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local"]
    ensure_ca_and_server_cert(tls, "apiserver", ca_cn="dsportal kubebox CA", server_cn="kube-apiserver",
                              alt_names=["IP:127.0.0.1", "IP:10.0.0.1", *(f"DNS:{name}" for name in names)],
                              what="API server", run=run)
    sa_key, sa_pub = tls / "sa.key", tls / "sa.pub"
    if not sa_key.exists():
        run(["openssl", "genrsa", "-out", str(sa_key), "2048"], "TLS: creating the ServiceAccount signing key")
        sa_pub.unlink(missing_ok=True)
    if not sa_pub.exists():
        run(["openssl", "rsa", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)],
            "TLS: extracting the ServiceAccount public key")
    os.chmod(sa_key, 0o600)
    os.chmod(sa_pub, 0o644)


def static_identities() -> dict[str, tuple[str, list[str]]]:
    """identity -> (Kubernetes user name, groups) for every static token."""
    ids = {"admin": (ADMIN_USER, ["system:masters"]), "controller-manager": (CONTROLLER_MANAGER_USER, [])}
    ids.update({name: (user_principal(name), [USERS_GROUP]) for name in DEMO_USERS})
    return ids


def read_tokens(box: KubeBox) -> dict[str, str]:
    return json.loads(box.path("auth", "tokens.json").read_text())


def ensure_tokens(box: KubeBox) -> dict[str, str]:
    """identity -> bearer token; made once, kept in auth/tokens.json, rendered for --token-auth-file."""
    store = box.path("auth", "tokens.json")
    tokens: dict[str, str] = json.loads(store.read_text()) if store.exists() else {}
    identities = static_identities()
    if any(identity not in tokens for identity in identities):
        tokens.update({i: secrets.token_urlsafe(32) for i in identities if i not in tokens})
        write_private(store, json.dumps(tokens, indent=1) + "\n")
    # token,user,uid[,"group1,group2"]: an empty group column would give the user a group named "".
    csv = "".join(f"{tokens[i]},{user},{user}" + (f',"{",".join(groups)}"' if groups else "") + "\n"
                  for i, (user, groups) in identities.items())
    write_private(box.path("auth", "tokens.csv"), csv)
    return tokens


def kubeconfig_text(box: KubeBox, identity: str, token: str, namespace: str = "default") -> str:
    context = f"{identity}@kubebox"
    return yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubebox", "cluster": {"server": box.api_url,
                                                     "certificate-authority": str(box.ca_file)}}],
        "users": [{"name": identity, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": "kubebox", "user": identity,
                                                   "namespace": namespace}}],
        "current-context": context,
    }, sort_keys=False)


# --- the API, over HTTPS with the box's CA (no kubernetes package needed) -------------------------------------


class Api:
    """A small Kubernetes API client: JSON over HTTPS, bearer token, optional impersonation."""

    def __init__(self, server: str, ca_file: Path | str, token: str, impersonate: str | None = None,
                 impersonate_group: str | None = None, timeout: float = 30) -> None:
        self.server, self.ca_file, self.token = server.rstrip("/"), Path(ca_file), token
        self.impersonate, self.impersonate_group = impersonate, impersonate_group
        self.timeout = timeout
        # No proxy, whatever the environment says: the API is on this machine.
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(ca_file))))

    @classmethod
    def from_kubeconfig(cls, path: Path | str) -> Api:
        """The current context of a kubeconfig with a token and a CA file (as this module writes them)."""
        config = yaml.safe_load(Path(path).read_text())
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        groups = user.get("as-groups") or [None]
        return cls(cluster["server"], cluster["certificate-authority"], user["token"], user.get("as"), groups[0])

    def as_user(self, name: str) -> Api:
        """The same credentials, acting as portal user `name` (needs `impersonate`, as the hub has)."""
        return Api(self.server, self.ca_file, self.token, user_principal(name), USERS_GROUP, self.timeout)

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> dict[str, Any]:
        """Send one request; the decoded JSON answer, or ApiError with the server's status and message."""
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if self.impersonate:
            headers["Impersonate-User"] = self.impersonate
        if self.impersonate_group:
            headers["Impersonate-Group"] = self.impersonate_group
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            try:
                answer = json.loads(text)
            except ValueError:
                answer = {"message": text.strip()}
            raise ApiError(method, path, err.code, answer) from err
        return json.loads(text) if text.strip().startswith(("{", "[")) else {"text": text}

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)

    def delete(self, path: str) -> dict[str, Any]:
        return self.request("DELETE", path)


# (apiVersion, kind) -> (plural, namespaced), for the kinds this project creates.
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "Pod"): ("pods", True),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("v1", "Service"): ("services", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("rbac.authorization.k8s.io/v1", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("rolebindings", True),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("kubeflow.org/v2beta1", "MPIJob"): ("mpijobs", True),
}
# Kinds whose whole content a manifest owns, so `apply` replaces them; others are only created when missing
# (replacing a ServiceAccount would drop its token reference and make the token controller mint another).
REPLACEABLE = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "CustomResourceDefinition"}


def resource_path(api_version: str, kind: str, namespace: str | None = None, name: str | None = None) -> str:
    """The REST path of a collection (name None) or of one object, e.g. /apis/kubeflow.org/v2beta1/namespaces/..."""
    try:
        plural, namespaced = RESOURCES[(api_version, kind)]
    except KeyError:
        raise ValueError(f"kind {api_version}/{kind}: not one of {sorted(k for _, k in RESOURCES)}") from None
    if namespaced and not namespace:
        raise ValueError(f"kind {kind} is namespaced: give a namespace")
    path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespaced:
        path += f"/namespaces/{namespace}"
    return f"{path}/{plural}" + (f"/{name}" if name else "")


def load_manifests(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def apply(api: Api, manifest: dict[str, Any]) -> str:
    """Create the object, or bring it in line when it exists (see REPLACEABLE); returns what was done."""
    kind, meta = manifest["kind"], manifest["metadata"]
    collection = resource_path(manifest["apiVersion"], kind, meta.get("namespace"))
    label = f"{kind} {meta.get('namespace', '') + '/' if meta.get('namespace') else ''}{meta['name']}"
    try:
        api.create(collection, manifest)
        return f"{label}: created"
    except ApiError as err:
        if err.status != 409:
            raise
    if kind not in REPLACEABLE:
        return f"{label}: exists"
    current = api.get(f"{collection}/{meta['name']}")
    replacement = {**manifest, "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]}}
    api.request("PUT", f"{collection}/{meta['name']}", replacement)
    return f"{label}: updated"


def ensure_user_namespace(api: Api, name: str) -> str:
    """Give portal user `name` their namespace; bind ClusterRole dsportal-user there to dsportal:<name> (and to
    the namespace's `default` ServiceAccount, which their pods run as).

    Idempotent; what the hub does (as ServiceAccount dsportal-hub) before a user's first job. Returns the
    namespace. A namespace of that name not labelled for this user is refused, never taken over."""
    namespace = user_namespace(name)
    try:
        api.create(resource_path("v1", "Namespace"), {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {USER_LABEL: name, "app.kubernetes.io/part-of": "dsportal"}}})
    except ApiError as err:
        if err.status != 409:
            raise
        owner = api.get(resource_path("v1", "Namespace", name=namespace))["metadata"].get("labels", {})
        if owner.get(USER_LABEL) != name:
            raise KubeBoxError(f"namespace {namespace} exists but is not labelled {USER_LABEL}={name}: "
                               "not made by the portal, not used for this user") from err
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": USER_ROLE, "namespace": namespace, "labels": {USER_LABEL: name}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USER_ROLE},
        # The user as the portal impersonates them, and their pods' ServiceAccount (a notebook submits jobs).
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user_principal(name)},
                     {"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
    }
    try:
        api.create(resource_path(binding["apiVersion"], "RoleBinding", namespace), binding)
    except ApiError as err:
        if err.status != 409:
            raise
    return namespace


# --- processes ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Process:
    name: str
    program: str  # basename that must appear in /proc/PID/cmdline, so a recycled PID is not mistaken
    command: Callable[[KubeBox], list[str]]
    ports: Callable[[KubeBox], list[int]]
    ready: Callable[[KubeBox], str | None]  # None when ready, else why not yet
    timeout: float


def etcd_command(box: KubeBox) -> list[str]:
    peer = f"http://{LOCALHOST}:{box.etcd_peer_port}"
    return [ETCD, "--name", "kubebox", "--data-dir", str(box.path("etcd")),
            "--listen-client-urls", box.etcd_url, "--advertise-client-urls", box.etcd_url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"kubebox={peer}", "--initial-cluster-state", "new"]


def etcd_ready(box: KubeBox) -> str | None:
    try:
        with NO_PROXY.open(f"{box.etcd_url}/health", timeout=3) as response:
            health = json.loads(response.read())
    except (OSError, ValueError) as err:
        return f"GET {box.etcd_url}/health: {err}"
    return None if health.get("health") == "true" else f"etcd health: {health}"


def apiserver_command(box: KubeBox) -> list[str]:
    tls = box.path("tls")
    return [
        str(KUBE_BIN / "kube-apiserver"),
        f"--etcd-servers={box.etcd_url}",
        f"--bind-address={LOCALHOST}", f"--secure-port={box.api_port}", f"--advertise-address={LOCALHOST}",
        f"--cert-dir={tls}", f"--tls-cert-file={tls / 'apiserver.pem'}",
        f"--tls-private-key-file={tls / 'apiserver.key'}", f"--client-ca-file={tls / 'ca.pem'}",
        f"--token-auth-file={box.path('auth', 'tokens.csv')}", "--anonymous-auth=false",
        "--authorization-mode=RBAC",
        f"--service-account-key-file={tls / 'sa.pub'}", f"--service-account-signing-key-file={tls / 'sa.key'}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}", f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # The `kubernetes` Service would get 127.0.0.1 as endpoint, which Endpoints validation refuses.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
    ]


def apiserver_ready(box: KubeBox) -> str | None:
    token = read_tokens(box)["admin"]
    try:
        answer = Api(box.api_url, box.ca_file, token, timeout=5).get("/readyz")
    except ApiError as err:
        return f"/readyz: {err.status} {err.body.get('message', '')[-200:]}"
    except OSError as err:
        return f"/readyz: {getattr(err, 'reason', err)}"
    return None if answer.get("text", "").strip() == "ok" else f"/readyz: {answer}"


def controller_manager_command(box: KubeBox) -> list[str]:
    return [
        str(KUBE_BIN / "kube-controller-manager"),
        f"--kubeconfig={box.path('auth', 'controller-manager.kubeconfig')}",
        f"--service-account-private-key-file={box.path('tls', 'sa.key')}",
        f"--root-ca-file={box.ca_file}",
        "--use-service-account-credentials=true",
        f"--controllers={CONTROLLERS}",
        "--leader-elect=false",
        "--port=0", "--secure-port=0",  # serves nothing: no port to collide with
        "--profiling=false",
    ]


def controller_manager_ready(box: KubeBox) -> str | None:
    return None  # it serves nothing; `up` waits for what it makes (ServiceAccounts and their tokens)


PROCESSES = [
    Process("etcd", "etcd", etcd_command, lambda box: [box.etcd_port, box.etcd_peer_port], etcd_ready, 30),
    Process("kube-apiserver", "kube-apiserver", apiserver_command, lambda box: [box.api_port],
            apiserver_ready, 90),
    Process("kube-controller-manager", "kube-controller-manager", controller_manager_command, lambda box: [],
            controller_manager_ready, 5),
]
BY_NAME = {p.name: p for p in PROCESSES}


def start(process: Process, box: KubeBox) -> str:
    """Start one process unless it runs already, and wait until it is ready."""
    pid = running_pid(box.pid_file(process.name), process.program)
    log = box.log_file(process.name)
    if pid:
        wait_until(lambda: process.ready(box), process.timeout, f"{process.name} (pid {pid}) ready", log)
        return f"{process.name}: already running (pid {pid})"
    program = process.command(box)[0]
    if not os.access(program, os.X_OK):
        raise KubeBoxError(f"{process.name}: {program} is missing; build and install it with `make kube-build` "
                           f"({BUILD_SCRIPT})")
    for port in process.ports(box):
        if port_in_use(LOCALHOST, port):
            raise KubeBoxError(f"{process.name}: port {LOCALHOST}:{port} is already in use by another process")
    began = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} kubebox.py starts {process.name}\n".encode())
        out.flush()
        try:
            child = subprocess.Popen(process.command(box), stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, cwd=box.state_dir, start_new_session=True)
        except OSError as err:
            raise KubeBoxError(f"{process.name}: cannot start {program}: {err}", log) from err
    box.pid_file(process.name).write_text(f"{child.pid}\n")
    try:
        wait_until(lambda: process.ready(box), process.timeout, f"{process.name} ready", log,
                   alive=lambda: child.poll() is None)
        if child.poll() is not None:
            raise KubeBoxError(f"{process.name}: exited with status {child.returncode} at start", log)
    except KubeBoxError:
        stop_pid(child.pid)
        box.pid_file(process.name).unlink(missing_ok=True)
        raise
    return f"{process.name}: started (pid {child.pid}) in {time.monotonic() - began:.1f} s"


def stop_pid(pid: int) -> bool:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT; True when it had to be killed."""
    try:
        return terminate(pid, STOP_TIMEOUT)
    except SurvivedKill as err:
        raise KubeBoxError(str(err)) from err


def stop(process: Process, box: KubeBox) -> str:
    pid = running_pid(box.pid_file(process.name), process.program)
    if pid is None:
        box.pid_file(process.name).unlink(missing_ok=True)
        return f"{process.name}: not running"
    killed = stop_pid(pid)
    box.pid_file(process.name).unlink(missing_ok=True)
    return f"{process.name}: {'killed after SIGTERM timed out' if killed else 'stopped'} (pid {pid})"


# --- bootstrap: CRD, RBAC, tokens, kubeconfigs ----------------------------------------------------------------


def wait_established(api: Api, crd_name: str, log: Path) -> None:
    def established() -> str | None:
        conditions = api.get(resource_path("apiextensions.k8s.io/v1", "CustomResourceDefinition", name=crd_name))
        for condition in (conditions.get("status") or {}).get("conditions") or []:
            if condition["type"] == "Established" and condition["status"] == "True":
                return None
            if condition["type"] == "NamesAccepted" and condition["status"] == "False":
                raise KubeBoxError(f"CRD {crd_name}: names not accepted: {condition.get('message')}", log)
        return "not Established yet"
    wait_until(established, 30, f"CRD {crd_name}", log)


def service_account_token(api: Api, namespace: str, name: str, log: Path) -> str:
    """The token of a ServiceAccount's token Secret, made by the controller-manager's token controller."""
    found: dict[str, str] = {}

    def token_made() -> str | None:
        try:
            account = api.get(resource_path("v1", "ServiceAccount", namespace, name))
        except ApiError as err:
            return str(err)
        for ref in account.get("secrets", []):
            secret = api.get(resource_path("v1", "Secret", namespace, ref["name"]))
            if secret.get("type") == "kubernetes.io/service-account-token" and "token" in secret.get("data", {}):
                found["token"] = base64.b64decode(secret["data"]["token"]).decode()
                return None
        return f"ServiceAccount {namespace}/{name} has no token Secret yet"
    wait_until(token_made, 60, f"kube-controller-manager: token for ServiceAccount {namespace}/{name}", log)
    return found["token"]


def bootstrap(box: KubeBox, admin: Api) -> list[str]:
    """Apply the CRD and RBAC, and wait for what the controller-manager must make."""
    log = box.log_file("kube-apiserver")
    done = []
    for source in (CRD_FILE, RBAC_FILE):
        for manifest in load_manifests(source):
            try:
                done.append(apply(admin, manifest))
            except ApiError as err:
                raise KubeBoxError(f"applying {source.name}: {err}", log) from err
            if manifest["kind"] == "CustomResourceDefinition":
                wait_established(admin, manifest["metadata"]["name"], log)
    return done


def up(box: KubeBox, report: Callable[[str], None] = print) -> Cluster:
    """Start what is stopped, apply the CRD and RBAC, write the kubeconfigs; idempotent. Run as root.

    `report` gets one line per step (print by default)."""
    for sub in ("run", "log", "auth", "kubeconfig"):
        box.path(sub).mkdir(parents=True, exist_ok=True)
    os.chmod(box.state_dir, 0o755)
    box.path("etcd").mkdir(mode=0o700, exist_ok=True)
    with _lock(box):
        ensure_tls(box)
        tokens = ensure_tokens(box)
        write_private(box.path("auth", "controller-manager.kubeconfig"),
                      kubeconfig_text(box, "controller-manager", tokens["controller-manager"], "kube-system"))
        for process in PROCESSES[:2]:
            report(start(process, box))
        admin = Api(box.api_url, box.ca_file, tokens["admin"])
        for line in bootstrap(box, admin):
            report(line)
        report(start(BY_NAME["kube-controller-manager"], box))
        cm_log = box.log_file("kube-controller-manager")
        hub_token = service_account_token(admin, HUB_NAMESPACE, HUB_SERVICE_ACCOUNT, cm_log)
        kubeconfigs = {"admin": (tokens["admin"], "default"), "hub": (hub_token, HUB_NAMESPACE)}
        kubeconfigs.update({name: (tokens[name], user_namespace(name)) for name in DEMO_USERS})
        for identity, (token, namespace) in kubeconfigs.items():
            write_private(box.kubeconfig(identity), kubeconfig_text(box, identity, token, namespace))
    return cluster_of(box)


def cluster_of(box: KubeBox) -> Cluster:
    names = ["admin", "hub", *DEMO_USERS]
    return Cluster(box.state_dir, box.api_url, box.ca_file, {name: box.kubeconfig(name) for name in names})


def down(box: KubeBox) -> list[str]:
    """Stop every process by its recorded PID, in reverse order; state stays."""
    box.path("run").mkdir(parents=True, exist_ok=True)
    with _lock(box):
        return [stop(process, box) for process in reversed(PROCESSES)]


def status(box: KubeBox) -> dict[str, int | None]:
    """process name -> PID, or None when it is not running."""
    return {process.name: running_pid(box.pid_file(process.name), process.program) for process in PROCESSES}


class _lock:
    """One kubebox.py at a time per state dir."""

    def __init__(self, box: KubeBox) -> None:
        self.path = box.path("run", "kubebox.lock")

    def __enter__(self) -> None:
        self.file = open(self.path, "w")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            self.file.close()
            raise KubeBoxError(f"another kubebox.py is working on this state dir ({self.path})") from err

    def __exit__(self, *exc: object) -> None:
        self.file.close()


# --- command line -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Kubernetes in a box: etcd, kube-apiserver, controller-manager.")
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE, help=f"state dir (default {DEFAULT_STATE})")
    parser.add_argument("--port", type=int, default=DEFAULT_API_PORT,
                        help=f"the API server's HTTPS port on {LOCALHOST} (default {DEFAULT_API_PORT})")
    parser.add_argument("--etcd-port", type=int, default=0,
                        help="etcd's client port (default: --port + 1; its peer port is the next one)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    box = KubeBox(args.state.resolve(), args.port, args.etcd_port)
    if args.command == "status":
        for name, pid in status(box).items():
            print(f"{name}: {f'running ({pid})' if pid else 'stopped'}")
        return 0
    if os.geteuid() != 0:
        print("kubebox.py: run as root (it writes keys under the state dir and runs daemons)", file=sys.stderr)
        return 2
    try:
        if args.command == "down":
            for line in down(box):
                print(line)
            return 0
        began = time.monotonic()
        cluster = up(box, report=lambda line: print(line, flush=True))
    except (KubeBoxError, ValueError) as err:
        print(f"kubebox.py {args.command}: {err}", file=sys.stderr)
        log = getattr(err, "log", None)
        if log is not None and log.exists():
            print(f"--- last lines of {log}:\n{tail(log, 20)}", file=sys.stderr)
        return 1
    print(f"\nkubebox is up ({time.monotonic() - began:.1f} s): {cluster.api_url}, CA {cluster.ca_file}")
    for identity, path in cluster.kubeconfigs.items():
        print(f"  {identity}: KUBECONFIG={path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
