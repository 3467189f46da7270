"""What a Kubernetes pod's status says, in words: why it cannot start (so a spawn fails at once with the reason,
instead of waiting out its timeout as KubeSpawner does on a missing image: kubespawner#795), and what the
scheduler's "0/2 nodes are available: ..." means. Pure functions over the pod as the API returns it (a dict).
"""

from __future__ import annotations

import re

POD_SERVER_NAME = "JupyterLab server"  # what the dashboard calls a pod that runs a user's server (pod_queue)
# A container waiting for one of these will not start by itself: the spawn fails with the words.
CANNOT_START = {
    "ErrImagePull": "its image {image} cannot be pulled (no node has it and no registry serves it)",
    "ImagePullBackOff": "its image {image} cannot be pulled (no node has it and no registry serves it)",
    "ErrImageNeverPull": "its image {image} is not on the node, and the pull policy is Never",
    "InvalidImageName": "its image name {image} is not valid",
    "CreateContainerConfigError": "its container cannot be set up",
    "CreateContainerError": "its container cannot be created",
    "RunContainerError": "its container cannot be run",
    "CrashLoopBackOff": "it keeps exiting at start",
}
# The scheduler's reasons, one per phrase of its FailedScheduling message.
NODE_REASONS = (
    (re.compile(r"Insufficient nvidia\.com/gpu"), "with too few free GPUs"),
    (re.compile(r"Insufficient cpu"), "with too few free CPUs"),
    (re.compile(r"Insufficient memory"), "with too little free memory"),
    (re.compile(r"didn't match (node selector|Pod's node affinity)"), "not of the GPU type asked for"),
    (re.compile(r"didn't match pod anti-affinity rules"), "holding another of the job's node pods"),
    (re.compile(r"had taint \{node\.kubernetes\.io/(unreachable|not-ready)"), "not ready"),
    (re.compile(r"had taint"), "reserved for other work (tainted)"),
    (re.compile(r"unbound immediate PersistentVolumeClaims"), "waiting for its volume claims to be bound"),
    (re.compile(r"Too many pods"), "full (too many pods)"),
)
COUNTED = re.compile(r"^\s*(\d+) (.*)$")
# Reasons that pass by themselves (a claim being bound, a node restarting): a pod held by one still starts.
PASSING = re.compile(r"unbound immediate PersistentVolumeClaims|node\.kubernetes\.io/(not-ready|unreachable)")


def scheduling_in_words(message: str) -> str:
    """ "0/2 nodes are available: 2 Insufficient nvidia.com/gpu." -> "none of the 2 nodes can run it now: 2 with
    too few free GPUs". A message of another shape is returned as it is."""
    found = re.match(r"\s*0/(\d+) nodes are available:?(.*)", message or "")
    if not found:
        return (message or "").strip()
    total, rest = int(found.group(1)), found.group(2).strip().rstrip(".")
    parts = []
    for phrase in filter(None, (p.strip() for p in rest.split(","))):
        counted = COUNTED.match(phrase)
        count, what = (counted.group(1), counted.group(2)) if counted else ("", phrase)
        words = next((w for pattern, w in NODE_REASONS if pattern.search(what)), what)
        parts.append(f"{count} {words}".strip())
    if total == 0:
        return "there are no nodes"
    return f"none of the {total} nodes can run it now" + (f": {'; '.join(parts)}" if parts else "")


def cannot_start(pod: dict | None) -> str | None:
    """Why this pod will not start without a change (its image, its container, no node that can hold it, or it
    ended), or None while it may still start (also while a node is not ready or its claims are being bound)."""
    if not pod:
        return None
    status = pod.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        return f"it ended before it was ready ({_ended(status)})"
    images = {c["name"]: c.get("image", "?") for c in (pod.get("spec") or {}).get("containers", [])}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in CANNOT_START:
            words = CANNOT_START[reason].format(image=images.get(container.get("name"), container.get("image")))
            detail = (waiting.get("message") or "").strip()
            return f"{words}" + (f": {detail[:300]}" if detail and reason != "CrashLoopBackOff" else "")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            message = condition.get("message", "")
            return None if PASSING.search(message) else scheduling_in_words(message)
    return None


def _ended(status: dict) -> str:
    for container in status.get("containerStatuses") or []:
        done = (container.get("state") or {}).get("terminated")
        if done:
            return f"exit code {done.get('exitCode')}" + (f", {done['reason']}" if done.get("reason") else "")
    return status.get("reason") or status.get("message") or status.get("phase", "")


ASSIGNED = re.compile(r"assigned \S+ to (\S+)")


def event_in_words(event: dict) -> str:
    """One of the pod's events, as the spawn's progress page shows it."""
    reason, message = event.get("reason", ""), (event.get("message") or "").strip()
    if reason == "Scheduled":
        node = ASSIGNED.search(message)
        return f"Placed on node {node.group(1)}" if node else "Placed on a node"
    if reason == "FailedScheduling":
        return f"Waiting for a node: {scheduling_in_words(message)}"
    if reason == "Pulling":
        return "Fetching the image"
    if reason == "Pulled":
        return "The image is on the node"
    if reason == "Created":
        return "Container created"
    if reason == "Started":
        return "Container started: JupyterLab is starting"
    if reason == "Killing":
        return "Stopping"
    return message or reason
