"""The Kubernetes path's pure readers, unit-tested without a cluster: a user's limits on a GPU pool, a job's state
(from its launcher Job or MPIJob, and its pods), a sweep's trials (from its pods' termination messages and logs), a
model card and metrics from a pod's log, and the job record a launcher Job or an MPIJob carries; what holds or waits
for GPUs, from the pods, is holders.py's. No Kubernetes API calls: `portal.scheduler.kubernetes.scheduler` makes them.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from portal.config import PortalConfig
from portal.config_checks import CLUSTER_NAME
from portal.errors import JobNotFound
from portal.metrics import MAX_SERIES, RunMetrics, metrics_of_records, record_lines
from portal.records.fit import Shape
from portal.records.ids import anchored
from portal.records.launchers import launchers
from portal.records.limits import JobLimits
from portal.records.record import (
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
from portal.records.sweep import SweepPlan, SweepStatusError, read_status, recorded_plan
from portal.records.templating import programs_on_kubernetes
from portal.registrations import SCHEDULERS
from portal.scheduler.cluster import NodePool
from portal.scheduler.home import checked_card
from portal.scheduler.kubernetes.errors import KubernetesError
from portal.scheduler.kubernetes.holders import timestamp
from portal.scheduler.kubernetes.manifests import (
    ANNOTATION_CLUSTER,
    ANNOTATION_SPEC,
    ANNOTATION_SUBMITTED,
    ANNOTATION_SWEEP,
    ANNOTATION_WORKER_PODS,
    LABEL_JOB,
    LABEL_ROLE,
    LABEL_USER,
    LAUNCHER_RESOURCES,
    MODEL_CARD_WORDS,
    PROGRAM_SAYS,
)
from portal.scheduler.kubernetes.nodes import MIB, gpu_type_pools, quantity

K8S_ID = anchored(SCHEDULERS["kubernetes"].job_ids)  # its registered ids

NUMBER = r"[0-9]{1,12}(?:\.[0-9]{1,20})?(?![0-9.])"  # what float() takes: a line with "1.2.3" is not read
EPOCH_LINE = re.compile(rf"chexnet\.train: epoch ([0-9]{{1,7}})/[0-9]+: .*?auroc/mean=({NUMBER}|n/a)"
                        rf".*?images/sec=({NUMBER}|n/a)")
# A trial pod's log (k8s-trial.sh): its task and trial, then the trial's parameters (trial.json), each line after the
# program's name; and a run's model card (card-in-log.sh).
TRIAL_LINE = re.compile(rf"^{PROGRAM_SAYS}sweep task ([0-9]{{1,6}}) is trial ([0-9]{{1,6}}), on pod ", re.MULTILINE)
PARAMS_LINE = re.compile(rf"^{PROGRAM_SAYS}trial parameters (\{{[^\n]{{0,2000}}\}})$", re.MULTILINE)
CARD_LINE = re.compile(rf"{PROGRAM_SAYS}{MODEL_CARD_WORDS}")
IMAGE_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")


def limits_for(cfg: PortalConfig, groups: Sequence[str], partition: str = "",
               pools: Callable[[], Sequence[NodePool]] | None = None) -> JobLimits:
    """What a user may ask of one GPU type's node pool: its usable nodes as a job can ever have them, from
    `pools()` (the nodes, asked as the portal: KubernetesScheduler.snapshot); the configured shape (k8s_node_cpus,
    ...: a dry run, a caller that may not list nodes, a pool with no usable node now) where they cannot say. Each
    of a job's node pods has a node of its own (manifests.one_per_node), as on Slurm, and a Horovod job's launcher
    pod (LAUNCHER_RESOURCES) lands on one of them."""
    gpu_type = partition or (cfg.jobs_partition if cfg.jobs_partition in cfg.k8s_gpu_types else cfg.k8s_gpu_types[0])
    try:
        listed = tuple(pools()) if pools is not None else ()
    except (KubernetesError, JobNotFound):  # a user's own pod may not list every pod
        listed = ()
    pool = next((p for p in listed if p.name == gpu_type), None)
    rooms = pool.rooms() if pool is not None else ()
    shapes = [node.room for node in rooms]
    # each node pod on a node of its own: no more nodes than the pool has, as on Slurm (k8s_max_nodes at most)
    return JobLimits(partition=gpu_type, nodes=min(cfg.k8s_max_nodes, len(rooms)) if rooms else cfg.k8s_max_nodes,
                     gpus_per_node=max((s.gpus for s in shapes), default=cfg.k8s_node_gpus),
                     cpus_per_node=max((s.millicpus // 1000 for s in shapes), default=cfg.k8s_node_cpus),
                     memory_gb_per_node=max((s.memory_mb // 1024 for s in shapes), default=cfg.k8s_node_memory_gb),
                     max_minutes=None, quota=cfg.user_gpu_quota(groups),
                     default_data_dir=posixpath.join(cfg.k8s_data_mount, "chestxray14-tfrecords"),
                     rooms=rooms,
                     programs=programs_on_kubernetes(cfg.k8s_jobs == "mpijob"),
                     launcher=Shape(round(quantity(LAUNCHER_RESOURCES["cpu"]) * 1000),
                                    int(quantity(LAUNCHER_RESOURCES["memory"]) // MIB)),
                     launcher_for=launchers().with_launcher_pod(),  # a torchrun job's node 0 is its launcher
                     pools=gpu_type_pools(cfg.k8s_gpu_types, listed, Shape(
                         cfg.k8s_node_cpus * 1000, cfg.k8s_node_memory_gb * 1024, cfg.k8s_node_gpus)),
                     gpu_choices=cfg.gpu_profiles())


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


# What a launcher's container says as it ends a failed run itself (its termination message: templates/k8s-finish.sh).
RUN_ENDED = "dsportal: the run ended"


def plain_job_state(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> str:
    """A plain job's state from its launcher Job's conditions, and while it runs from its pods: RUNNING once the
    launcher and every worker pod run (the launcher waits for the workers), PENDING before; FAILED once a launcher
    pod said its run failed (RUN_ENDED), before the Job gives up. A Horovod job has a
    worker pod per node; a torchrun job's launcher is node 0, and its record says how many workers it has."""
    ended = _ended(job, "Complete")
    if ended:
        return ended
    if any((p.get("metadata", {}).get("labels") or {}).get(LABEL_ROLE) == "launcher"
           and _termination_message(p).startswith(RUN_ENDED) for p in pods):
        return FAILED  # its run failed and said so: the Job's backoff before it gives up is not waited for
    try:
        nodes = int((job.get("metadata", {}).get("annotations") or {})[ANNOTATION_WORKER_PODS])
    except (KeyError, TypeError, ValueError):
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
    trials: dict[int, dict[str, Any]]  # by task, as programkit.sweep status gives them (read_status)
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
                started = timestamp(str((pod.get("status") or {}).get("startTime") or ""))
                for trial in found.values():  # the study's start is in its journal, not the log: the pod's
                    trial["started"] = started.timestamp() if started else None
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
    epochs = {str(e): entry["scalars"].get("auroc/mean") for e, entry in record_lines(log).items()}
    for match in EPOCH_LINE.finditer(log) if not epochs else ():  # a log from before the record's lines
        epochs[match.group(1)] = None if match.group(2) == "n/a" else float(match.group(2))
    return read_status(json.dumps({"trials": [{"number": number, "task": task, "state": "RUNNING",
                                               "params": params, "value": None, "epochs": epochs}]}), plan)


