"""Training jobs on Kubernetes, in the user's own namespace: a Horovod job as plain objects (a launcher Job and a
workers Job; setting k8s_jobs "plain", the default) or as an MPIJob (kubeflow.org/v2beta1; "mpijob").

The manifests are built by `portal.jobs.k8s_manifests`; here the pure readers first (a Job or an MPIJob in, a
state or a record out), unit-tested without a cluster; `KubernetesScheduler` then makes the calls with the
`kubernetes` client. The dashboard (the hub's service account) acts for a user by impersonating
`<k8s_user_prefix><name>`, so the API server's RBAC (deploy/kubernetes/rbac.yaml) keeps each user to their
namespace, as `runuser` + Slurm do on the Slurm path. A notebook in the user's own pod uses that pod's service
account, which is bound to the same role in the same namespace.

The launcher Job (or the MPIJob) is the job's record: its name is the job id, its labels say whose it is, its
annotations carry the spec and the submit time. Cancelling deletes it, and with it what it owns (a deleted or
deleting one reads as CANCELLED). The launcher pod's log is the job's output (mpirun gathers every worker's); the
launcher also tees it to `~/jobs/<cluster>/<id>/output.log` on the user's home volume, beside the TensorBoard
logdir and the checkpoints.

A sweep is one Job whose pods are its trials (portal.jobs.k8s_manifests.sweep_job_manifest). The dashboard cannot
open the study on the user's volume, so it reads each trial from its pod: a pod that ended leaves its trial's row
(chexnet.sweep status) as its termination message; a running pod's log names its task, trial and parameters, and
has a line per epoch.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import posixpath
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from portal.config import PortalConfig
from portal.config_checks import CLUSTER_NAME
from portal.jobs.k8s_manifests import (
    ANNOTATION_CLUSTER,
    ANNOTATION_SPEC,
    ANNOTATION_SUBMITTED,
    ANNOTATION_SWEEP,
    GPU_RESOURCE,
    GROUP,
    LABEL_JOB,
    LABEL_ROLE,
    LABEL_USER,
    MODEL_CARD_LINE,
    PLURAL,
    VERSION,
    home_claim_manifest,
    manifest_yaml,
    mpijob_manifest,
    owned_by,
    plain_job_objects,
    sweep_job_manifest,
    user_namespace_manifest,
    user_namespace_objects,
    user_principal,
)
from portal.jobs.record import (
    CANCELLED,
    COMPLETED,
    FAILED,
    MAX_RECORD_BYTES,
    PENDING,
    RUNNING,
    TIMEOUT,
    JobRecord,
    RecordError,
    cluster_jobs_dir,
    old_jobs_dir,
    recorded_spec,
)
from portal.jobs.spec import JobLimits, JobSpec, JobSpecError
from portal.jobs.sweep import FIELD as SWEEP_FIELD
from portal.jobs.sweep import SweepPlan, SweepStatusError, SweepView, read_status, recorded_plan, sweep_view
from portal.metrics import MAX_SERIES, RunMetrics
from portal.scheduler import NoAccounting
from portal.scheduler.errors import JobNotFound, KubernetesError, kubernetes_failure
from portal.scheduler.home import checked_card
from portal.scheduler.pods import POD_SERVER_NAME, scheduling_in_words
from portal.scheduler.quota import GpuHolder, GpuQuota
from portal.scheduler.snapshot import ClusterSnapshot
from portal.slurm import SlurmPartition
from portal.slurm_json import QueuedJob, slurm_duration
from portal.usage import UsageReport

# The MPI operator's labels on the pods it makes (mpi-operator v2: training.kubeflow.org/*).
OPERATOR_JOB_LABEL, OPERATOR_ROLE_LABEL = "training.kubeflow.org/job-name", "training.kubeflow.org/job-role"
K8S_ID = re.compile(r"^k8s-[0-9]{8}-[0-9]{6}-[0-9a-f]{6}\Z")  # also a valid MPIJob name (a DNS-1123 label)
NUMBER = r"[0-9]{1,12}(?:\.[0-9]{1,20})?(?![0-9.])"  # what float() takes: a line with "1.2.3" is not read
EPOCH_LINE = re.compile(rf"chexnet\.train: epoch ([0-9]{{1,7}})/[0-9]+: .*?auroc/mean=({NUMBER}|n/a)"
                        rf".*?images/sec=({NUMBER}|n/a)")
# A trial pod's log (chexnet.k8s-trial.sh): its task and trial, then the trial's parameters (trial.json).
TRIAL_LINE = re.compile(r"^chexnet: sweep task ([0-9]{1,6}) is trial ([0-9]{1,6}), on pod ", re.MULTILINE)
PARAMS_LINE = re.compile(r"^chexnet: trial parameters (\{[^\n]{0,2000}\})$", re.MULTILINE)
MAX_TRIAL_LOG_BYTES = 1024 * 1024  # a running trial's log, read for its task and epochs
LOG_TIMEOUT_S = 10
CARD_TAIL_LINES = 20  # the card is the script's last line but one or two
IMAGE_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")


def new_k8s_id() -> str:
    """Sortable by time, random enough that two submits in one second differ, and a valid MPIJob name."""
    return f"k8s-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class KubeUser:
    """A user as the Kubernetes path knows them: a name, their groups (from LDAP, via the hub), the home their
    pods mount, and whether this process is theirs (a notebook in their pod) or acts for them (the dashboard)."""

    name: str
    groups: tuple[str, ...]
    home: Path
    data_root: Path
    is_caller: bool

    def can_read_dir(self, path: str) -> bool:
        """A job's data_dir: the data set volume or the user's home, as mounted in every job pod."""
        normal = posixpath.normpath(path)
        return path.startswith("/") and ".." not in path.split("/") and any(
            normal == str(root) or normal.startswith(f"{root}/") for root in (self.data_root, self.home))


def kube_user(user: str | None, groups: Sequence[str] | None, cfg: PortalConfig) -> KubeUser:
    """`user` when acting for them (the dashboard), else the caller: the notebook's own user (JUPYTERHUB_USER,
    with the groups the spawner put in DSPORTAL_GROUPS), or whoever runs this with their own credentials."""
    own = os.environ.get("JUPYTERHUB_USER") or getpass.getuser()
    is_caller = user is None or user == own
    if groups is None:
        groups = os.environ.get("DSPORTAL_GROUPS", "").split(",") if is_caller else ()
    return KubeUser(name=user or own, groups=tuple(sorted({g.strip() for g in groups if g.strip()})),
                    home=Path(cfg.k8s_home_mount), data_root=Path(cfg.k8s_data_mount), is_caller=is_caller)


# --- pure: limits and readers ---

def limits_for(cfg: PortalConfig, groups: Sequence[str], partition: str = "") -> JobLimits:
    """What a user may ask of one GPU type's node pool (no nodes are read: the pool's shape is configured)."""
    gpu_type = partition or (cfg.jobs_partition if cfg.jobs_partition in cfg.k8s_gpu_types else cfg.k8s_gpu_types[0])
    return JobLimits(partition=gpu_type, nodes=cfg.k8s_max_nodes, gpus_per_node=cfg.k8s_node_gpus,
                     cpus_per_node=cfg.k8s_node_cpus, memory_gb_per_node=cfg.k8s_node_memory_gb, max_minutes=None,
                     quota=GpuQuota(cfg.gpu_quota_for(list(groups)), tuple(groups)),
                     default_data_dir=posixpath.join(cfg.k8s_data_mount, "chestxray14-tfrecords"))


def _pod_gpus(pod: Mapping[str, Any]) -> int:
    return sum(int(((c.get("resources") or {}).get("requests") or {}).get(GPU_RESOURCE, 0))
               for c in (pod.get("spec") or {}).get("containers", []))


def _pod_ended(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _gpu_groups(pods: Sequence[Mapping[str, Any]], user_of: Callable[[str], str | None]) -> list[dict[str, Any]]:
    """The pods that hold or wait for GPUs and have not ended (as the ResourceQuota counts them), grouped: a job's
    pods together (by the job label), each other pod alone (the user's server). Groups never span namespaces: a
    job label is the user's to write, so two users' pods with the same one stay apart. `user_of`: whose a
    namespace is (None: no user's, left out)."""
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
            "pods": 0, "waiting": "", "pending": False, "started": None, "nodes": set()})
        entry["gpus"] += gpus
        entry["pods"] += 1
        if status.get("phase") == "Running":
            entry["nodes"].add((pod.get("spec") or {}).get("nodeName", ""))
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


