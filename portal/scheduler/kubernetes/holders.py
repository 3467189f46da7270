"""What holds or waits for GPUs on Kubernetes, from the pods (pure, unit-tested without a cluster): each user's
holders for the quota (`pod_holders`), the queue the pages read (`pod_queue`, what squeue is on Slurm) and what
each holder holds on one node, with its pods' uids there, for the node's GPU reader (`node_holdings`). Whose a pod
is comes from its namespace, never from its labels (which a user's own Job template sets)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from portal.quota import GpuHolder
from portal.records.states import PENDING, RUNNING
from portal.scheduler.cluster import UNNAMED_JOB, NodeHolding, QueuedJob, duration_text, gpu_minutes_ahead
from portal.scheduler.kubernetes.manifests import (
    ANNOTATION_TIME_LIMIT,
    ANNOTATION_TRIALS,
    GPU_RESOURCE,
    LABEL_JOB,
    LABEL_ROLE,
)
from portal.scheduler.kubernetes.pods import POD_SERVER_NAME, scheduling_in_words


def _pod_gpus(pod: Mapping[str, Any]) -> int:
    return sum(int(((c.get("resources") or {}).get("requests") or {}).get(GPU_RESOURCE, 0))
               for c in (pod.get("spec") or {}).get("containers", []))


def _pod_ended(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _said(pod: Mapping[str, Any], annotation: str) -> int | None:
    """A whole number of at most 7 digits in one of the pod's annotations (which the user's namespace can write)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(annotation)
    if isinstance(value, str) and value.isascii() and value.isdecimal() and len(value) <= 7:
        return int(value)
    return None


