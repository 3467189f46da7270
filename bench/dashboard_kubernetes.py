"""The dashboard benchmark on the Kubernetes box (`make up-k8s`: the hub in a pod, served at a node's NodePort over
HTTPS that the box's CA signs): what bench.dashboard needs there besides the hub's users and tokens.

    python -m bench.dashboard_kubernetes [options]   # the same as python -m bench.dashboard --box kubernetes ...

Its result is docs/results/dashboard_kubernetes.json (one file per benchmark, named for the module: bench.results).

- Each simulated user's namespace, made as the portal makes it, as the hub's service account: the namespace (the
  portal's builder, with the label BENCH_LABEL added), then portal.scheduler.kubernetes.namespaces.ensure_namespace
  (the user's RoleBinding, GPU ResourceQuota and home claim). And, as the box's administrator provides alice's and
  bob's (deploy/kubernetes/kubeparts/volumes.py), a volume bound ahead to that claim: a claim left unbound is looked
  at again by the volume controller every 15 s, with an event each time, which for thousands of users would load
  the box's 2 cores as no site's storage does. No pod ever mounts it.
- A ResourceQuota of 0 pods (NO_PODS_QUOTA) in each namespace the bench makes, and in every submitter's before each
  run: the dashboard's submit is accepted (a Job is not a pod), the Job controller's pods are refused, and the
  cancel deletes the Job: no job of theirs ever runs a pod (on the Slurm box: MaxJobs=0).
- Everything the bench makes carries BENCH_LABEL; `--remove-users` deletes exactly that (a namespace the bench
  made, with what it holds; elsewhere its quota; its volumes), never a namespace it did not make.
- Leftover jobs: the users' launcher Jobs still there and not being deleted, deleted as the dashboard's cancel does
  (Foreground), before and after a run.
- What the dashboard asked the scheduler: GET api/cluster's counters are Slurm's (squeue_calls stays 0 here; the
  hub's requests are counted). The API server counts every request by verb and resource (apiserver_request_total
  on its /metrics, read as the box's admin), every client's. The dashboard's shared snapshot is one LIST of the
  nodes and one of the pods of all namespaces per refresh interval; nothing else on the box lists the nodes (the
  kubelets, controllers and scheduler watch them), so "LIST nodes (cluster)" is the target's counter, as squeue is
  Slurm's. `LIST pods (cluster)` also counts the hub's KubeSpawner reflector, once one runs (after a server was
  started since the hub's start): it lists again every 10 s or so.
- The box's processes: etcd, the API server, controller-manager, scheduler, each node's kubelet with its containerd
  and kube-proxy, the LDAP relay, and in the hub's pod the hub, its proxy and the dashboard.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from bench.common import Proc, counts_delta, processes
from bench.dashboard_users import BENCH_NAME
from bench.hub_client import trusting
from portal.config import PortalConfig
from portal.scheduler.kubernetes.client import api_client, kube_user
from portal.scheduler.kubernetes.errors import KubernetesError
from portal.scheduler.kubernetes.manifests import HOME_CLAIM_SIZE, LABEL_USER, user_namespace_manifest
from portal.scheduler.kubernetes.namespaces import ensure_namespace

BENCH_LABEL, BENCH_VALUE = "dsportal/bench", "dashboard"
BENCH_SELECTOR = f"{BENCH_LABEL}={BENCH_VALUE}"
NO_PODS_QUOTA = "dsportal-bench-no-pods"
WORKERS = 8  # requests to the API server at once while making or deleting thousands of objects
BIND_WAIT_S = 300  # new users' claims bound by the volume controller (thousands take a while on 2 cores)
SNAPSHOT_ROW = "LIST nodes (cluster)"  # the shared snapshot's, once per refresh interval (see above)
BUSIEST_ROWS = 20  # the API server's other requests: the busiest kinds shown
REQUESTS_METRIC = "apiserver_request_total"
METRIC_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
NODE_CHILDREN = ("containerd", "kube-proxy")  # node.sh starts them, then becomes the node's kubelet
# In the hub's pod, by its command line (the first marker found names it; tini, the pod's init, is left out).
HUB_POD_MARKERS = (("dashboard", "portal.service"), ("proxy", "configurable-http-proxy"), ("hub", "jupyterhub"))


# --- pure parts ---

def portal_settings(kubeconfig: Path) -> PortalConfig:
    """The settings that name the users' namespaces and claims as the hub in the pod names them (the portal's
    defaults: deploy/kubernetes/values.yaml leaves them), acting as the hub's service account (`kubeconfig`)."""
    from deploy.kubernetes.kubeparts.layout import PORTAL

    return dataclasses.replace(PORTAL, scheduler="kubernetes", k8s_kubeconfig=str(kubeconfig))