def pod_queue(pods: Sequence[Mapping[str, Any]], user_of: Callable[[str], str | None],
              now: datetime) -> dict[str, QueuedJob]:
    """What squeue is on Slurm, from the pods of the users' namespaces (`user_of`: whose a namespace is, None for
    one that is no user's): one entry per job (its pods together) and per server that holds or waits for GPUs,
    RUNNING once all its pods run, else PENDING with the scheduler's reason in words. The dashboard's usage panel
    reads each user's from it. Whose a pod is comes from its namespace, never from its labels (which a user's own
    Job template sets); a job id that two namespaces claim is keyed by namespace the second time."""
    queue = {}
    for entry in _gpu_groups(pods, user_of):
        started = _timestamp(entry["started"]) if entry["started"] and not entry["pending"] else None
        key = entry["id"] if entry["id"] not in queue else f"{entry['namespace']}/{entry['id']}"
        queue[key] = QueuedJob(
            id=entry["id"], user=entry["user"], state=PENDING if entry["pending"] else RUNNING,
            elapsed=slurm_duration((now - started).total_seconds()) if started else "0:00", nodes=entry["pods"],
            gpus_per_node=entry["gpus"] // entry["pods"], reason=entry["waiting"],
            name=POD_SERVER_NAME if entry["server"] else "training",
            node_list=",".join(sorted(filter(None, entry["nodes"]))), gpus=entry["gpus"])
    return queue