def _image_id(pod: Mapping[str, Any]) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if isinstance(status.get("imageID"), str):
            return status["imageID"]
    return ""


def card_from_log(log: str, job_id: str, image_id: str = "") -> dict[str, Any] | None:
    """The last model card line of a pod's log (card-in-log.sh), checked as the card file is; its
    image digest, when the run could not know it, is the one the kubelet reports having run (`image_id`, the
    pod's containerStatuses[].imageID), marked as such."""
    found = [said for line in log.splitlines() if (said := CARD_LINE.match(line))]
    if not found:
        return None
    card = checked_card(found[-1].string[found[-1].end():], job_id)
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
            plan = recorded_plan(json.loads(text), spec.epochs, spec.template)
        except (ValueError, RecursionError) as err:
            raise RecordError(f"annotation {ANNOTATION_SWEEP}: {str(err)[:120]}") from None
    return JobRecord(id=name, scheduler="kubernetes", user=labels[LABEL_USER], spec=spec,
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
    """Images/sec and AUROC from the launcher's log, for a reader who cannot open the files on the user's volume
    (the dashboard): the per-epoch record's lines (portal.metrics.record_lines, schema-checked); a log from before
    programs printed them, chexnet.train's line per epoch (no per-class AUROC there). A resumed run repeats epochs:
    the last line of an epoch wins."""
    if records := record_lines(text):
        return metrics_of_records(records)
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