def marked(manifest: dict) -> dict:
    """The manifest with BENCH_LABEL among its labels."""
    meta = manifest["metadata"]
    return {**manifest, "metadata": {**meta, "labels": {**(meta.get("labels") or {}), BENCH_LABEL: BENCH_VALUE}}}


def bench_namespace(cfg: PortalConfig, name: str) -> dict:
    """The user's namespace as the portal builds it, marked as the bench's."""
    if not BENCH_NAME.fullmatch(name):
        raise ValueError(f"{name[:20]!r} is not a bench user; allowed: bench001, bench002, ...")
    return marked(user_namespace_manifest(cfg, name))


def no_pods_quota(cfg: PortalConfig, name: str) -> dict:
    """A quota of 0 pods in the user's namespace: Jobs are made, their pods refused."""
    return marked({"apiVersion": "v1", "kind": "ResourceQuota",
                   "metadata": {"name": NO_PODS_QUOTA, "namespace": cfg.user_namespace(name)},
                   "spec": {"hard": {"pods": "0"}}})


def home_volume(cfg: PortalConfig, name: str, path: Path) -> dict:
    """A volume bound ahead to the user's home claim (as the box's volumes.py makes alice's), at `path`, which no
    pod mounts and the bench never makes."""
    return marked({"apiVersion": "v1", "kind": "PersistentVolume",
                   "metadata": {"name": f"dsportal-bench-home-{name}", "labels": {LABEL_USER: name}},
                   "spec": {"capacity": {"storage": HOME_CLAIM_SIZE}, "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
                            "hostPath": {"path": str(path), "type": "Directory"},
                            "claimRef": {"namespace": cfg.user_namespace(name), "name": cfg.home_claim(name)}}})


def bench_user(cfg: PortalConfig, namespace: str, ours: Collection[str]) -> str | None:
    """Whose namespace this is, when that is one of `ours` (bench users' names), else None."""
    user = cfg.namespace_user(namespace)
    return user if user is not None and user in ours and BENCH_NAME.fullmatch(user) else None


def leftover_jobs(jobs: Sequence[Mapping[str, Any]], cfg: PortalConfig,
                  names: Collection[str]) -> list[tuple[str, str]]:
    """(namespace, name) of each job of these users still there: their launcher Jobs (the portal's record of a job;
    what one owns goes with it), labelled for the namespace's user, not being deleted already."""
    ours = set(names)
    found = []
    for job in jobs:
        meta = job.get("metadata") or {}
        namespace = meta.get("namespace", "")
        user = bench_user(cfg, namespace, ours)
        if user is None or (meta.get("labels") or {}).get(LABEL_USER) != user:
            continue
        if not meta.get("ownerReferences") and not meta.get("deletionTimestamp"):
            found.append((namespace, meta["name"]))
    return found