def _timestamp(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _true_conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def _ended(obj: Mapping[str, Any], succeeded: str) -> str | None:
    """The end state a job's object says (deleted, succeeded or failed), or None while it has not ended."""
    if obj.get("metadata", {}).get("deletionTimestamp"):
        return CANCELLED
    conditions = _true_conditions(obj)
    if succeeded in conditions:
        return COMPLETED
    if "Failed" in conditions:
        return TIMEOUT if conditions["Failed"].get("reason") == "DeadlineExceeded" else FAILED
    return None


def mpijob_state(mpijob: Mapping[str, Any]) -> str:
    """The job's state from the MPIJob's conditions (the operator's Created/Running/Succeeded/Failed/Suspended)."""
    conditions = _true_conditions(mpijob)
    return _ended(mpijob, "Succeeded") or (
        RUNNING if "Running" in conditions and "Suspended" not in conditions else PENDING)


def plain_job_state(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> str:
    """A plain job's state from its launcher Job's conditions, and while it runs from its pods: RUNNING once the
    launcher and every worker pod run (the launcher waits for the workers), PENDING before."""
    ended = _ended(job, "Complete")
    if ended:
        return ended
    nodes = recorded_nodes(job)
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
               and not p.get("metadata", {}).get("deletionTimestamp")]
    roles = [(p.get("metadata", {}).get("labels") or {}).get(LABEL_ROLE) for p in running]
    return RUNNING if "launcher" in roles and roles.count("worker") >= nodes else PENDING


def sweep_job_state(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> str:
    """A sweep's state from its Job's conditions (Complete: every trial ran), and while it runs from its pods:
    RUNNING while a trial pod runs, PENDING while they all wait."""
    ended = _ended(job, "Complete")
    if ended:
        return ended
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
               and not p.get("metadata", {}).get("deletionTimestamp")]
    return RUNNING if running else PENDING


def _termination_message(pod: Mapping[str, Any]) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if isinstance(terminated.get("message"), str):
            return terminated["message"]
    return ""


@dataclass(frozen=True)
class PodTrials:
    trials: dict[int, dict[str, Any]]  # by task, as chexnet.sweep status gives them (read_status)
    states: dict[int, str]  # each task's latest pod: RUNNING, or COMPLETED once it ended
    holders: dict[int, str]  # each task's latest pod's name
    problem: str = ""


def pod_trials(plan: SweepPlan, pods: Sequence[Mapping[str, Any]], read_log: Callable[[str], str]) -> PodTrials:
    """A sweep's trials from its pods, oldest first so that a task's latest pod wins. An ended pod's termination
    message is its trial's row; a running pod's log (`read_log(pod name)`) names its task, trial and parameters,
    and has its epochs. Both are the user's text: read as read_status reads the study's answer, every field
    checked."""
    trials: dict[int, dict[str, Any]] = {}
    tasks: dict[int, str] = {}
    holders: dict[int, str] = {}
    problems = []
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or ""):
        name = (pod.get("metadata") or {}).get("name", "")
        phase = (pod.get("status") or {}).get("phase")
        message = _termination_message(pod)
        try:
            if message:
                found = read_status(message, plan)
                state = "COMPLETED"
            elif phase == "Running" and not (pod.get("metadata") or {}).get("deletionTimestamp"):
                found = _running_trial(read_log(name), plan)
                state = "RUNNING"
            else:
                continue  # waiting for a node or a task; or lost with its node (its log with it), and replaced
        except SweepStatusError as err:
            problems.append(f"pod {name}: {err}")
            continue
        for task, trial in found.items():
            trials[task], tasks[task], holders[task] = trial, state, name
    return PodTrials(trials, tasks, holders, "; ".join(problems)[:300])


