"""Who may talk to the Kubernetes box: its TLS, the static tokens of its identities, and a kubeconfig for each.

Identities (static tokens, made once, in auth/tokens.csv; and one ServiceAccount token, see bootstrap.py):

    admin                    user kube-admin, group system:masters        kubeconfig/admin.kubeconfig
    hub                      ServiceAccount dsportal/dsportal-hub         kubeconfig/hub.kubeconfig
    alice, bob               user dsportal:<name>, group dsportal-users   kubeconfig/<name>.kubeconfig
    (controller-manager)     user system:kube-controller-manager          auth/controller-manager.kubeconfig
    (scheduler)              user system:kube-scheduler                   auth/scheduler.kubeconfig
    (each node's kubelet)    user system:node:<node>, group system:nodes  auth/<node>.kubeconfig
    (every node's proxy)     user system:kube-proxy                       auth/kube-proxy.kubeconfig

The Node authorizer and NodeRestriction keep each kubelet to its own Node and the pods bound to it. The API server
reaches the kubelets with a client certificate (tls/kubelet-client.pem, group system:masters), which the kubelets
check against the box's CA; each kubelet serves with a certificate it makes itself.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import yaml

from deploy.kubernetes.kubeparts.layout import (
    ADMIN_USER,
    CONTROLLER_MANAGER_USER,
    DEMO_USERS,
    SCHEDULER_USER,
    USERS_GROUP,
    KubeBox,
    user_principal,
)
from deploy.selfsigned import ensure_ca_and_server_cert, ensure_signing_key
from deploy.supervise import write_if_changed

PRIVATE = 0o600  # keys, tokens and kubeconfigs: root only


def ensure_tls(box: KubeBox) -> None:
    """A CA, the API server's certificate, its client certificate for the kubelets and the ServiceAccount signing
    key, each made once (the server's again when its addresses change)."""
    tls = box.path("tls")
    tls.mkdir(parents=True, exist_ok=True)
    # The names a client in or out of the cluster would use: the bridge address and the Service IP of `kubernetes`.
    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local"]
    alt_names = [f"IP:{box.api_address}", f"IP:{box.api_service_ip}", "IP:127.0.0.1",
                 *(f"DNS:{name}" for name in names)]
    ensure_ca_and_server_cert(tls, "apiserver", ca_cn="dsportal kubebox CA", server_cn="kube-apiserver",
                              alt_names=alt_names, what="API server")
    ensure_ca_and_server_cert(tls, "kubelet-client", ca_cn="dsportal kubebox CA",
                              server_cn="kube-apiserver-kubelet-client", alt_names=[], what="kubelet client",
                              organization="system:masters", usage="clientAuth")
    ensure_signing_key(tls, "sa", "ServiceAccount signing")


def static_identities(box: KubeBox) -> dict[str, tuple[str, list[str]]]:
    """identity -> (Kubernetes user name, groups) for every static token."""
    ids = {"admin": (ADMIN_USER, ["system:masters"]), "controller-manager": (CONTROLLER_MANAGER_USER, []),
           "scheduler": (SCHEDULER_USER, []), "kube-proxy": ("system:kube-proxy", [])}
    ids.update({name: (user_principal(name), [USERS_GROUP]) for name in DEMO_USERS})
    ids.update({node.name: (f"system:node:{node.name}", ["system:nodes"]) for node in box.node_network.nodes})
    return ids


def read_tokens(box: KubeBox) -> dict[str, str]:
    return json.loads(box.path("auth", "tokens.json").read_text())


def ensure_tokens(box: KubeBox) -> dict[str, str]:
    """identity -> bearer token; made once, kept in auth/tokens.json, rendered for --token-auth-file."""
    store = box.path("auth", "tokens.json")
    tokens: dict[str, str] = json.loads(store.read_text()) if store.exists() else {}
    identities = static_identities(box)
    if any(identity not in tokens for identity in identities):
        tokens.update({i: secrets.token_urlsafe(32) for i in identities if i not in tokens})
        write_if_changed(store, json.dumps(tokens, indent=1) + "\n", PRIVATE)
    # token,user,uid[,"group1,group2"]: an empty group column would give the user a group named "".
    csv = "".join(f"{tokens[i]},{user},{user}" + (f',"{",".join(groups)}"' if groups else "") + "\n"
                  for i, (user, groups) in identities.items())
    write_if_changed(box.path("auth", "tokens.csv"), csv, PRIVATE)
    return tokens


def write_kubeconfig(box: KubeBox, path: Path, identity: str, token: str, namespace: str) -> None:
    """A kubeconfig for `identity`: its token, the box's CA, `namespace` as the current context's."""
    context = f"{identity}@kubebox"
    text = yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubebox", "cluster": {"server": box.api_url,
                                                     "certificate-authority": str(box.ca_file)}}],
        "users": [{"name": identity, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": "kubebox", "user": identity,
                                                   "namespace": namespace}}],
        "current-context": context,
    }, sort_keys=False)
    write_if_changed(path, text, PRIVATE)
