"""Training jobs on Kubernetes, in the user's own namespace: a Horovod job as plain objects (a launcher Job and a
workers Job; setting k8s_jobs "plain", the default) or as an MPIJob (kubeflow.org/v2beta1; "mpijob").

The manifests are built by `portal.scheduler.kubernetes.manifests`; the pure readers (a Job or an MPIJob in, a state or
a record out), unit-tested without a cluster, are `portal.scheduler.kubernetes.records` (and the nodes', `nodes`);
the client and the user it acts for, `portal.scheduler.kubernetes.client`; here `KubernetesScheduler` makes the calls.
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
(chexnet.sweep status) as its termination message; a running pod's log names its task, trial and parameters, and
has a line per epoch (`portal.scheduler.kubernetes.records.pod_trials`).
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from portal.config import PortalConfig
from portal.errors import JobNotFound
from portal.metrics import RunMetrics, record_lines
from portal.mlflow_accounts import Account, run_tags
from portal.records.limits import JobLimits
from portal.records.record import CANCELLED, PENDING, JobRecord
from portal.records.spec import JobSpec, JobSpecError
from portal.records.sweep import FIELD as SWEEP_FIELD
from portal.records.sweep import SweepPlan, SweepView, sweep_view
from portal.scheduler.cluster import QueuedJob
from portal.scheduler.cluster import start_note as note_from_nodes
from portal.scheduler.errors import NoAccounting
from portal.scheduler.kubernetes.client import KubeUser, api_call, api_client, kube_user
from portal.scheduler.kubernetes.errors import KubernetesError
from portal.scheduler.kubernetes.jobs import create_owned, job_objects
from portal.scheduler.kubernetes.manifests import (
    DRY_RUN_NOTE,
    GROUP,
    KIND,
    LABEL_JOB,
    LABEL_ROLE,
    LABEL_USER,
    PLURAL,
    VERSION,
    job_labels,
    manifest_yaml,
    sweep_job_manifest,
)
from portal.scheduler.kubernetes.namespaces import ensure_namespace, namespace_exists
from portal.scheduler.kubernetes.nodes import node_pools
from portal.scheduler.kubernetes.records import (
    K8S_ID,
    PodTrials,
    _image_id,
    card_from_log,
    limits_for,
    log_metrics,
    mpijob_record,
    mpijob_state,
    plain_job_state,
    pod_holders,
    pod_queue,
    pod_trials,
    sweep_job_state,
)
from portal.scheduler.kubernetes.tracking import with_tracking
from portal.scheduler.snapshot import ClusterSnapshot
from portal.scheduler.usage import UsageReport

# The MPI operator's labels on the pods it makes (mpi-operator v2: training.kubeflow.org/*).
OPERATOR_JOB_LABEL, OPERATOR_ROLE_LABEL = "training.kubeflow.org/job-name", "training.kubeflow.org/job-role"
MAX_TRIAL_LOG_BYTES = 1024 * 1024  # a running trial's log, read for its task and epochs
LOG_TIMEOUT_S = 10
CARD_TAIL_LINES = 20  # the card is the script's last line but one or two


def new_k8s_id() -> str:
    """Sortable by time, random enough that two submits in one second differ, and a valid MPIJob name."""
    return f"k8s-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


class KubernetesScheduler:
    """Submit, watch, cancel and read training jobs (plain Jobs, or MPIJobs), always as the job's user
    (impersonated, or their own pod)."""

    name = "kubernetes"
    job_ids: ClassVar[re.Pattern[str]] = K8S_ID  # k8s-<date>-<time>-<random>: also a valid Job or MPIJob name

    def __init__(self, cfg: PortalConfig, client_for=api_client):
        self.cfg = cfg
        self._client_for = client_for
        self.plain = cfg.k8s_jobs == "plain"
        self.kind = "Job" if self.plain else "MPIJob"
        self.sweeps = self.plain  # a sweep is one Job of trial pods (portal.scheduler.kubernetes.manifests)

    def check_sweep(self, spec: JobSpec) -> None:
        """Each trial is one pod here: one node's GPUs."""
        if spec.nodes != 1:
            raise JobSpecError("nodes", f"{spec.nodes}: a sweep's trial on Kubernetes is one pod, on one node; "
                                        "allowed: 1 (use gpus_per_node for more GPUs per trial)")

    def _apis(self, user: KubeUser):
        """(custom objects, core, batch) clients, each answering plain dicts as the API server sends them."""
        from kubernetes import client

        api = self._client_for(self.cfg, user)
        return client.CustomObjectsApi(api), client.CoreV1Api(api), client.BatchV1Api(api)

    records_in_home = False  # each job's record is its launcher Job or MPIJob (`records`, `load`)
    queue_in_snapshot = False

    def person(self, user: str | None, groups: Sequence[str] | None) -> KubeUser:
        return kube_user(user, groups, self.cfg)

    def snapshot(self, clock: Callable[[], float] = time.monotonic) -> ClusterSnapshot:
        """The GPU pools (k8s_gpu_types) with their nodes and what is free on each (nodes.node_pools), and
        what holds or waits for GPUs in the users' namespaces: two calls as the portal, the nodes and the pods
        that have not ended. Each job's state still comes from its own objects. Where the portal may not list
        nodes (a cluster whose RBAC leaves that out), the pools have none: the start warning cannot tell."""
        asked_at = clock()
        _, core, _ = self._apis(self.person(None, None))
        pods = api_call("the users' pods", core.list_pod_for_all_namespaces,
                        field_selector="status.phase!=Succeeded,status.phase!=Failed").get("items", [])
        try:
            nodes = api_call("the nodes", core.list_node).get("items", [])
        except (KubernetesError, JobNotFound):
            nodes = []
        pools = node_pools(nodes, pods, self.cfg.k8s_gpu_node_label, self.cfg.k8s_gpu_types, self.cfg.namespace_user)
        queue = pod_queue(pods, self.cfg.namespace_user, datetime.now(UTC))
        return ClusterSnapshot(taken_at=clock(), partitions=pools, queue=queue, asked_at=asked_at)

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

    def model_card(self, record: JobRecord, user: KubeUser, task: int | None = None) -> dict | None:
        """The run's model card from the log of the pod that ran it (its script copies the card there at the
        end: the dashboard cannot open the user's volume), with the image's digest as the kubelet ran it. None
        before the run wrote one; ModelCardError when the line is not a card. A sweep's: its task's trial's."""
        if record.sweep is not None:
            # A card is written at a trial's end, so only an ended pod (its termination message names its task)
            # can have one: no running pod's log is read to find the task's pod.
            pods = self._pods(user, record.id)
            holder = pod_trials(record.sweep, pods, lambda name: "").holders.get(task) if task is not None else None
            pods = [p for p in pods if p["metadata"].get("name") == holder]
        else:
            pods = [p for p in self._pods(user, record.id, "launcher")
                    if (p.get("status") or {}).get("phase") == "Succeeded"]
        if not pods:
            return None
        pod = max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
        return card_from_log(self._pod_log(user, pod["metadata"]["name"], CARD_TAIL_LINES), record.id,
                             _image_id(pod))

    def history(self, record: JobRecord, user: KubeUser) -> list[str]:
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
        return dataclasses.replace(limits, quota=quota.with_submitted(held))

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

    def _pods(self, user: KubeUser, job_id: str, role: str | None = None) -> list[dict]:
        _, core, _ = self._apis(user)
        labels = {LABEL_JOB: job_id, **({LABEL_ROLE: role} if role else {})} if self.plain else \
            {OPERATOR_JOB_LABEL: job_id, **({OPERATOR_ROLE_LABEL: role} if role else {})}
        listed = api_call(f"the pods of job {job_id}", core.list_namespaced_pod,
                          self.cfg.user_namespace(user.name),
                          label_selector=",".join(f"{key}={value}" for key, value in labels.items()))
        return listed.get("items", [])

    def state(self, record: JobRecord, user: KubeUser) -> str:
        if record.user != user.name:  # another user's job is not found, as on every scheduler: not "CANCELLED"
            raise JobNotFound(f"job {record.id}: not found among {user.name}'s jobs")
        try:
            found = self._get(user, record.id)
            if record.sweep is not None:
                return sweep_job_state(found, self._pods(user, record.id))
            return plain_job_state(found, self._pods(user, record.id)) if self.plain else mpijob_state(found)
        except JobNotFound:
            return CANCELLED  # deleted: cancelling is the only way the portal deletes a job

    def _pod_log(self, user: KubeUser, name: str, tail: int | None = None) -> str:
        _, core, _ = self._apis(user)
        kwargs = {"tail_lines": tail} if tail else {"limit_bytes": MAX_TRIAL_LOG_BYTES}
        try:  # the API server asks the pod's kubelet, which may be on a node that just died
            return api_call(f"the log of pod {name}", core.read_namespaced_pod_log, name,
                            self.cfg.user_namespace(user.name), _request_timeout=LOG_TIMEOUT_S, **kwargs)
        except (KubernetesError, JobNotFound):
            return ""  # the container has not started yet, or its pod went meanwhile

    def _trials(self, record: JobRecord, user: KubeUser) -> PodTrials:
        assert record.sweep is not None
        return pod_trials(record.sweep, self._pods(user, record.id), lambda name: self._pod_log(user, name))

    def sweep(self, record: JobRecord, user: KubeUser) -> SweepView:
        """The sweep's trials, from its pods (pod_trials): what the study said at each ended pod's end, and what
        each running pod's log says."""
        assert record.sweep is not None
        found = self._trials(record, user)
        return sweep_view(record.sweep, found.trials, found.states, found.problem)

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

    def logs(self, record: JobRecord, user: KubeUser, tail: int | None = None, task: int | None = None) -> str:
        """The launcher pod's log (the latest launcher's); "" before it starts (or once its pod is gone). A sweep's:
        the log of the latest pod of task `task` (default 0)."""
        if record.sweep is not None:
            holder = self._trials(record, user).holders.get(task or 0)
            return self._pod_log(user, holder, tail) if holder else ""
        _, core, _ = self._apis(user)
        started = [p for p in self._pods(user, record.id, "launcher")
                   if (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")]
        if not started:
            return ""
        latest = max(started, key=lambda p: p["metadata"].get("creationTimestamp", ""))
        kwargs = {"tail_lines": tail} if tail else {}
        try:
            return api_call(f"the log of job {record.id}", core.read_namespaced_pod_log,
                            latest["metadata"]["name"], self.cfg.user_namespace(user.name), **kwargs)
        except (KubernetesError, JobNotFound):
            return ""  # the container has not started yet, or its pod went meanwhile

    def epochs(self, record: JobRecord, user: KubeUser, task: int | None = None) -> tuple[dict[int, dict], str]:
        """The per-epoch record's lines in the launcher's log (a sweep's: its task's pod's), schema-checked."""
        if record.sweep is not None and task is None:
            return {}, ""
        return record_lines(self.logs(record, user, None, task)), ""

    def metrics(self, record: JobRecord, user: KubeUser) -> RunMetrics:
        """From the TensorBoard files where this process can read them (a notebook in the user's pod), else
        from the launcher's log."""
        from portal.metrics import read_run_metrics

        if user.is_caller and record.logdir.is_dir():
            return read_run_metrics(record.logdir)
        return log_metrics(self.logs(record, user))

