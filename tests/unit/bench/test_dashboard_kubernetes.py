"""The dashboard benchmark's Kubernetes side, its pure parts: what it makes for each user (and how it marks it),
which jobs are leftovers, the API server's request counts, and the box's processes by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common import Proc
from bench.dashboard_kubernetes import (
    BENCH_LABEL,
    NO_PODS_QUOTA,
    SNAPSHOT_ROW,
    bench_namespace,
    bench_user,
    home_volume,
    kube_labels,
    kube_ran,
    leftover_jobs,
    no_pods_quota,
    portal_settings,
    request_counts,
)
from portal.scheduler.kubernetes.manifests import LABEL_USER, user_namespace_manifest

CFG = portal_settings(Path("/var/lib/dsportal/kube/kubeconfig/hub.kubeconfig"))


def test_the_namespace_is_the_portals_own_with_the_benchs_mark():
    made = bench_namespace(CFG, "bench001")
    portal = user_namespace_manifest(CFG, "bench001")
    assert made["metadata"]["name"] == portal["metadata"]["name"] == "dsportal-u-bench001"
    assert made["metadata"]["labels"] == {**portal["metadata"]["labels"], BENCH_LABEL: "dashboard"}
    assert BENCH_LABEL not in portal["metadata"]["labels"]  # the builder's manifest is left as it was
    with pytest.raises(ValueError, match="not a bench user"):
        bench_namespace(CFG, "alice")


def test_the_submitters_quota_allows_no_pod_and_is_marked():
    quota = no_pods_quota(CFG, "bench002")
    assert quota["kind"] == "ResourceQuota" and quota["spec"] == {"hard": {"pods": "0"}}
    assert quota["metadata"]["name"] == NO_PODS_QUOTA and quota["metadata"]["namespace"] == "dsportal-u-bench002"
    assert quota["metadata"]["labels"][BENCH_LABEL] == "dashboard"


def test_the_home_volume_is_bound_ahead_to_the_portals_claim():
    volume = home_volume(CFG, "bench003", Path("/srv/homes/bench003"))
    assert volume["spec"]["claimRef"] == {"namespace": "dsportal-u-bench003", "name": CFG.home_claim("bench003")}
    assert volume["metadata"]["labels"] == {LABEL_USER: "bench003", BENCH_LABEL: "dashboard"}
    assert volume["spec"]["storageClassName"] == "" and volume["spec"]["hostPath"]["path"] == "/srv/homes/bench003"


def test_only_the_runs_bench_users_namespaces_are_theirs():
    ours = {"bench001", "alice"}
    assert bench_user(CFG, "dsportal-u-bench001", ours) == "bench001"
    assert bench_user(CFG, "dsportal-u-bench002", ours) is None  # a bench user, not of this run
    assert bench_user(CFG, "dsportal-u-alice", ours) is None  # named, but not a bench user
    assert bench_user(CFG, "kube-system", ours) is None


def job(namespace: str, name: str, user: str | None, **meta) -> dict:
    return {"metadata": {"namespace": namespace, "name": name, **({"labels": {LABEL_USER: user}} if user else {}),
                         **meta}}


def test_leftovers_are_the_users_launcher_jobs_not_already_going():
    jobs = [job("dsportal-u-bench001", "k8s-1", "bench001"),
            job("dsportal-u-bench001", "k8s-1-workers", "bench001", ownerReferences=[{"name": "k8s-1"}]),
            job("dsportal-u-bench001", "k8s-2", "bench001", deletionTimestamp="2026-11-28T08:00:00Z"),
            job("dsportal-u-bench001", "k8s-3", "alice"),  # labelled for someone else: not the namespace's user's
            job("dsportal-u-alice", "k8s-4", "alice"),
            job("dsportal-u-bench009", "k8s-5", "bench009")]  # not among this run's users
    assert leftover_jobs(jobs, CFG, ["bench001", "bench002"]) == [("dsportal-u-bench001", "k8s-1")]


def request_line(value: int, **labels: str) -> str:
    """One line of the API server's /metrics, its labels as it writes them (every one, sorted)."""
    every = {"code": "200", "component": "apiserver", "dry_run": "", "group": "", "resource": "", "scope": "",
             "subresource": "", "verb": "GET", "version": "v1", **labels}
    return "apiserver_request_total{" + ",".join(f'{k}="{v}"' for k, v in sorted(every.items())) + f"}} {value}"