def _running_trial(log: str, plan: SweepPlan) -> dict[int, dict[str, Any]]:
    """A running trial pod's trial from its log; {} before it has one."""
    named = TRIAL_LINE.findall(log)
    if not named:
        return {}
    task, number = (int(x) for x in named[-1])
    params_lines = PARAMS_LINE.findall(log)
    try:
        params = json.loads(params_lines[-1]).get("params", {}) if params_lines else {}
    except (ValueError, AttributeError):
        params = {}
    epochs = {}
    for match in EPOCH_LINE.finditer(log):
        epochs[match.group(1)] = None if match.group(2) == "n/a" else float(match.group(2))
    return read_status(json.dumps({"trials": [{"number": number, "task": task, "state": "RUNNING",
                                               "params": params, "value": None, "epochs": epochs}]}), plan)


def _image_id(pod: Mapping[str, Any]) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if isinstance(status.get("imageID"), str):
            return status["imageID"]
    return ""


def card_from_log(log: str, job_id: str, image_id: str = "") -> dict[str, Any] | None:
    """The last model card line of a pod's log (chexnet.card-in-log.sh), checked as the card file is; its
    image digest, when the run could not know it, is the one the kubelet reports having run (`image_id`, the
    pod's containerStatuses[].imageID), marked as such."""
    lines = [line for line in log.splitlines() if line.startswith(MODEL_CARD_LINE)]
    if not lines:
        return None
    card = checked_card(lines[-1][len(MODEL_CARD_LINE):], job_id)
    environment = card.get("environment")
    digest = IMAGE_DIGEST.search(image_id or "")
    if isinstance(environment, dict) and not environment.get("image_digest") and digest:
        card["environment"] = {**environment, "image_digest": digest.group(0), "image_digest_from": "kubelet"}
    return card


def recorded_nodes(job: Mapping[str, Any]) -> int:
    try:
        return int(json.loads((job.get("metadata", {}).get("annotations") or {})[ANNOTATION_SPEC])["nodes"])
    except (KeyError, TypeError, ValueError):
        return 1


