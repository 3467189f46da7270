"""A Kubernetes API server of recorded objects, as the `kubernetes` client's REST layer meets it: the real client
(its models, its errors, the impersonation headers) over a dict of objects, for the scheduler contract suite
(contract_helpers.KubernetesDriver). Faked below the client rather than at its API classes because the scheduler
makes some of those itself from one ApiClient (jobs.create_owned, namespaces.ensure_namespace)."""

from __future__ import annotations

import json
import re
import secrets
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from portal.config import PortalConfig
from portal.scheduler.kubernetes.client import impersonate

K8S_API = re.compile(r"^/(?:api|apis/[^/]+)/[^/]+/(?:namespaces/(?P<namespace>[^/]+)/)?(?P<plural>[^/]+)"
                     r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$")


class RecordedApiServer:
    """The Kubernetes API server as the client's REST layer meets it (ApiClient.rest_client): objects kept in a
    dict by (plural, namespace, name), created, read, listed by label, replaced and deleted (with what they own);
    every call recorded with whom it impersonated. A user may act in their own namespace only (the portal's RBAC:
    403 elsewhere). A pod's log is its text in `logs` (by namespace and name), read as the kubelet serves it
    (tailLines, limitBytes); a pod without one has not started its container (400). `unanswered`: the connection
    fails, as to a server that is down."""

    def __init__(self, cfg: PortalConfig, people: tuple[str, ...]):
        self.cfg = cfg
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self.calls: list[tuple[str, str, str, str, str]] = []  # (as whom, method, plural, namespace, name)
        self.unanswered = False
        self.namespaces = {cfg.user_principal(name): cfg.user_namespace(name) for name in people}

    def request(self, method, url, headers=None, body=None, post_params=None, _request_timeout=None):
        from urllib3.exceptions import ProtocolError

        parts = urlsplit(url)
        found = K8S_API.match(parts.path)
        assert found, f"no such API path: {parts.path}"
        namespace, plural = found["namespace"] or "", found["plural"]
        name = found["name"] or ((body or {}).get("metadata") or {}).get("name", "") if method == "POST" else \
            found["name"] or ""
        if plural == "namespaces" and not namespace:  # a namespace itself is cluster-wide
            plural, namespace = "namespaces", ""
        who = (headers or {}).get("Impersonate-User", "")
        self.calls.append((who, method, plural, namespace, name))
        if self.unanswered:
            raise ProtocolError("Connection aborted.", ConnectionRefusedError(111, "Connection refused"))
        if who and self.namespaces.get(who) != namespace:
            return self.status(403, f'{plural} is forbidden: User "{who}" cannot {method} in "{namespace}"')
        if found["sub"] == "log" and method == "GET":
            return self.pod_log(namespace, name, parse_qs(parts.query))
        return self.answer(method, plural, namespace, name, body, parse_qs(parts.query))

    def answer(self, method: str, plural: str, namespace: str, name: str, body: Any, query: dict) -> Any:
        key = (plural, namespace, name)
        if method == "GET" and not name:
            wanted = dict(term.split("=", 1) for term in query.get("labelSelector", [""])[0].split(",") if term)
            items = [obj for (kind, where, _), obj in self.objects.items() if kind == plural
                     and namespace in (where, "") and wanted.items() <= labels(obj).items()]  # "": every namespace
            return self.reply(200, {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
        if method == "POST":
            if key in self.objects:
                return self.status(409, f'{plural} "{key[2]}" already exists')
            meta = {**body["metadata"], "namespace": namespace, "uid": secrets.token_hex(8),
                    "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            self.objects[key] = {**body, "metadata": meta, "status": {}}
            self.count_quota(key)
            return self.reply(201, self.objects[key])
        if key not in self.objects:
            return self.status(404, f'{plural} "{key[2]}" not found')
        if method == "PUT":  # the status is kept: it is a subresource of its own
            self.objects[key] = {**body, "metadata": {**self.objects[key]["metadata"], **body["metadata"]},
                                 "status": self.objects[key].get("status", {})}
            self.count_quota(key)
        if method == "DELETE":
            self.delete(key)
            return self.status(200, "deleted")
        return self.reply(200, self.objects[key])

    def pod_log(self, namespace: str, name: str, query: dict) -> Any:
        """The pod's log as the kubelet serves it: its last `tailLines` lines, at most `limitBytes` bytes."""
        if ("pods", namespace, name) not in self.objects:
            return self.status(404, f'pods "{name}" not found')
        if (namespace, name) not in self.logs:
            return self.status(400, f'container "main" in pod "{name}" is waiting to start: ContainerCreating')
        text = self.logs[(namespace, name)]
        if "tailLines" in query:
            text = "".join(text.splitlines(keepends=True)[-int(query["tailLines"][0]):])
        if "limitBytes" in query:
            text = text.encode()[:int(query["limitBytes"][0])].decode(errors="ignore")
        return self.reply(200, text)

    def count_quota(self, key: tuple[str, str, str]) -> None:
        """A ResourceQuota made or changed is counted at once, as the quota controller does within a moment (its
        status.hard becomes the spec's: portal.scheduler.kubernetes.manifests.quota_in_force)."""
        if key[0] == "resourcequotas":
            quota = self.objects[key]
            quota["status"] = {**quota.get("status", {}), "hard": dict(quota["spec"]["hard"])}

    def delete(self, key: tuple[str, str, str]) -> None:
        """The object and, as the garbage collector would, what it owns."""
        gone = self.objects.pop(key)
        owned = [k for k, obj in self.objects.items() if any(
            ref.get("uid") == gone["metadata"]["uid"] for ref in obj["metadata"].get("ownerReferences") or ())]
        for other in owned:
            self.delete(other)

    def reply(self, status: int, body: dict | str) -> Any:
        """JSON for an object; plain text for a log."""
        import urllib3
        from kubernetes.client.rest import RESTResponse

        kind = "text/plain" if isinstance(body, str) else "application/json"
        raw = urllib3.HTTPResponse(body=(body if isinstance(body, str) else json.dumps(body)).encode(),
                                   status=status, preload_content=True, headers={"content-type": kind})
        return RESTResponse(raw)

    def status(self, code: int, message: str) -> Any:
        return self.reply(code, {"apiVersion": "v1", "kind": "Status", "status": "Failure" if code >= 300 else
                                 "Success", "message": message, "code": code, "metadata": {}})

    def client_for(self, cfg: PortalConfig, user: Any = None) -> Any:
        """An ApiClient as portal.scheduler.kubernetes.client.api_client makes one, talking to this server."""
        from kubernetes import client

        api = client.ApiClient(client.Configuration())
        api.rest_client = self
        if user is not None and not user.is_caller:
            impersonate(api, cfg.user_principal(user.name), cfg.k8s_users_group)
        return api


def labels(obj: dict) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}
