"""What a training job on Kubernetes is made of: what its program's launcher builds (the launcher's KUBERNETES,
portal.records.launchers), the record first, then what it owns, its NetworkPolicy before the rest (its pods reach
each other as they start). Used by `KubernetesScheduler` to submit (`create_owned`) and to render a dry run.

- horovod (horovodjob.horovod_job_objects): "plain", a launcher Job, its Secret (the job's ssh key) and a workers
  Job; "mpijob" (setting `k8s_jobs`), an MPIJob, which owns its pods itself;
- torchrun (torchjob.torchrun_job_objects): node 0's Job and a workers Job; where the portal runs MPIJobs, its
  jobs are listed as MPIJobs, so a launcher without an `mpijob.sh` is not offered (records.limits_for).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from portal.config import PortalConfig
from portal.first_import import loaded
from portal.records.launchers import launchers
from portal.records.spec import JobSpec, JobSpecError
from portal.records.templating import program_of
from portal.scheduler.kubernetes.client import api_call
from portal.scheduler.kubernetes.manifests import owned_by
from portal.scheduler.kubernetes.netpol import job_network_policy


def job_objects(cfg: PortalConfig, spec: JobSpec, job_id: str, user: str, partition: str, *, plain: bool,
                submitted_at: str = "", keys: tuple[str, str] | None = None) -> list[dict]:
    """[the record, its NetworkPolicy, what else it owns]. `keys`: a Horovod plain job's (private, public) ssh key
    (made by its builder when None)."""
    build = builder(program_of(spec).launcher)
    record, owned = build(spec, job_id, user, cfg, partition, plain=plain, submitted_at=submitted_at, keys=keys)
    return [record, job_network_policy(cfg, user, job_id), *owned]


def builder(launcher: str) -> Callable[..., tuple[dict, list[dict]]]:
    """The function that builds a single run's objects for `launcher` (its declaration's KUBERNETES)."""
    module, _, function = launchers().get(launcher).kubernetes.partition(":")
    if not module:
        raise JobSpecError("template", f"the launcher {launcher} runs on no Kubernetes (its declaration names no "
                                       "KUBERNETES builder)")
    return getattr(importlib.import_module(module), function)


def create_owned(core: Any, namespace: str, owned: Sequence[dict], created: dict) -> None:
    """Create what the record `created` (as the API server returned it) owns, each with an owner reference to it,
    so the garbage collector deletes them with it. KubernetesError (or JobNotFound) from the first that fails."""
    loaded("kubernetes")
    from kubernetes import client

    creators = {"Secret": core.create_namespaced_secret, "Service": core.create_namespaced_service,
                "Job": client.BatchV1Api(core.api_client).create_namespaced_job,
                "NetworkPolicy": client.NetworkingV1Api(core.api_client).create_namespaced_network_policy}
    for manifest in owned:
        api_call(f"creating {manifest['kind']} {manifest['metadata']['name']} in {namespace}",
                 creators[manifest["kind"]], namespace, owned_by(manifest, created))
