"""Where a spawn's seconds go on the Kubernetes box: the server pod watched while it starts (bench.kube).

A watch on the user's namespace stamps, with the wall time the watch saw it, each of the pod's changes; its log's
own timestamps (the container runtime's, `read_namespaced_pod_log(timestamps=True)`) say when JupyterLab listened.
The stages, each from the end of the one before it:
  pod       request -> the pod exists (the spawner: form checks, the namespace's objects, the home claim, the pod)
  scheduled -> the scheduler bound it to a node
  running   -> its container runs (the kubelet: sandbox, volumes, the image's container; a postStart hook)
  listening -> JupyterLab listens (the server's own start)
  ready     -> the hub marks the server ready (the spawner sees the pod ready, the hub answers its progress)
  page      -> GET /user/<user>/lab answers 200
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from bench import timeline

STAGES = (
    ("pod", "request -> pod created (spawner: checks, namespace, claim)"),
    ("scheduled", "-> pod bound to a node (scheduler)"),
    ("running", "-> container running (kubelet, postStart hook)"),
    ("listening", "-> JupyterLab listening (the server's start)"),
    ("ready", "-> hub marks it ready"),
    ("page", "-> GET /user/alice/lab 200"),
)
LISTENING = "is running at"  # Jupyter Server's line once it listens
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d) ")


def log_time(line: str) -> float | None:
    """The wall time of a `timestamps=True` pod log line (RFC 3339, nanoseconds), None for any other line."""
    found = STAMP.match(line)
    if not found:
        return None
    whole, fraction, zone = found.groups()
    stamp = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    return stamp.timestamp() + (float(f"0.{fraction}") if fraction else 0.0)


def first_listening(log: str) -> float | None:
    return next((t for line in log.splitlines() if LISTENING in line and (t := log_time(line)) is not None), None)


def pod_changes(pod: Mapping[str, Any]) -> set[str]:
    """Which of 'pod', 'scheduled', 'running' a pod (as a dict, the API's field names) has reached."""
    reached = {"pod"}
    if pod.get("spec", {}).get("nodeName"):
        reached.add("scheduled")
    statuses = pod.get("status", {}).get("containerStatuses") or []
    if statuses and all((s.get("state") or {}).get("running") for s in statuses):
        reached.add("running")
    return reached


def stages(requested: float, seen: Mapping[str, float], listening: float | None, ready: float | None,
           page: float | None) -> dict[str, float | None]:
    """Seconds of each stage (None where a boundary is missing; 0 where one came before the one it follows)."""
    marks = {**seen, "listening": listening, "ready": ready, "page": page}
    return timeline.durations(requested, [(key, marks.get(key)) for key, _ in STAGES])


class PodWatcher:
    """Watches `namespace`'s pods with `label_selector` on a thread, stamping the first time each change of
    pod_changes was seen; `stop()` returns the stamps. `core`: a kubernetes.client.CoreV1Api."""

    def __init__(self, core: Any, namespace: str, label_selector: str, clock=None):
        import time

        from kubernetes import watch

        self._core, self._namespace, self._selector = core, namespace, label_selector
        self._clock = clock or time.time
        self._watch = watch.Watch()
        self.seen: dict[str, float] = {}
        self.pod_name: str | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-watcher", daemon=True)
        self._thread.start()
        self._ready.wait(10)  # the watch is open before the spawn is asked for

    def _events(self) -> Iterable[dict]:
        self._ready.set()
        return self._watch.stream(self._core.list_namespaced_pod, self._namespace,
                                  label_selector=self._selector, timeout_seconds=600)

    def _run(self) -> None:
        try:
            for event in self._events():
                pod = self._core.api_client.sanitize_for_serialization(event["object"])
                if event["type"] == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                    continue  # the last run's pod, on its way out
                self.pod_name = pod["metadata"]["name"]
                now = self._clock()
                for change in pod_changes(pod):
                    self.seen.setdefault(change, now)
        except Exception:  # noqa: BLE001 - the watch ended (stop() or the apiserver): what was seen stays
            self._ready.set()

    def listening(self) -> float | None:
        """When the pod's JupyterLab said it listened, from the pod's log (None before it has)."""
        if not self.pod_name:
            return None
        log = self._core.read_namespaced_pod_log(self.pod_name, self._namespace, timestamps=True,
                                                 _request_timeout=30)
        return first_listening(log)

    def stop(self) -> dict[str, float]:
        self._watch.stop()
        self._thread.join(timeout=5)
        return dict(self.seen)


def median_stages(runs: list[Mapping[str, float | None]]) -> dict[str, float | None]:
    return timeline.medians(runs, [key for key, _ in STAGES])


def table(columns: Mapping[str, Mapping[str, float | None]]) -> list[str]:
    return timeline.stage_table(columns, STAGES, "spawn stage, median (s)", 58, 9, 2)