def request_counts(metrics: str) -> dict[str, int]:
    """The API server's requests so far by kind, "VERB resource[/subresource] (scope)" ("GET /readyz" for a path),
    every code and client together, from its /metrics text (REQUESTS_METRIC)."""
    found: dict[str, int] = {}
    for line in metrics.splitlines():
        if not line.startswith(REQUESTS_METRIC + "{"):
            continue
        labels_text, _, value = line[len(REQUESTS_METRIC) + 1:].rpartition("}")
        labels = dict(METRIC_LABEL.findall(labels_text))
        resource, sub, scope = labels.get("resource", ""), labels.get("subresource", ""), labels.get("scope", "")
        what = f"{resource}/{sub}" if resource and sub else resource or sub or "(none)"  # a path: "/readyz"
        key = f"{labels.get('verb', '?')} {what}" + (f" ({scope})" if scope else "")
        found[key] = found.get(key, 0) + int(float(value.split()[0]))
    return found


def kube_ran(cluster_before: Mapping[str, Any], cluster_after: Mapping[str, Any], api_before: dict[str, int],
             api_after: dict[str, int], busiest: int = BUSIEST_ROWS) -> dict[str, int]:
    """The target's counter first (SNAPSHOT_ROW), the hub's requests (GET api/cluster), then the API server's
    busiest other kinds of request during the run."""
    asked = counts_delta(api_before, api_after)
    found = {SNAPSHOT_ROW: asked.pop(SNAPSHOT_ROW, 0)}
    if "hub_calls" in cluster_after:
        found["hub API requests (dashboard)"] = cluster_after["hub_calls"] - cluster_before.get("hub_calls", 0)
    found.update(sorted(asked.items(), key=lambda item: (-item[1], item[0]))[:busiest])
    return found


def kube_labels(services: Mapping[str, int | None], nodes: Sequence[str], procs: Sequence[Proc],
                hub_pod_uid: str) -> dict[str, int]:
    """label -> pid of the box's processes: its services (`services`: kubebox's status; a node's is its kubelet),
    each node's containerd and kube-proxy (the kubelet's children), the hub pod's processes (their cgroup names the
    pod's UID, with dashes or with underscores)."""
    found = {}
    kubelets = {}
    for name, pid in services.items():
        if pid:
            found[f"{name} kubelet" if name in nodes else name] = pid
            if name in nodes:
                kubelets[pid] = name
    uid_forms = {hub_pod_uid, hub_pod_uid.replace("-", "_")} if hub_pod_uid else set()
    for proc in sorted(procs, key=lambda p: p.pid):
        if proc.ppid in kubelets and proc.comm in NODE_CHILDREN:
            found.setdefault(f"{kubelets[proc.ppid]} {proc.comm}", proc.pid)
        elif uid_forms and proc.comm != "tini" and any(form in proc.cgroup for form in uid_forms):
            label = next((label for label, marker in HUB_POD_MARKERS if any(marker in a for a in proc.argv)), None)
            if label:
                found.setdefault(f"hub pod: {label}", proc.pid)
    return found


# --- the box ---

