"""What a training job on Kubernetes is made of, by its program's launcher and the setting `k8s_jobs`: the record
first, then what it owns, its NetworkPolicy before the rest (its pods reach each other as they start). Used by
`KubernetesScheduler` to submit (`create_owned`) and to render a dry run.

- horovod, "plain": a launcher Job, its Secret (the job's ssh key) and a workers Job (manifests.plain_job_objects);
- horovod, "mpijob": an MPIJob (manifests.mpijob_manifest), which owns its pods itself;
- torchrun, "plain": node 0's Job, its headless Service and a workers Job (torchjob.torchrun_job_objects); where
  the portal runs MPIJobs, its jobs are listed as MPIJobs, so a torchrun program is not offered (records.limits_for).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from portal.config import PortalConfig
from portal.first_import import loaded
from portal.records.spec import JobSpec
from portal.records.templating import program_of
from portal.scheduler.kubernetes.client import api_call, new_ssh_key
from portal.scheduler.kubernetes.manifests import mpijob_manifest, owned_by, plain_job_objects
from portal.scheduler.kubernetes.netpol import job_network_policy
from portal.scheduler.kubernetes.torchjob import torchrun_job_objects


def job_objects(cfg: PortalConfig, spec: JobSpec, job_id: str, user: str, partition: str, *, plain: bool,
                submitted_at: str = "", keys: tuple[str, str] | None = None) -> list[dict]:
    """[the record, its NetworkPolicy, what else it owns]. `keys`: a Horovod plain job's (private, public) ssh key
    (made here when None)."""
    fence = job_network_policy(cfg, user, job_id)
    if program_of(spec).launcher == "torchrun":
        record, owned = torchrun_job_objects(spec, job_id, user, cfg, partition, submitted_at=submitted_at)
        return [record, fence, *owned]
    if not plain:
        return [mpijob_manifest(spec, job_id, user, cfg, partition, submitted_at=submitted_at), fence]
    private_key, public_key = keys or new_ssh_key()
    launcher, owned = plain_job_objects(spec, job_id, user, cfg, partition, private_key=private_key,
                                        public_key=public_key, submitted_at=submitted_at)
    return [launcher, fence, *owned]


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
