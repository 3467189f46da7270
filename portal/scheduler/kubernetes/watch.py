"""Which users' jobs changed, from one watch of the API server: the dashboard's rescans on Kubernetes.

On Slurm the dashboard lists a user's jobs again only when their ~/jobs changed (portal.service.scans: an lstat).
On Kubernetes a user's jobs are their namespace's Jobs (or MPIJobs), and listing them costs the API server a LIST:
one per page view of each user, 200 a second at 5,000 users (issue 43). `JobsWatch` keeps one watch, as the
portal, on the portal's jobs in every namespace (the label dsportal/user; list and watch on them are in the hub's
ClusterRole) and counts the changes per namespace; a user's stamp (`stamp`) is that count with the watch's epoch,
and the board lists their jobs (as them, impersonated: the API server still decides what they see) only when it
differs from the stamp taken before the last listing. The watch only says when to look, never what is there.

A watch that is not running (not started yet, the API server unreachable, RBAC without the watch) gives no
stamp (None): the board then lists every `rescan_s`, as before. Each restart of the watch (a 410 Gone, a dropped
connection) is a new epoch, so every stamp taken before it differs; events are counted from the list's
resourceVersion, so a change between the list and the watch is not missed.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from portal.config import PortalConfig
from portal.errors import BadAnswer
from portal.first_import import loaded
from portal.scheduler.kubernetes.client import api_client
from portal.scheduler.kubernetes.errors import KubernetesError
from portal.scheduler.kubernetes.manifests import GROUP, LABEL_USER, PLURAL, VERSION

log = logging.getLogger("portal.scheduler")
WATCH_TIMEOUT_S = 300  # the API server ends each watch after this; it is started again from where it was
RETRY_S = (1.0, 2.0, 5.0, 15.0, 60.0)  # after a failure, waits before the next try (the last one repeats)


@dataclass(frozen=True)
class WatchStamp:
    """A namespace's changes as the watch counted them, in one epoch of it."""

    epoch: int
    changes: int

    def same_as(self, later: WatchStamp | None) -> bool:
        return later is not None and later == self


class JobsWatch:
    """The watch's thread and its counts. `lister(resource_version, watch)` is the API server's LIST (or WATCH)
    of the portal's jobs in every namespace, answering the raw response (`_preload_content=False`)."""

    def __init__(self, lister: Callable[..., Any], name: str = "jobs"):
        self._lister, self.name = lister, name
        self._lock = threading.Lock()
        self._changes: dict[str, int] = {}
        self._epoch = 0
        self._running = False  # a listing succeeded and its watch has not failed since
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0

    def start(self) -> JobsWatch:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"portal-watch-{self.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def stamp(self, namespace: str) -> WatchStamp | None:
        """The namespace's stamp now; None while the watch is not running (the caller lists every time)."""
        with self._lock:
            return WatchStamp(self._epoch, self._changes.get(namespace, 0)) if self._running else None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._list()
                while not self._stop.is_set():
                    version = self._watch(version)
            except KubernetesError as err:  # no credentials: nothing to try again (a configuration's fault)
                with self._lock:
                    self._running = False
                log.warning("not watching the portal's %s: %s; the dashboard lists each user's jobs every rescan "
                            "interval", self.name, err)
                return
            except Exception as err:  # noqa: BLE001 (whatever ends the watch, the board lists as before)
                with self._lock:
                    self._running = False
                wait = RETRY_S[min(self.failures, len(RETRY_S) - 1)]
                self.failures += 1
                (log.warning if self.failures == 1 or self.failures % 100 == 0 else log.debug)(
                    "watching the portal's %s in every namespace failed (%s); the dashboard lists each user's jobs "
                    "every rescan interval meanwhile; trying again in %g s", self.name, describe(err), wait)
                self._stop.wait(wait)

    def _list(self) -> str:
        """A new epoch: the list's resourceVersion, from which the watch counts."""
        answer = json.loads(read_all(self._lister(resource_version=None, watch=False)))
        version = answer["metadata"]["resourceVersion"]
        with self._lock:
            self._epoch += 1
            self._changes.clear()
            self._running = True
        if self.failures:
            log.info("watching the portal's %s in every namespace again", self.name)
        self.failures = 0
        return version

    def _watch(self, version: str) -> str:
        """One watch from `version` until the API server ends it; the version to go on from. A 410 Gone (the
        version is too old) or any other error ends the epoch (raised)."""
        response = self._lister(resource_version=version, watch=True)
        try:
            for event in events(response):
                kind, found = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise WatchError(f"{found.get('code')} {found.get('reason')}: {found.get('message')}")
                metadata = found.get("metadata") or {}
                version = metadata.get("resourceVersion") or version
                if kind in ("ADDED", "MODIFIED", "DELETED") and metadata.get("namespace"):
                    with self._lock:
                        self._changes[metadata["namespace"]] = self._changes.get(metadata["namespace"], 0) + 1
        finally:
            response.close()
            response.release_conn()
        return version


class WatchError(BadAnswer, RuntimeError):
    """The API server ended the watch with an error event (a 410 Gone: listed again)."""


def events(response) -> Iterator[dict]:
    """The watch's events, one JSON object a line, as the API server streams them."""
    pending = b""
    for chunk in response.stream(amt=65536, decode_content=False):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)


def read_all(response) -> bytes:
    try:
        return response.data
    finally:
        response.release_conn()


def describe(err: BaseException) -> str:
    status = getattr(err, "status", None)
    return f"the API server answered {status} {getattr(err, 'reason', '')}".strip() if status else \
        f"{type(err).__name__}: {err}"


_watches: dict[tuple[str, str], JobsWatch] = {}
_watches_lock = threading.Lock()


def jobs_watch(cfg: PortalConfig) -> JobsWatch:
    """This process's watch of the portal's jobs (plain Jobs, or MPIJobs), started on first use."""
    plain = cfg.k8s_jobs == "plain"
    key = (cfg.k8s_kubeconfig, cfg.k8s_jobs)
    with _watches_lock:
        if key not in _watches:
            _watches[key] = JobsWatch(lister_for(cfg, plain), "Jobs" if plain else "MPIJobs").start()
        return _watches[key]


def lister_for(cfg: PortalConfig, plain: bool) -> Callable[..., Any]:
    """LIST or WATCH, as the portal, of the objects that carry the portal's user label in every namespace."""

    def lister(resource_version: str | None, watch: bool):
        loaded("kubernetes")
        from kubernetes import client

        api = api_client(cfg)
        query: dict[str, Any] = {"label_selector": LABEL_USER, "_preload_content": False}
        if watch:
            query.update(watch=True, resource_version=resource_version, timeout_seconds=WATCH_TIMEOUT_S,
                         allow_watch_bookmarks=True, _request_timeout=(10, WATCH_TIMEOUT_S + 30))
        else:  # only the list's resourceVersion is wanted: one item, not every job in the cluster
            query.update(limit=1, _request_timeout=60)
        if plain:
            return client.BatchV1Api(api).list_job_for_all_namespaces(**query)
        return client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL, **query)
    return lister
