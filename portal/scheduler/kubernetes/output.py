"""What a training job's pods on Kubernetes say, read as its user through the API server: its output (the launcher
pod's log; a sweep's: its trial's pod's), the per-epoch record and the metrics in that log, its model card, and a
sweep's trials. `KubernetesScheduler` reads its jobs through `PodOutput`, as the schedulers whose jobs are in the homes
read theirs through portal.scheduler.home.JobsInHome.
"""

from __future__ import annotations

from typing import Any

from portal.config import PortalConfig
from portal.errors import JobNotFound
from portal.metrics import RunMetrics, record_lines
from portal.records.record import JobRecord
from portal.records.sweep import SweepView, sweep_view
from portal.scheduler.kubernetes.client import KubeUser, api_call
from portal.scheduler.kubernetes.errors import KubernetesError
from portal.scheduler.kubernetes.manifests import LABEL_JOB, LABEL_ROLE
from portal.scheduler.kubernetes.records import PodTrials, _image_id, card_from_log, log_metrics, pod_trials

# The MPI operator's labels on the pods it makes (mpi-operator v2: training.kubeflow.org/*).
OPERATOR_JOB_LABEL, OPERATOR_ROLE_LABEL = "training.kubeflow.org/job-name", "training.kubeflow.org/job-role"
MAX_TRIAL_LOG_BYTES = 1024 * 1024  # a running trial's log, read for its task and epochs
LOG_TIMEOUT_S = 10
CARD_TAIL_LINES = 20  # the card is the script's last line but one or two


class PodOutput:
    """A job's output, epochs, metrics, model card and sweep trials, from its pods (plain Jobs' or an MPIJob's)."""

    cfg: PortalConfig
    plain: bool  # plain Jobs, whose pods carry the portal's labels; else MPIJobs, whose pods carry the operator's

    def _apis(self, user: KubeUser) -> tuple[Any, Any, Any]:
        """(custom objects, core, batch) clients acting as the user: the scheduler's."""
        raise NotImplementedError

    def logs(self, record: JobRecord, user: KubeUser, tail: int | None = None, task: int | None = None) -> str:
        """The launcher pod's log (the latest launcher's); "" before it starts (or once its pod is gone). A sweep's:
        the log of the latest pod of task `task` (default 0)."""
        record.check_owner(user.name)
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
        record.check_owner(user.name)
        if record.sweep is not None and task is None:
            return {}, ""
        return record_lines(self.logs(record, user, None, task)), ""

    def metrics(self, record: JobRecord, user: KubeUser) -> RunMetrics:
        """From the TensorBoard files where this process can read them (a notebook in the user's pod), else
        from the launcher's log."""
        from portal.metrics import read_run_metrics

        record.check_owner(user.name)
        if user.is_caller and record.logdir.is_dir():
            return read_run_metrics(record.logdir)
        return log_metrics(self.logs(record, user))

    def model_card(self, record: JobRecord, user: KubeUser, task: int | None = None) -> dict | None:
        """The run's model card from the log of the pod that ran it (its script copies the card there at the
        end: the dashboard cannot open the user's volume), with the image's digest as the kubelet ran it. None
        before the run wrote one; ModelCardError when the line is not a card. A sweep's: its task's trial's."""
        record.check_owner(user.name)
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

    def sweep(self, record: JobRecord, user: KubeUser) -> SweepView:
        """The sweep's trials, from its pods (pod_trials): what the study said at each ended pod's end, and what
        each running pod's log says."""
        assert record.sweep is not None
        found = self._trials(record, user)
        return sweep_view(record.sweep, found.trials, found.states, found.problem)

    def _pods(self, user: KubeUser, job_id: str, role: str | None = None) -> list[dict]:
        _, core, _ = self._apis(user)
        labels = {LABEL_JOB: job_id, **({LABEL_ROLE: role} if role else {})} if self.plain else \
            {OPERATOR_JOB_LABEL: job_id, **({OPERATOR_ROLE_LABEL: role} if role else {})}
        listed = api_call(f"the pods of job {job_id}", core.list_namespaced_pod,
                          self.cfg.user_namespace(user.name),
                          label_selector=",".join(f"{key}={value}" for key, value in labels.items()))
        return listed.get("items", [])

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
