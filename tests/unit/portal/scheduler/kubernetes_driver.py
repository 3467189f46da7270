"""The Kubernetes driver of the scheduler contract suite (contract_helpers.DRIVERS): plain Jobs over an API server
of recorded objects (recorded_api.py) behind the real client. The job's pods are the kubelet's, made by `answer`;
what a run wrote is its pod's log (`wrote`), where the dashboard reads it, since it cannot open the user's volume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from portal.config import PortalConfig
from portal.mlflow_accounts import JOB_FILE
from portal.records.record import JobRecord
from portal.scheduler.kubernetes.manifests import ANNOTATION_WORKER_PODS, LABEL_JOB, LABEL_ROLE, MODEL_CARD_WORDS
from portal.scheduler.kubernetes.nodes import GPU_RESOURCE
from portal.scheduler.kubernetes.tracking import TRACKING_FILE
from portal.scheduler.registry import scheduler_class
from tests.unit.portal.scheduler.contract_driver import GROUPS, NODE, NODE_GPUS, PEOPLE, Driver, Run
from tests.unit.portal.scheduler.recorded_api import RecordedApiServer

# What the kubelet says it ran (containerStatuses[].imageID): the card's digest where the run could not know it.
IMAGE_DIGEST = "sha256:" + "ab" * 32
UNSCHEDULABLE = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."  # the kube-scheduler's FailedScheduling


class KubernetesDriver(Driver):
    """Kubernetes (plain Jobs) over `RecordedApiServer`, with one GPU node (NODE, of the first GPU type)."""

    image_digest = IMAGE_DIGEST

    def __init__(self, tmp_path: Path):
        self.name = "kubernetes"
        # The MLflow server as the Kubernetes box names it to its hub (`box` is the Slurm box's, no pod's).
        self.cfg = PortalConfig(scheduler="kubernetes", gpu_quota={"gpu-users": 8},
                                mlflow_url="http://198.19.0.1:16446/services/portal/mlflow")
        self.server = RecordedApiServer(self.cfg, PEOPLE)
        self.scheduler = scheduler_class("kubernetes")(self.cfg, client_for=self.server.client_for)  # type: ignore
        self.server.objects[("nodes", "", NODE)] = {
            "metadata": {"name": NODE, "labels": {self.cfg.k8s_gpu_node_label: self.cfg.k8s_gpu_types[0]}},
            "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi", GPU_RESOURCE: str(NODE_GPUS)},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}

    def person(self, name: str) -> Any:
        return self.scheduler.person(name, GROUPS)

    def listed(self, user: Any) -> list[JobRecord]:
        return self.scheduler.records(user)  # type: ignore[attr-defined]

    def load(self, user: Any, job_id: str) -> JobRecord:
        return self.scheduler.load(user, job_id)  # type: ignore[attr-defined]

    def answer(self, job: JobRecord, state: str) -> None:
        """The launcher Job's condition (COMPLETED), or its pods as the kubelet runs them on NODE, each worker
        holding the job's GPUs of a node (RUNNING), or as the kube-scheduler leaves them unbound (PENDING)."""
        namespace = self.cfg.user_namespace(job.user)
        launcher = self.server.objects[("jobs", namespace, job.id)]
        if state == "COMPLETED":
            launcher["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
            return
        workers = int(launcher["metadata"].get("annotations", {}).get(ANNOTATION_WORKER_PODS, job.spec.nodes))
        for role, count in (("launcher", 1), ("worker", workers)):
            for index in range(count):
                gpus = job.spec.gpus_per_node if role == "worker" else 0
                self.pod(job, f"{job.id}-{role}-{index}", {LABEL_ROLE: role}, state, gpus)

    def pod(self, job: JobRecord, name: str, labels: dict[str, str], state: str, gpus: int = 0) -> dict:
        """A pod of the job's, Running on NODE or Pending (unschedulable), asking for `gpus`."""
        namespace = self.cfg.user_namespace(job.user)
        status: dict[str, Any] = {"phase": "Running", "startTime": "2026-11-24T09:00:00Z"} if state == "RUNNING" \
            else {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                      "reason": "Unschedulable", "message": UNSCHEDULABLE}]}
        made = {"metadata": {"name": name, "namespace": namespace, "labels": {LABEL_JOB: job.id, **labels},
                             "creationTimestamp": "2026-11-24T08:59:00Z"},
                "spec": {**({"nodeName": NODE} if state == "RUNNING" else {}),
                         "containers": [{"name": "main", "resources": {"requests": {GPU_RESOURCE: str(gpus)}}}]},
                "status": status}
        self.server.objects[("pods", namespace, name)] = made
        return made

    def wrote(self, job: JobRecord, run: Run, task: int | None = None) -> None:
        """The run's output in its pod's log (a sweep's task's: a trial pod whose log names its task first); a
        run with a card has ended, the card the last line of its log (card-in-log.sh) and its pod Succeeded, with
        the image the kubelet ran."""
        namespace = self.cfg.user_namespace(job.user)
        if task is None:
            name = f"{job.id}-launcher-0"
            assert ("pods", namespace, name) in self.server.objects, f"job {job.id} has not started: answer first"
            log = run.log
        else:
            name = f"{job.id}-trial-{task}"
            self.pod(job, name, {LABEL_ROLE: "trial"}, "RUNNING")
            log = f"{job.spec.template}: sweep task {task} is trial {task}, on pod {name}\n{run.log}"
        if run.card is not None:
            log += f"{job.spec.template}: {MODEL_CARD_WORDS}" + run.card_text.replace("\n", "") + "\n"
            pod = self.server.objects[("pods", namespace, name)]
            pod["status"] = {"phase": "Succeeded", "containerStatuses": [
                {"name": "main", "image": "localhost/dsportal-training:latest", "ready": False, "restartCount": 0,
                 "imageID": f"localhost/dsportal-training@{IMAGE_DIGEST}", "state": {"terminated": {"exitCode": 0}}}]}
            self.answer(job, "COMPLETED")
        self.server.logs[(namespace, name)] = self.server.logs.get((namespace, name), "") + log

    def started(self) -> list[str]:
        """The launcher Jobs created (named by the job id; a plain job's workers Job is named otherwise)."""
        return [name for _, method, plural, _, name in self.server.calls if method == "POST" and plural == "jobs"
                and self.scheduler.job_ids.match(name)]

    def cancelled(self) -> list[str]:
        return [name for _, method, plural, _, name in self.server.calls if method == "DELETE" and plural == "jobs"]

    def tracking_file(self, job: JobRecord) -> tuple[str, int, list[str]]:
        """The job's own Secret (the file is a key of it), as mounted in its pods: the mode of the volume; the
        pods' scripts (their commands)."""
        namespace = self.cfg.user_namespace(job.user)
        secret = self.server.objects[("secrets", namespace, f"{job.id}-mlflow")]
        pods = [self.server.objects[key]["spec"]["template"]["spec"] for key in self.server.objects
                if key[0] == "jobs" and key[1] == namespace and key[2].startswith(job.id)]
        volumes = [volume for pod in pods for volume in pod["volumes"]
                   if volume.get("secret", {}).get("secretName") == f"{job.id}-mlflow"]
        mounted = all(any(m["mountPath"] == TRACKING_FILE and m.get("subPath") == JOB_FILE for m in c["volumeMounts"])
                      for pod in pods for c in pod["containers"])
        assert pods and len(volumes) == len(pods) and mounted, pods
        return secret["stringData"][JOB_FILE], volumes[0]["secret"]["defaultMode"] & 0o777, \
            [" ".join(c["command"]) for pod in pods for c in pod["containers"]]

    def down(self) -> None:
        self.server.unanswered = True

    def up(self) -> None:
        self.server.unanswered = False