def mpijob_record(mpijob: Mapping[str, Any], cfg: PortalConfig) -> JobRecord:
    """The job record a launcher Job or an MPIJob carries; ValueError when it is not one of ours (or was edited
    to claim so)."""
    meta = mpijob.get("metadata") or {}
    name, labels, notes = meta.get("name", ""), meta.get("labels") or {}, meta.get("annotations") or {}
    if not K8S_ID.match(name) or labels.get(LABEL_JOB) != name or not labels.get(LABEL_USER):
        raise ValueError(f"{mpijob.get('kind', 'object')} {name!r} is not a portal job")
    # The annotation is the user's to edit (their namespace): a record from an adversary, checked like a job.json.
    text = notes.get(ANNOTATION_SPEC)
    if not isinstance(text, str) or len(text) > MAX_RECORD_BYTES:
        raise RecordError(f"annotation {ANNOTATION_SPEC}: missing, or longer than {MAX_RECORD_BYTES} bytes")
    try:
        spec = recorded_spec(json.loads(text))
    except (ValueError, RecursionError) as err:
        raise RecordError(f"annotation {ANNOTATION_SPEC}: {str(err)[:120]}") from None
    plan = None
    if ANNOTATION_SWEEP in notes:
        text = notes[ANNOTATION_SWEEP]
        if not isinstance(text, str) or len(text) > MAX_RECORD_BYTES:
            raise RecordError(f"annotation {ANNOTATION_SWEEP}: longer than {MAX_RECORD_BYTES} bytes")
        try:
            plan = recorded_plan(json.loads(text), spec.epochs)
        except (ValueError, RecursionError) as err:
            raise RecordError(f"annotation {ANNOTATION_SWEEP}: {str(err)[:120]}") from None
    return JobRecord(id=name, backend="kubernetes", user=labels[LABEL_USER], spec=spec,
                     submitted_at=notes.get(ANNOTATION_SUBMITTED, meta.get("creationTimestamp", "")),
                     job_dir=_job_dir(notes, name, cfg), sweep=plan)


def _job_dir(notes: Mapping[str, Any], name: str, cfg: PortalConfig) -> Path:
    """Where the job's pods wrote its files on the user's home volume: its cluster's directory under ~/jobs, or
    for a job submitted before clusters had directories of their own (no annotation), ~/jobs/<id>."""
    cluster = notes.get(ANNOTATION_CLUSTER)
    if cluster is None:
        return old_jobs_dir(Path(cfg.k8s_home_mount)) / name
    if not isinstance(cluster, str) or not CLUSTER_NAME.match(cluster):  # the user's to edit, like the spec
        raise RecordError(f"annotation {ANNOTATION_CLUSTER}: {str(cluster)[:40]!r} is not a cluster's name")
    return cluster_jobs_dir(Path(cfg.k8s_home_mount), cluster) / name


def log_metrics(text: str) -> RunMetrics:
    """Images/sec and mean AUROC from the launcher's log (chexnet.train's line per epoch), for a reader who
    cannot open the TensorBoard files on the user's volume (the dashboard). Per-class AUROC needs the files, and
    so do the epochs' times (the line has none). A resumed run repeats epochs: the last line of an epoch wins."""
    rates: dict[int, float] = {}
    means: dict[int, float] = {}
    seen = {0}
    for match in EPOCH_LINE.finditer(text):
        epoch, auroc, images = int(match.group(1)), match.group(2), match.group(3)
        seen.add(epoch)
        for found, value in ((rates, images), (means, auroc)):
            found.pop(epoch, None)
            if value != "n/a":
                found[epoch] = float(value)
    rate_series = tuple(rates[e] for e in sorted(rates))[-MAX_SERIES:]
    best_epoch = max(means, key=lambda e: (means[e], -e)) if means else None  # the first epoch of the best
    return RunMetrics(images_per_sec=rate_series[-1] if rate_series else None,
                      best_mean_auroc=None if best_epoch is None else means[best_epoch], best_epoch=best_epoch,
                      epochs_done=max(seen), images_per_sec_series=rate_series,
                      mean_auroc_series=tuple(means[e] for e in sorted(means))[-MAX_SERIES:])


# --- the calls ---

def api_client(cfg: PortalConfig, user: KubeUser | None = None):
    """A client with the portal's credentials (a kubeconfig, else the pod's service account); acting for a user
    who is not the caller, it impersonates them."""
    from kubernetes import client, config

    try:
        if cfg.k8s_kubeconfig:
            api = config.new_client_from_config(config_file=cfg.k8s_kubeconfig)
        else:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            api = client.ApiClient(configuration)
    except (config.ConfigException, OSError) as err:
        where = f"k8s_kubeconfig {cfg.k8s_kubeconfig}" if cfg.k8s_kubeconfig else \
            "the pod's service account (k8s_kubeconfig is empty and this is not a pod)"
        raise KubernetesError(f"no credentials for the Kubernetes API from {where}: {err}") from None
    if user is not None and not user.is_caller:
        impersonate(api, user_principal(cfg, user.name), cfg.k8s_users_group)
    return api