def _limit_minutes(pod: Mapping[str, Any]) -> int | None:
    """A pod's time limit in minutes: its job's (ANNOTATION_TIME_LIMIT, on a job's pods), else its own deadline (a
    server's activeDeadlineSeconds, its wall time); None where it says neither as a whole number (the user's
    namespace writes pods: anything else in its place, or more than a year, charges nothing: gpu_minutes_ahead)."""
    said = _said(pod, ANNOTATION_TIME_LIMIT)
    if said is not None:
        return said
    seconds = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    if isinstance(seconds, int) and not isinstance(seconds, bool) and 0 < seconds < 2**40:
        return -(-seconds // 60)
    return None


def _gpu_groups(pods: Sequence[Mapping[str, Any]], user_of: Callable[[str], str | None],
                now: datetime | None = None) -> list[dict[str, Any]]:
    """The pods that hold or wait for GPUs and have not ended (as the ResourceQuota counts them), grouped: a job's
    pods together (by the job label), each other pod alone (the user's server). Groups never span namespaces: a
    job label is the user's to write, so two users' pods with the same one stay apart. `user_of`: whose a
    namespace is (None: no user's, left out). With `now`, each group's `ahead`: the GPU-minutes its pods may still
    hold (portal.scheduler.cluster.gpu_minutes_ahead)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        namespace = meta.get("namespace", "")
        user = user_of(namespace)
        gpus = _pod_gpus(pod)
        if user is None or not gpus or _pod_ended(pod):
            continue
        job = (meta.get("labels") or {}).get(LABEL_JOB)
        entry = found.setdefault((namespace, job or meta.get("name", "")), {
            "id": job or meta.get("name", ""), "namespace": namespace, "user": user, "server": not job, "gpus": 0,
            "pods": 0, "waiting": "", "pending": False, "started": None, "nodes": set(), "on": {}, "created": None,
            "pool": _pool_of(pod), "trials": [0, 0], "ahead": 0})
        entry["created"] = min(filter(None, (entry["created"], meta.get("creationTimestamp"))), default=None)
        entry["gpus"] += gpus
        entry["pods"] += 1
        trial = (meta.get("labels") or {}).get(LABEL_ROLE) == "trial"
        running = status.get("phase") == "Running"
        entry["trials"][not running] += trial
        if now is not None:
            started = timestamp(status.get("startTime") or "") if running else None
            entry["ahead"] += gpu_minutes_ahead(gpus, RUNNING if running else PENDING, _limit_minutes(pod),
                                                (now - started).total_seconds() if started else 0.0)
        if running:
            node = (pod.get("spec") or {}).get("nodeName", "")
            entry["nodes"].add(node)
            entry["on"].setdefault(node, []).append((gpus, str(meta.get("uid", ""))))
            entry["started"] = min(filter(None, (entry["started"], status.get("startTime"))), default=None)
        else:
            entry["pending"] = True
            unscheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"
                                and c.get("status") == "False"), None)
            if unscheduled and not entry["waiting"]:
                entry["waiting"] = scheduling_in_words(unscheduled.get("message", ""))[:300]
    return sorted(found.values(), key=lambda entry: (entry["id"], entry["server"]))


def pod_holders(pods: Sequence[Mapping[str, Any]]) -> tuple[GpuHolder, ...]:
    """What holds the user's GPUs, from the pods of their namespace: their server, and each job (its pods summed)."""
    return tuple(GpuHolder(job_id=entry["id"], gpus=entry["gpus"], server=entry["server"])
                 for entry in _gpu_groups(pods, lambda namespace: ""))


def pods_ahead(pods: Sequence[Mapping[str, Any]], now: datetime) -> int:
    """The GPU-minutes the user's jobs and servers may still hold, from every pod of their namespace: what its pods
    that hold or wait for GPUs may (their time limits, portal.scheduler.cluster.gpu_minutes_ahead), and each
    sweep's trials that have no pod yet (its Job makes at most `parallel` at once): its trials (ANNOTATION_TRIALS)
    less those done or under way (its trial pods but the failed ones, which the Job makes again), each a trial pod's
    GPUs x its time limit. What the weekly budget charges ahead."""
    ahead = sum(entry["ahead"] for entry in _gpu_groups(pods, lambda namespace: "", now))
    sweeps: dict[str, list[int]] = {}  # a sweep's id: [its trials, its trial pods made, a trial's GPU-minutes]
    for pod in pods:
        labels, trials = (pod.get("metadata") or {}).get("labels") or {}, _said(pod, ANNOTATION_TRIALS)
        if labels.get(LABEL_ROLE) != "trial" or trials is None:
            continue
        sweep = sweeps.setdefault(str(labels.get(LABEL_JOB)), [trials, 0, gpu_minutes_ahead(
            _pod_gpus(pod), PENDING, _limit_minutes(pod), 0.0)])
        sweep[1] += (pod.get("status") or {}).get("phase") != "Failed"
    return ahead + sum(max(0, trials - made) * each for trials, made, each in sweeps.values())


def pod_queue(pods: Sequence[Mapping[str, Any]], user_of: Callable[[str], str | None],
              now: datetime) -> dict[str, QueuedJob]:
    """What squeue is on Slurm, from the pods of the users' namespaces (`user_of`: whose a namespace is, None for
    one that is no user's): one entry per job (its pods together) and per server that holds or waits for GPUs,
    RUNNING once all its pods run, else PENDING with the scheduler's reason in words (its `reason_words` too; a
    reason in words is one about the nodes: `waits_for_resources`). The dashboard's usage panel reads each user's
    from it. Whose a pod is comes from its namespace, never from its labels (which a user's own Job template sets);
    a job id that two namespaces claim is keyed by namespace the second time. A sweep's trial pods are its entry's
    `trials_running` and `trials_waiting` (its Job makes at most `parallel` at once: the trials beyond them have no
    pod yet, and are not counted)."""
    queue = {}
    for key, entry in _keyed(_gpu_groups(pods, user_of, now)):
        started = timestamp(entry["started"]) if entry["started"] and not entry["pending"] else None
        queue[key] = QueuedJob(
            id=entry["id"], user=entry["user"], state=PENDING if entry["pending"] else RUNNING,
            elapsed=duration_text((now - started).total_seconds()) if started else "0:00", nodes=entry["pods"],
            gpus_per_node=entry["gpus"] // entry["pods"], reason=entry["waiting"],
            name=POD_SERVER_NAME if entry["server"] else UNNAMED_JOB,
            node_list=",".join(sorted(filter(None, entry["nodes"]))), gpus=entry["gpus"], server=entry["server"],
            reason_words=entry["waiting"].strip(), waits_for_resources=" " in entry["waiting"].strip(),
            submitted=_epoch(entry["created"]), partition=entry["pool"], trials_running=entry["trials"][0],
            trials_waiting=entry["trials"][1], gpu_minutes_ahead=entry["ahead"])
    return queue


def _pool_of(pod: Mapping[str, Any]) -> str:
    """The GPU node pool a pod asked for: its node selector's one value (the nodes' GPU type: "t4"); "" else."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    values = [v for v in selector.values() if isinstance(v, str)] if isinstance(selector, dict) else []
    return values[0][:63] if len(values) == 1 else ""


def _epoch(value: Any) -> int:
    """An RFC 3339 time of the API server's as epoch seconds; 0 when there is none."""
    when = timestamp(value) if isinstance(value, str) else None
    return int(when.timestamp()) if when is not None else 0


def timestamp(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _keyed(groups: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each group with its key in the queue: its id, or `<namespace>/<id>` for an id that a group before it took."""
    taken: set[str] = set()
    for entry in groups:
        key = entry["id"] if entry["id"] not in taken else f"{entry['namespace']}/{entry['id']}"
        taken.add(key)
        yield key, entry


def node_holdings(pods: Sequence[Mapping[str, Any]], user_of: Callable[[str], str | None],
                  node: str) -> dict[str, NodeHolding]:
    """The jobs and servers whose running pods hold GPUs on `node`, keyed as `pod_queue` keys them (so a reading
    names what the pages name), each with its GPUs there and those pods' uids (their cgroups on the node)."""
    holdings = {}
    for key, entry in _keyed(_gpu_groups(pods, user_of)):
        here = entry["on"].get(node) if node else None
        if here:
            holdings[key] = NodeHolding(entry["user"], sum(gpus for gpus, _ in here),
                                        tuple(uid for _, uid in here if uid))
    return holdings