METRICS = "\n".join([
    "# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, ...",
    "# TYPE apiserver_request_total counter",
    request_line(12, resource="nodes", scope="cluster", verb="LIST"),
    request_line(1, code="500", resource="nodes", scope="cluster", verb="LIST"),
    request_line(4, code="201", group="batch", resource="jobs", scope="resource", verb="POST"),
    request_line(3, resource="pods", scope="namespace", subresource="log"),
    request_line(7, component="", subresource="/readyz", version=""),
    'apiserver_request_duration_seconds_count{resource="nodes",verb="LIST"} 99'])


def test_request_counts_sum_every_code_by_verb_resource_and_scope():
    assert request_counts(METRICS) == {"LIST nodes (cluster)": 13, "POST jobs (resource)": 4,
                                       "GET pods/log (namespace)": 3, "GET /readyz": 7}


def test_the_snapshots_row_comes_first_then_the_busiest_requests():
    before = {"LIST nodes (cluster)": 10, "GET jobs (namespace)": 5, "PUT leases (namespace)": 100}
    after = {"LIST nodes (cluster)": 18, "GET jobs (namespace)": 505, "PUT leases (namespace)": 112,
             "DELETE jobs (namespace)": 20}
    ran = kube_ran({"squeue_calls": 0, "hub_calls": 3}, {"squeue_calls": 0, "hub_calls": 9}, before, after, busiest=2)
    assert list(ran.items()) == [(SNAPSHOT_ROW, 8), ("hub API requests (dashboard)", 6),
                                 ("GET jobs (namespace)", 500), ("DELETE jobs (namespace)", 20)]
    assert kube_ran({}, {}, {}, {})[SNAPSHOT_ROW] == 0  # no LIST of the nodes at all: 0, not missing


def proc(pid: int, ppid: int, comm: str, *argv: str, cgroup: str = "") -> Proc:
    return Proc(pid, ppid, comm, argv, cgroup)


def test_the_box_processes_are_named_the_hub_pods_by_its_uid():
    uid = "0b9c2a4e-1f2d-4c3b-9a8e-7d6c5b4a3f21"
    pod_cgroup = f"0::/kubepods/burstable/pod{uid}/abc123\n"
    procs = [proc(40, 1, "containerd", "/usr/bin/containerd", "--config", "x"),
             proc(41, 30, "containerd", "/usr/bin/containerd"), proc(42, 30, "kube-proxy", "kube-proxy"),
             proc(43, 31, "containerd", "/usr/bin/containerd"),
             proc(50, 45, "tini", "tini", "-g", "--", "jupyterhub", "-f", "c.py", cgroup=pod_cgroup),
             proc(51, 50, "jupyterhub", "/usr/bin/python3", "/usr/local/bin/jupyterhub", "-f", "c.py",
                  cgroup=pod_cgroup),
             proc(52, 51, "node", "node", "/usr/bin/configurable-http-proxy", "--ip", "", cgroup=pod_cgroup),
             proc(53, 51, "python3", "/usr/bin/python3", "-m", "portal.service", cgroup=pod_cgroup),
             proc(54, 51, "python3", "/usr/bin/python3", "-m", "portal.service",
                  cgroup=f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/x\n"),
             proc(60, 1, "python3", "-m", "portal.service")]  # the Slurm box's dashboard: no pod's
    services = {"etcd": 20, "kube-apiserver": 21, "kube-node1": 30, "kube-node2": 31, "ldap-relay": None}
    assert kube_labels(services, ["kube-node1", "kube-node2"], procs, uid) == {
        "etcd": 20, "kube-apiserver": 21, "kube-node1 kubelet": 30, "kube-node2 kubelet": 31,
        "kube-node1 containerd": 41, "kube-node1 kube-proxy": 42, "kube-node2 containerd": 43,
        "hub pod: hub": 51, "hub pod: proxy": 52, "hub pod: dashboard": 53}
    assert "hub pod: hub" not in kube_labels(services, ["kube-node1"], procs, "")  # no hub pod running