def impersonate(api, principal: str, group: str | None = None):
    """Make client `api` act as `principal` (in `group`): the API server checks that its credentials may
    impersonate them, then applies RBAC as them. Returns `api`."""
    api.set_default_header("Impersonate-User", principal)
    if group:
        api.set_default_header("Impersonate-Group", group)
    return api


class KubernetesScheduler:
    """Submit, watch, cancel and read training jobs (plain Jobs, or MPIJobs), always as the job's user
    (impersonated, or their own pod)."""

    name = "kubernetes"

    def __init__(self, cfg: PortalConfig, client_for=api_client):
        self.cfg = cfg
        self._client_for = client_for
        self.plain = cfg.k8s_jobs == "plain"
        self.kind = "Job" if self.plain else "MPIJob"
        self.sweeps = self.plain  # a sweep is one Job of trial pods (portal.jobs.k8s_manifests)

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

    def _call(self, what: str, fn, *args, **kwargs):
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            answer = fn(*args, **kwargs)
        except ApiException as err:
            if err.status == 404:
                raise JobNotFound(f"{what}: not found") from None
            raise kubernetes_failure(what, err.status, api_reason(err)) from None
        except (HTTPError, OSError) as err:
            raise kubernetes_failure(what, 0, str(err)) from None
        api = getattr(getattr(fn, "__self__", None), "api_client", None)  # a model object: as the API sent it
        return api.sanitize_for_serialization(answer) if api is not None and not isinstance(answer, dict) \
            else answer

    records_in_home = False  # each job's record is its launcher Job or MPIJob (`records`, `load`)
    queue_in_snapshot = False

    def person(self, user: str | None, groups: Sequence[str] | None) -> KubeUser:
        return kube_user(user, groups, self.cfg)

    def snapshot(self, clock: Callable[[], float] = time.monotonic) -> ClusterSnapshot:
        """The GPU pools as configured (the hub does not list nodes), and what holds or waits for GPUs in the
        users' namespaces (one call as the portal: the pods that have not ended, of the namespaces that
        k8s_user_namespace_template names). Each job's state still comes from its own objects."""
        pools = tuple(SlurmPartition(name=t, nodes=(), max_minutes=None, default=i == 0)
                      for i, t in enumerate(self.cfg.k8s_gpu_types))
        asked_at = clock()
        _, core, _ = self._apis(self.person(None, None))
        pods = self._call("the users' pods", core.list_pod_for_all_namespaces,
                          field_selector="status.phase!=Succeeded,status.phase!=Failed")
        queue = pod_queue(pods.get("items", []), self.cfg.namespace_user, datetime.now(UTC))
        return ClusterSnapshot(taken_at=clock(), partitions=pools, queue=queue, asked_at=asked_at)

    def queued(self, snapshot: ClusterSnapshot, record: JobRecord) -> None:
        return None  # each job's state is its objects' (the snapshot's queue is what holds GPUs, for the usage)

    def waiting(self, snapshot: ClusterSnapshot, record: JobRecord) -> QueuedJob | None:
        """The job's pods that wait, with the scheduler's FailedScheduling message in words (pod_queue)."""
        found = snapshot.queue.get(record.id)
        return found if found is not None and found.user == record.user and found.state == PENDING else None

    def start_note(self, spec: JobSpec, user: str, snapshot: ClusterSnapshot) -> str:
        return ""  # no snapshot of each node's free resources here: a waiting job's page says why it waits

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
        """The pool's shape, and the user's quota with what their pods hold now: the portal refuses what the
        namespace's ResourceQuota would, with the same arithmetic and words as on Slurm."""
        _, core, _ = self._apis(user)
        pods = self._call(f"the pods of {user.name}", core.list_namespaced_pod, self.cfg.user_namespace(user.name))
        limits = limits_for(self.cfg, user.groups)
        quota = GpuQuota(limits.quota.limit, limits.quota.groups, pod_holders(pods.get("items", [])))
        return dataclasses.replace(limits, quota=quota.with_submitted(held))

    def _objects(self, spec: JobSpec, job_id: str, user: KubeUser, partition: str, **plain) -> list[dict]:
        if not self.plain:
            return [mpijob_manifest(spec, job_id, user.name, self.cfg, partition,
                                    submitted_at=plain.get("submitted_at", ""))]
        launcher, owned = plain_job_objects(spec, job_id, user.name, self.cfg, partition, **plain)
        return [launcher, *owned]

    def render(self, spec: JobSpec, user: KubeUser, partition: str = "", plan: SweepPlan | None = None) -> str:
        if plan is not None:
            return manifest_yaml(sweep_job_manifest(spec, plan, "k8s-<date>-<time>-<random>", user.name, self.cfg,
                                                    partition, submitted_at="<submit time>"))
        made = "<made at submit>"
        objects = self._objects(spec, "k8s-<date>-<time>-<random>", user, partition, submitted_at="<submit time>",
                                **({"private_key": made, "public_key": made} if self.plain else {}))
        return "---\n".join(manifest_yaml(manifest) for manifest in objects)

    def ensure_namespace(self, user: KubeUser) -> None:
        """Make the user's namespace theirs, as the portal itself (the spawner does the same on a server's
        start): a user may submit from the dashboard before ever starting a server, so their home claim is made
        too. Idempotent."""
        from kubernetes import client

        api = self._client_for(self.cfg, None)
        core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
        namespace = self.cfg.user_namespace(user.name)
        binding, quota = user_namespace_objects(self.cfg, user.name, self.cfg.gpu_quota_for(list(user.groups)))
        steps = [(core.create_namespace, None, (user_namespace_manifest(self.cfg, user.name),)),
                 (rbac.create_namespaced_role_binding, rbac.replace_namespaced_role_binding, (namespace, binding)),
                 (core.create_namespaced_resource_quota, core.replace_namespaced_resource_quota, (namespace, quota)),
                 (core.create_namespaced_persistent_volume_claim, None,
                  (namespace, home_claim_manifest(self.cfg, user.name)))]
        for create, replace, args in steps:
            try:
                self._call(f"preparing namespace {namespace}", create, *args)
            except KubernetesError as err:
                if err.status != 409:
                    raise
                if replace is not None:  # the quota (the user's groups) may have changed
                    self._call(f"preparing namespace {namespace}", replace, args[1]["metadata"]["name"], *args)

    def submit(self, spec: JobSpec, user: KubeUser, partition: str = "",
               plan: SweepPlan | None = None) -> tuple[JobRecord, None]:
        """Create the job's objects; (its record, None: the record is the launcher Job or the MPIJob, there is
        no directory). A plain job's Secret and workers are made after its launcher Job, owned by it; when one
        cannot be made, the launcher Job is deleted again, so nothing is left half-made. A sweep is one Job."""
        if not user.is_caller:
            self.ensure_namespace(user)
        custom, core, batch = self._apis(user)
        namespace = self.cfg.user_namespace(user.name)
        job_id = new_k8s_id()
        if plan is not None:
            if not self.plain:
                raise JobSpecError(SWEEP_FIELD, "sweeps run as plain Jobs; this portal runs MPIJobs (k8s_jobs)")
            created = self._call(f"creating a Job in {namespace}", batch.create_namespaced_job, namespace,
                                 sweep_job_manifest(spec, plan, job_id, user.name, self.cfg, partition))
            return mpijob_record(created, self.cfg), None
        if not self.plain:
            created = self._call(f"creating an MPIJob in {namespace}", custom.create_namespaced_custom_object,
                                 GROUP, VERSION, namespace, PLURAL, self._objects(spec, job_id, user, partition)[0])
            return mpijob_record(created, self.cfg), None
        private_key, public_key = new_ssh_key()
        launcher, *owned = self._objects(spec, job_id, user, partition, private_key=private_key,
                                         public_key=public_key)
        created = self._call(f"creating a Job in {namespace}", batch.create_namespaced_job, namespace, launcher)
        try:
            for manifest in owned:
                create = core.create_namespaced_secret if manifest["kind"] == "Secret" else \
                    batch.create_namespaced_job
                self._call(f"creating {manifest['kind']} {manifest['metadata']['name']} in {namespace}", create,
                           namespace, owned_by(manifest, created))
        except (KubernetesError, JobNotFound):
            self._delete(user, job_id)
            raise
        return mpijob_record(created, self.cfg), None

    def _get(self, user: KubeUser, job_id: str) -> dict:
        if not K8S_ID.match(job_id):
            raise JobNotFound(f"job {job_id}: not found among {user.name}'s jobs")
        custom, _, batch = self._apis(user)
        namespace = self.cfg.user_namespace(user.name)
        try:
            if self.plain:
                found = self._call(f"job {job_id}", batch.read_namespaced_job, job_id, namespace)
            else:
                found = self._call(f"job {job_id}", custom.get_namespaced_custom_object, GROUP, VERSION,
                                   namespace, PLURAL, job_id)
        except JobNotFound:
            raise JobNotFound(f"job {job_id}: not found among {user.name}'s jobs") from None
        if (found.get("metadata", {}).get("labels") or {}).get(LABEL_USER) != user.name:
            raise JobNotFound(f"job {job_id}: not found among {user.name}'s jobs")
        return found

    def load(self, user: KubeUser, job_id: str) -> JobRecord:
        return mpijob_record(self._get(user, job_id), self.cfg)

    def records(self, user: KubeUser) -> list[JobRecord]:
        custom, _, batch = self._apis(user)
        namespace = self.cfg.user_namespace(user.name)
        selector = f"{LABEL_USER}={user.name}"
        if self.plain:
            listed = self._call(f"listing Jobs in {namespace}", batch.list_namespaced_job, namespace,
                                label_selector=selector)
        else:
            listed = self._call(f"listing MPIJobs in {namespace}", custom.list_namespaced_custom_object, GROUP,
                                VERSION, namespace, PLURAL, label_selector=selector)
        found = []
        for item in listed.get("items", []):
            try:
                found.append(mpijob_record(item, self.cfg))
            except (ValueError, KeyError, TypeError):
                continue  # not a job's record: a plain job's workers Job, or an object that is not the portal's
        return found

    def _pods(self, user: KubeUser, job_id: str, role: str | None = None) -> list[dict]:
        _, core, _ = self._apis(user)
        labels = {LABEL_JOB: job_id, **({LABEL_ROLE: role} if role else {})} if self.plain else \
            {OPERATOR_JOB_LABEL: job_id, **({OPERATOR_ROLE_LABEL: role} if role else {})}
        listed = self._call(f"the pods of job {job_id}", core.list_namespaced_pod,
                            self.cfg.user_namespace(user.name),
                            label_selector=",".join(f"{key}={value}" for key, value in labels.items()))
        return listed.get("items", [])

    def state(self, record: JobRecord, user: KubeUser) -> str:
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
            return self._call(f"the log of pod {name}", core.read_namespaced_pod_log, name,
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
            self._call(f"deleting job {job_id}", batch.delete_namespaced_job, job_id, namespace,
                       propagation_policy="Foreground")
        else:
            self._call(f"deleting job {job_id}", custom.delete_namespaced_custom_object, GROUP, VERSION,
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
            return self._call(f"the log of job {record.id}", core.read_namespaced_pod_log,
                              latest["metadata"]["name"], self.cfg.user_namespace(user.name), **kwargs)
        except (KubernetesError, JobNotFound):
            return ""  # the container has not started yet, or its pod went meanwhile

    def metrics(self, record: JobRecord, user: KubeUser) -> RunMetrics:
        """From the TensorBoard files where this process can read them (a notebook in the user's pod), else
        from the launcher's log."""
        from portal.metrics import read_run_metrics

        if user.is_caller and record.logdir.is_dir():
            return read_run_metrics(record.logdir)
        return log_metrics(self.logs(record, user))


def new_ssh_key() -> tuple[str, str]:
    """A plain job's own key pair (its launcher's ssh to its workers): (private, authorized_keys line)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, public.decode() + " dsportal-job\n"


def api_reason(err) -> str:
    """The API server's own message in a failed call's answer (its Status), else the HTTP reason."""
    try:
        return json.loads(err.body).get("message", err.reason)
    except (TypeError, ValueError, AttributeError):
        return str(err.reason)
