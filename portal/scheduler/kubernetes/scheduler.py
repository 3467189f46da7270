"""Training jobs on Kubernetes, in the user's own namespace: a Horovod job as plain objects (a launcher Job and a
workers Job; setting k8s_jobs "plain", the default) or as an MPIJob (kubeflow.org/v2beta1; "mpijob").

The manifests are built by `portal.scheduler.kubernetes.manifests`; the pure readers (a Job or an MPIJob in, a state or
a record out), unit-tested without a cluster, are `portal.scheduler.kubernetes.records` (and the nodes', `nodes`);
the client and the user it acts for, `portal.scheduler.kubernetes.client`; here `KubernetesScheduler` makes the calls
(what a job's pods say: `portal.scheduler.kubernetes.output`).
The dashboard (the hub's service account) acts for a user by impersonating `<k8s_user_prefix><name>`, so the API
server's RBAC (deploy/kubernetes/rbac.yaml) keeps each user to their namespace, as `runuser` + Slurm do on the
Slurm path. A notebook in the user's own pod uses that pod's service account, which is bound to the same role in
the same namespace.

The launcher Job (or the MPIJob) is the job's record: its name is the job id, its labels say whose it is, its
annotations carry the spec and the submit time. Cancelling deletes it, and with it what it owns (a deleted or
deleting one reads as CANCELLED). The launcher pod's log is the job's output (mpirun gathers every worker's); the
launcher also tees it to `~/jobs/<cluster>/<id>/output.log` on the user's home volume, beside the TensorBoard
logdir and the checkpoints.

A sweep is one Job whose pods are its trials (portal.scheduler.kubernetes.manifests.sweep_job_manifest). The dashboard
cannot open the study on the user's volume, so it reads each trial from its pod: a pod that ended leaves its trial's row
(programkit.sweep status) as its termination message; a running pod's log names its task, trial and parameters, and
has a line per epoch (`portal.scheduler.kubernetes.records.pod_trials`).
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from portal.config import PortalConfig
from portal.errors import JobNotFound
from portal.first_import import loaded
from portal.mlflow_accounts import Account, run_tags
from portal.records.launchers import launchers
from portal.records.limits import JobLimits
from portal.records.record import CANCELLED, PENDING, JobRecord
from portal.records.spec import JobSpec, JobSpecError
from portal.records.sweep import FIELD as SWEEP_FIELD
from portal.records.sweep import SweepPlan
from portal.records.templating import program_of
from portal.scheduler.cluster import NodeHolding, QueuedJob
from portal.scheduler.cluster import start_note as note_from_nodes
from portal.scheduler.errors import NoAccounting
from portal.scheduler.kubernetes.client import KubeUser, api_call, api_client, kube_user
from portal.scheduler.kubernetes.errors import KubernetesError
from portal.scheduler.kubernetes.holders import node_holdings, pod_holders, pod_queue, pods_ahead
from portal.scheduler.kubernetes.jobs import create_owned, job_objects
from portal.scheduler.kubernetes.manifests import (
    DRY_RUN_NOTE,
    GROUP,
    KIND,
    LABEL_USER,
    PLURAL,
    VERSION,
    job_labels,
    manifest_yaml,
    sweep_job_manifest,
)
from portal.scheduler.kubernetes.namespaces import ensure_namespace, namespace_exists
from portal.scheduler.kubernetes.nodes import node_pools
from portal.scheduler.kubernetes.output import PodOutput
from portal.scheduler.kubernetes.records import (
    K8S_ID,
    limits_for,
    mpijob_record,
    mpijob_state,
    plain_job_state,
    sweep_job_state,
)
from portal.scheduler.kubernetes.tracking import with_tracking
from portal.scheduler.kubernetes.watch import WatchStamp, jobs_watch
from portal.scheduler.snapshot import ClusterSnapshot
from portal.scheduler.usage import UsageReport


def new_k8s_id() -> str:
    """Sortable by time, random enough that two submits in one second differ, and a valid MPIJob name."""
    return f"k8s-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


class KubernetesScheduler(PodOutput):
    """Submit, watch, cancel and read training jobs (plain Jobs, or MPIJobs), always as the job's user
    (impersonated, or their own pod). What a job's pods say is read by `PodOutput` (output.py)."""

    name = "kubernetes"
    job_ids: ClassVar[re.Pattern[str]] = K8S_ID  # k8s-<date>-<time>-<random>: also a valid Job or MPIJob name

    def __init__(self, cfg: PortalConfig, client_for=api_client):
        self.cfg = cfg
        self._client_for = client_for
        self.plain = cfg.k8s_jobs == "plain"
        self.kind = "Job" if self.plain else "MPIJob"
        self.sweeps = self.plain  # a sweep is one Job of trial pods (portal.scheduler.kubernetes.manifests)

    def check_sweep(self, spec: JobSpec) -> None:
        """Each trial is one pod here: one node's GPUs, started by its launcher's trial script."""
        launcher = program_of(spec).launcher
        if not launchers().get(launcher).has("k8s-trial.sh"):
            raise JobSpecError("sweep", f"{spec.template}'s launcher ({launcher}) has no trial script for Kubernetes "
                                        "(k8s-trial.sh); allowed: single runs")
        if spec.nodes != 1:
            raise JobSpecError("nodes", f"{spec.nodes}: a sweep's trial on Kubernetes is one pod, on one node; "
                                        "allowed: 1 (use gpus_per_node for more GPUs per trial)")

    def _apis(self, user: KubeUser):
        """(custom objects, core, batch) clients, each answering plain dicts as the API server sends them."""
        loaded("kubernetes")
        from kubernetes import client

        api = self._client_for(self.cfg, user)
        return client.CustomObjectsApi(api), client.CoreV1Api(api), client.BatchV1Api(api)

    records_in_home = False  # each job's record is its launcher Job or MPIJob (`records`, `load`)
    queue_in_snapshot = False
    state_files: tuple[tuple[str, int], ...] = ()  # a job's state is its Job's or MPIJob's

    def person(self, user: str | None, groups: Sequence[str] | None) -> KubeUser:
        return kube_user(user, groups, self.cfg)

    def snapshot(self, clock: Callable[[], float] = time.monotonic) -> ClusterSnapshot:
        """The GPU pools (k8s_gpu_types) with their nodes and what is free on each (nodes.node_pools), and
        what holds or waits for GPUs in the users' namespaces: two calls as the portal, the nodes and the pods
        that have not ended. Each job's state still comes from its own objects. Where the portal may not list
        nodes (a cluster whose RBAC leaves that out), the pools have none: the start warning cannot tell."""
        asked_at = clock()
        core, pods = self._live_pods()
        try:
            nodes = api_call("the nodes", core.list_node).get("items", [])
        except (KubernetesError, JobNotFound):
            nodes = []
        pools = node_pools(nodes, pods, self.cfg.k8s_gpu_node_label, self.cfg.k8s_gpu_types, self.cfg.namespace_user)
        queue = pod_queue(pods, self.cfg.namespace_user, datetime.now(UTC))
        return ClusterSnapshot(taken_at=clock(), partitions=pools, queue=queue, asked_at=asked_at)

    def gpu_holders(self, node: str) -> dict[str, NodeHolding]:
        """As the snapshot keys them, from the same list of the pods that have not ended, asked as the portal."""
        return node_holdings(self._live_pods()[1], self.cfg.namespace_user, node)

    def _live_pods(self) -> tuple[Any, list[dict[str, Any]]]:
        """The portal's core API, and every pod of the cluster that has not ended, asked as the portal."""
        _, core, _ = self._apis(self.person(None, None))
        return core, api_call("the users' pods", core.list_pod_for_all_namespaces,
                              field_selector="status.phase!=Succeeded,status.phase!=Failed").get("items", [])

    def queued(self, snapshot: ClusterSnapshot, record: JobRecord) -> None:
        return None  # each job's state is its objects' (the snapshot's queue is what holds GPUs, for the usage)

    def waiting(self, snapshot: ClusterSnapshot, record: JobRecord) -> QueuedJob | None:
        """The job's pods that wait, with the scheduler's FailedScheduling message in words (pod_queue)."""
        found = snapshot.queue.get(record.id)
        return found if found is not None and found.user == record.user and found.state == PENDING else None

    def start_note(self, spec: JobSpec, user: str, snapshot: ClusterSnapshot) -> str:
        """Why a job of `spec` just submitted will wait, from its pool's nodes in `snapshot` (their allocatable
        less their pods' requests, taken before the submit), in the words Slurm's warning has; "" when it can
        start now, or when the snapshot has no nodes to tell."""
        pool = next((p for p in snapshot.partitions if p.name == limits_for(self.cfg, ()).partition), None)
        if pool is None or not pool.nodes:
            return ""
        mine = [job for job in snapshot.queue.values() if job.user == user]
        return note_from_nodes(spec.nodes, spec.gpus_per_node, spec.workers_per_node * spec.cpus_per_task,
                               spec.memory_gb, pool, mine)

    def history(self, record: JobRecord, user: KubeUser) -> list[str]:
        record.check_owner(user.name)
        return []  # a lost worker is replaced by its Job, and the launcher resumes: one run, no requeue

    def usage(self, user: KubeUser, everyone: bool, now: datetime) -> UsageReport:
        raise NoAccounting("usage: GPU-hours come from Slurm's accounting; this portal runs jobs on Kubernetes")

    def limits(self, user: KubeUser, snapshot: ClusterSnapshot | None = None,
               held: Sequence[tuple[str, int]] = ()) -> JobLimits:
        """The pool's nodes (`snapshot`'s, else asked now: limits_for), and the user's quota with what their pods
        hold now: the portal refuses what the namespace's ResourceQuota would, with the same arithmetic as on Slurm."""
        _, core, _ = self._apis(user)
        pods = self._in_namespace(user, f"the pods of {user.name}", core.list_namespaced_pod,
                                  self.cfg.user_namespace(user.name)) or {}
        limits = limits_for(self.cfg, user.groups, pools=lambda: (snapshot or self.snapshot()).partitions)
        quota = self.cfg.user_gpu_quota(user.groups, pod_holders(pods.get("items", [])))
        return dataclasses.replace(limits, quota=quota.with_submitted(held),
                                   gpu_minutes_ahead=pods_ahead(pods.get("items", []), datetime.now(UTC)))

    def configured_limits(self, user: KubeUser) -> JobLimits:
        """The pool's configured shape (k8s_max_nodes, k8s_node_gpus, ...) and the group quota, without the pods
        that hold it now: a dry run needs no API server."""
        return limits_for(self.cfg, user.groups)

    def render(self, spec: JobSpec, user: KubeUser, partition: str = "", plan: SweepPlan | None = None) -> str:
        """The objects a submit would create, as YAML, made without the API server (a dry run)."""
        if plan is not None:
            return DRY_RUN_NOTE + manifest_yaml(sweep_job_manifest(
                spec, plan, "k8s-<date>-<time>-<random>", user.name, self.cfg, partition, submitted_at="<submit time>"))
        made = "<made at submit>"
        objects = job_objects(self.cfg, spec, "k8s-<date>-<time>-<random>", user.name, partition, plain=self.plain,
                              submitted_at="<submit time>", keys=(made, made))
        return DRY_RUN_NOTE + "---\n".join(manifest_yaml(manifest) for manifest in objects)

    def ensure_namespace(self, user: KubeUser) -> None:
        """Make the user's namespace theirs (namespaces.ensure_namespace), as the portal itself."""
        ensure_namespace(self.cfg, self._client_for(self.cfg, None), user)

    def _in_namespace(self, user: KubeUser, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A call in the user's namespace, as them; None when they have no namespace yet (a user who never
        started a server or submitted: the API server refuses them there, 403, as it would anyone)."""
        try:
            return api_call(what, fn, *args, **kwargs)
        except KubernetesError as err:
            if err.status != 403:
                raise
            try:  # asked as the portal; a caller that may not read namespaces (a user's pod) keeps the refusal
                exists = namespace_exists(self._client_for(self.cfg, None), self.cfg, user)
            except KubernetesError:
                raise err from None
            if exists:
                raise
            return None

    def submit(self, spec: JobSpec, user: KubeUser, partition: str = "", plan: SweepPlan | None = None,
               tracking: Account | None = None) -> tuple[JobRecord, None]:
        """Create the job's objects; (its record, None: the record is the launcher Job or the MPIJob, there is
        no directory). Its NetworkPolicy (a plain job's Secret and workers too, and with `tracking` its MLflow
        Secret: kubernetes.tracking) is made after the record, owned by it; when one cannot be made, the record is
        deleted again, so nothing is left half-made. A sweep is one Job."""
        if not user.is_caller:
            self.ensure_namespace(user)
        custom, core, batch = self._apis(user)
        namespace = self.cfg.user_namespace(user.name)
        job_id = new_k8s_id()
        if plan is not None and not self.plain:
            raise JobSpecError(SWEEP_FIELD, "sweeps run as plain Jobs; this portal runs MPIJobs (k8s_jobs)")
        record, *owned = [sweep_job_manifest(spec, plan, job_id, user.name, self.cfg, partition)] if plan else \
            job_objects(self.cfg, spec, job_id, user.name, partition, plain=self.plain)
        if tracking is not None:
            tags = run_tags(user.name, job_id, self.name, spec.template, self.cfg.cluster_name)
            owned.append(with_tracking([record, *owned], tracking, tags, namespace, job_labels(user.name, job_id),
                                       job_id))
        if record["kind"] == KIND:
            created = api_call(f"creating an MPIJob in {namespace}", custom.create_namespaced_custom_object,
                               GROUP, VERSION, namespace, PLURAL, record)
        else:
            created = api_call(f"creating a Job in {namespace}", batch.create_namespaced_job, namespace, record)
        try:
            create_owned(core, namespace, owned, created)
        except (KubernetesError, JobNotFound):
            self._delete(user, job_id)
            raise
        return mpijob_record(created, self.cfg), None

    def _get(self, user: KubeUser, job_id: str) -> dict:
        if not K8S_ID.match(job_id):
            raise JobNotFound(f"job {job_id}: not found among {user.name}'s jobs")
        custom, _, batch = self._apis(user)
        namespace = self.cfg.user_namespace(user.name)
        try:  # a user without a namespace (never spawned nor submitted) has no job: None
            if self.plain:
                found = self._in_namespace(user, f"job {job_id}", batch.read_namespaced_job, job_id, namespace)
            else:
                found = self._in_namespace(user, f"job {job_id}", custom.get_namespaced_custom_object, GROUP,
                                           VERSION, namespace, PLURAL, job_id)
        except JobNotFound:
            found = None
        if not found or (found.get("metadata", {}).get("labels") or {}).get(LABEL_USER) != user.name:
            raise JobNotFound(f"job {job_id}: not found among {user.name}'s jobs")
        return found

    def load(self, user: KubeUser, job_id: str) -> JobRecord:
        return mpijob_record(self._get(user, job_id), self.cfg)

    def records(self, user: KubeUser) -> list[JobRecord]:
        custom, _, batch = self._apis(user)
        namespace = self.cfg.user_namespace(user.name)
        selector = f"{LABEL_USER}={user.name}"
        if self.plain:
            listed = self._in_namespace(user, f"listing Jobs in {namespace}", batch.list_namespaced_job, namespace,
                                        label_selector=selector)
        else:
            listed = self._in_namespace(user, f"listing MPIJobs in {namespace}", custom.list_namespaced_custom_object,
                                        GROUP, VERSION, namespace, PLURAL, label_selector=selector)
        found = []
        for item in (listed or {}).get("items", []):
            try:
                found.append(mpijob_record(item, self.cfg))
            except (ValueError, KeyError, TypeError):
                continue  # not a job's record: a plain job's workers Job, or an object that is not the portal's
        return found

    def records_stamp(self, user_name: str) -> WatchStamp | None:
        """The count of changes to the jobs in the user's namespace that this process's one watch of the API server
        saw (portal.scheduler.kubernetes.watch: started by the first call); None while it is not running."""
        return jobs_watch(self.cfg).stamp(self.cfg.user_namespace(user_name))

    def state(self, record: JobRecord, user: KubeUser) -> str:
        record.check_owner(user.name)  # another user's job is not found, as on every scheduler: not "CANCELLED"
        try:
            found = self._get(user, record.id)
            if record.sweep is not None:
                return sweep_job_state(found, self._pods(user, record.id))
            return plain_job_state(found, self._pods(user, record.id)) if self.plain else mpijob_state(found)
        except JobNotFound:
            return CANCELLED  # deleted: cancelling is the only way the portal deletes a job

    def cancel(self, record: JobRecord, user: KubeUser) -> None:
        self._get(user, record.id)
        self._delete(user, record.id)

    def _delete(self, user: KubeUser, job_id: str) -> None:
        """Delete the job's top object; its pods and what it owns go with it (Foreground: the garbage collector
        deletes them before the object itself)."""
        custom, _, batch = self._apis(user)
        namespace = self.cfg.user_namespace(user.name)
        if self.plain:
            api_call(f"deleting job {job_id}", batch.delete_namespaced_job, job_id, namespace,
                     propagation_policy="Foreground")
        else:
            api_call(f"deleting job {job_id}", custom.delete_namespaced_custom_object, GROUP, VERSION,
                     namespace, PLURAL, job_id, propagation_policy="Foreground")


if TYPE_CHECKING:  # against the contract, with its own person (checked by `make lint`)
    from portal.scheduler.protocol import KeepsRecords

    def _conforms(kube: KubernetesScheduler) -> KeepsRecords[KubeUser]:
        return kube