class KubernetesBox:
    """The Kubernetes box at `state` (make up-k8s's by default), its hub in a pod. Run as root: it reads the
    box's admin token and the hub's kubeconfig."""

    name = "kubernetes"
    result = "dashboard_kubernetes"  # docs/results/dashboard_kubernetes.json
    calls_name, calls_row = "Kubernetes LIST nodes", SNAPSHOT_ROW
    ran_title = ("what the API server was asked during the run (every client's requests; the dashboard's snapshot "
                 "is one LIST nodes and one LIST pods (cluster) per refresh interval)")

    def __init__(self, state: Path | None = None):
        from kubernetes import client as k8s

        from deploy.kubernetes import kubebox  # the box's clients, imported when a run needs them

        self.box = kubebox.KubeBox(state or kubebox.DEFAULT_STATE)
        self._kubebox = kubebox
        if not kubebox.box_hub.installed(self.box) or not kubebox.status(self.box).get("kube-apiserver"):
            raise SystemExit(f"the Kubernetes box at {self.box.state_dir} is not up with its hub in a pod: "
                             "run `make up-k8s` (as root; `make up` first)")
        self.cfg = portal_settings(self.box.kubeconfig("hub"))
        self.hub_url = kubebox.box_hub.url(self.box)
        self.ca: str | None = str(self.box.ca_file)
        self._admin_token = kubebox.read_tokens(self.box)["admin"]
        admin = kubebox.api_client(self.box, self._admin_token)
        self.core, self.batch = k8s.CoreV1Api(admin), k8s.BatchV1Api(admin)
        self._portal = api_client(self.cfg)  # the hub's service account, as the dashboard in the pod acts
        self._portal_core = k8s.CoreV1Api(self._portal)
        self._api_error = k8s.ApiException

    # --- the users ---

    def _create(self, what: str, create: Callable[..., Any], *args: Any,
                replace: Callable[..., Any] | None = None) -> None:
        """Create; one that exists is kept (or replaced by `replace`, for the bench's own objects)."""
        try:
            create(*args)
        except self._api_error as err:
            if err.status != 409:
                raise SystemExit(f"{what}: the API server answered {err.status} {err.reason}: {err.body}") from None
            if replace is not None:
                replace(args[-1]["metadata"]["name"], *args)

    def _no_pods(self, name: str) -> None:
        namespace = self.cfg.user_namespace(name)
        self._create(f"{NO_PODS_QUOTA} in {namespace}", self.core.create_namespaced_resource_quota, namespace,
                     no_pods_quota(self.cfg, name), replace=self.core.replace_namespaced_resource_quota)

    def _make_user(self, name: str) -> None:
        namespace = self.cfg.user_namespace(name)
        self._create(f"namespace {namespace}", self._portal_core.create_namespace, bench_namespace(self.cfg, name))
        try:
            ensure_namespace(self.cfg, self._portal, kube_user(name, (), self.cfg))
        except KubernetesError as err:
            raise SystemExit(f"{name}'s namespace, as the portal makes it: {err}") from None
        self._no_pods(name)
        self._create(f"{name}'s home volume", self.core.create_persistent_volume,
                     home_volume(self.cfg, name, self.box.path("volumes", "bench-home", name)))

    def _made(self) -> set[str]:
        """The users whose namespace exists and whose volume the bench made (its last step)."""
        volumes = self.core.list_persistent_volume(label_selector=BENCH_SELECTOR).items
        with_volume = {(v.metadata.labels or {}).get(LABEL_USER) for v in volumes}
        namespaces = self.core.list_namespace(label_selector=LABEL_USER).items
        return {user for ns in namespaces if (user := self.cfg.namespace_user(ns.metadata.name)) in with_volume}

    def prepare(self, names: Sequence[str], submitters: int) -> dict[str, float]:
        """Every user's namespace (those missing), every submitter's 0-pods quota; how many were made and what
        each step took (s)."""
        timings: dict[str, float] = {}
        started = time.monotonic()
        made = self._made()
        missing = [n for n in names if n not in made]
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(self._make_user, missing))
        timings["namespaces made"] = len(missing)
        timings["namespaces s"] = time.monotonic() - started
        if missing:  # the volume controller binds the new claims now: done before the run, not during it
            started = time.monotonic()
            timings["volumes unbound"] = self._wait_bound(set(names))
            timings["volumes bound s"] = time.monotonic() - started
        started = time.monotonic()
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(self._no_pods, names[:submitters]))
        timings["no-pods quotas s"] = time.monotonic() - started
        return timings

    def _wait_bound(self, ours: set[str], timeout: float = BIND_WAIT_S) -> int:
        """Until every volume the bench made for these users is Bound (or `timeout` s); how many are not."""
        deadline = time.monotonic() + timeout
        while True:
            volumes = self.core.list_persistent_volume(label_selector=BENCH_SELECTOR).items
            unbound = sum(1 for v in volumes if (v.metadata.labels or {}).get(LABEL_USER) in ours
                          and (v.status and v.status.phase) != "Bound")
            if not unbound or time.monotonic() > deadline:
                return unbound
            time.sleep(2)

    def remove(self, names: Sequence[str]) -> str:
        """Delete what `prepare` made (the hub users aside); what was removed, in words."""
        ours = set(names)
        namespaces = {ns.metadata.name for ns in self.core.list_namespace(label_selector=BENCH_SELECTOR).items
                      if bench_user(self.cfg, ns.metadata.name, ours)}
        quotas = [(q.metadata.namespace, q.metadata.name)
                  for q in self.core.list_resource_quota_for_all_namespaces(label_selector=BENCH_SELECTOR).items
                  if bench_user(self.cfg, q.metadata.namespace, ours) and q.metadata.namespace not in namespaces]
        volumes = [v.metadata.name for v in self.core.list_persistent_volume(label_selector=BENCH_SELECTOR).items
                   if (v.metadata.labels or {}).get(LABEL_USER) in ours]
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(lambda n: self._deleted(self.core.delete_namespace, n), namespaces))
            list(pool.map(lambda q: self._deleted(self.core.delete_namespaced_resource_quota, q[1], q[0]), quotas))
            list(pool.map(lambda n: self._deleted(self.core.delete_persistent_volume, n), volumes))
        return (f"{len(namespaces)} namespaces (with what they hold; the namespace controller empties them now), "
                f"{len(quotas)} quotas in namespaces the bench did not make and {len(volumes)} volumes")

    def _deleted(self, delete: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            delete(*args, **kwargs)
        except self._api_error as err:
            if err.status != 404:
                raise SystemExit(f"deleting {args}: the API server answered {err.status} {err.reason}") from None

    # --- before and after a run ---

    def _cancel_leftovers(self, names: Sequence[str]) -> int:
        listed = self.batch.list_job_for_all_namespaces(label_selector=LABEL_USER)
        jobs = self.batch.api_client.sanitize_for_serialization(listed).get("items", [])
        found = leftover_jobs(jobs, self.cfg, names)
        for namespace, job in found:
            self._deleted(self.batch.delete_namespaced_job, job, namespace, propagation_policy="Foreground")
        return len(found)

    def _pods(self, names: Sequence[str]) -> int:
        ours = set(names)
        pods = self.core.list_pod_for_all_namespaces().items
        return sum(1 for pod in pods if bench_user(self.cfg, pod.metadata.namespace, ours))

    def clear(self, names: Sequence[str], submitters: int) -> dict[str, float]:
        return {"leftover jobs cancelled before": self._cancel_leftovers(names)}

    def after_run(self, names: Sequence[str]) -> dict[str, float]:
        """The jobs whose cancel failed, deleted; and the users' pods now (none can have run: the quota)."""
        return {"leftover jobs cancelled": self._cancel_leftovers(names),
                "pods in the users' namespaces": self._pods(names)}

    # --- what was asked, and by whom ---

    def read_counters(self) -> dict[str, int]:
        """The API server's requests so far, by kind (request_counts)."""
        session = trusting(requests.Session(), self.ca)
        answer = session.get(f"{self.box.api_url}/metrics", timeout=60,
                             headers={"Authorization": f"Bearer {self._admin_token}"})
        if answer.status_code != 200:
            raise SystemExit(f"{self.box.api_url}/metrics: {answer.status_code} {answer.text[:300]}")
        return request_counts(answer.text)

    def ran(self, cluster_before: dict, cluster_after: dict, box_before: dict, box_after: dict) -> dict[str, int]:
        return kube_ran(cluster_before, cluster_after, box_before, box_after)

    def processes(self) -> dict[str, int]:
        pods = [p for p in self._kubebox.box_hub.hub_pods(self.core) if p.status.phase == "Running"]
        return kube_labels(self._kubebox.status(self.box), [n.name for n in self.box.node_network.nodes],
                           processes(with_cgroup=True), pods[0].metadata.uid if pods else "")


if __name__ == "__main__":
    from bench.dashboard import main

    sys.exit(main(["--box", "kubernetes", *sys.argv[1:]]))
