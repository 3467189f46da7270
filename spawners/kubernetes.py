"""A KubeSpawner for GPU node pools, sharing the options form with the Slurm spawner (`spawners.forms`).

What it adds to `kubespawner.KubeSpawner` (7.x), each through the Spawner's named extension points:
- `options_form` / `options_from_form` / `apply_user_options`: the GPU type (a node pool, chosen by node
  selector, e.g. `nvidia: v100`), a GPU profile (0/1/2/4/8, within the user's group quota), CPUs, memory and
  wall time, as the Kubernetes scheduler's `limits` offers them (spawners.options), validated by
  `spawners.forms` for the form and the REST API alike; the pod then gets
  `nvidia.com/gpu` limits, the node selector, CPU/memory guarantees = limits and the wall time as its
  activeDeadlineSeconds.
- Every server in the user's own namespace (`k8s_user_namespace_template`), which `_ensure_namespace` makes
  theirs through the Kubernetes scheduler, as a job's submit does (`portal.scheduler.kubernetes.namespaces`): the
  role `dsportal-user` for them and their pods, their GPU quota as a ResourceQuota, the NetworkPolicies that fence
  its pods in, and their home claim.
- The server starts faster: the image's `dsportal-jupyterhub-singleuser` with the options of
  `spawners.singleuser.SINGLEUSER_ARGS`, as on Slurm; and the spawn returns once its port answers, so the
  hub's first check finds it up (its own wait backs off from 0.2 s to 5 s).
- Volumes: the user's home claim, the data set's claim read-only, /dev/shm in memory.
- The template notebooks are copied into the home by a postStart hook (never over the user's files).
- Progress: the pod's events in words (`portal.scheduler.kubernetes.pods.event_in_words`).
- A pod that cannot start (no node can hold it, its image is missing, its container keeps exiting) fails the
  spawn within seconds with the reason (`portal.scheduler.kubernetes.pods.cannot_start`), where KubeSpawner waits out
  start_timeout (kubespawner#795).
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import shlex
from typing import cast
from urllib.parse import urlsplit

from kubespawner import KubeSpawner
from tornado import web
from traitlets import default

from portal.config import PortalConfig
from portal.errors import Unavailable
from portal.inputs import seconds_of
from portal.scheduler.kubernetes.manifests import GPU_RESOURCE, HOME_CLAIM_SIZE, site_programs_volume
from portal.scheduler.kubernetes.pods import cannot_start, event_in_words
from portal.scheduler.kubernetes.scheduler import KubernetesScheduler
from portal.traits import fixed_default, portal_default
from spawners.forms import ServerOptions
from spawners.options import ServerOptionsMixin, accepts_connections, server_environment, tensorboard_proxy_url
from spawners.singleuser import SINGLEUSER_ARGS

HOME, DATA, SHM = "home", "data", "dshm"  # volume names, as in the MPIJobs
LOOK_EVERY_S = 1.0  # how often a starting pod is looked at for a reason it cannot start
ANSWER_EVERY_S = 0.05  # how often a running pod's server port is tried until it takes a connection
ANSWER_WAIT_S = 30  # at most this long (or http_timeout, if shorter); then the hub's own wait takes over


class PodCannotStart(Unavailable, web.HTTPError):
    """The server's pod will not start without a change; the message says why, in words. An HTTP error (503), so
    that a spawn which fails before the hub answers the request shows the message, not "Internal Server Error"."""

    def __init__(self, why: str) -> None:
        super().__init__(503, log_message=f"Your server cannot start: {why}.")


def pod_settings(cfg: PortalConfig, options: ServerOptions) -> dict:
    """The KubeSpawner traits for validated options (pure: unit-tested without a cluster)."""
    gpus = {GPU_RESOURCE: str(options.gpus)} if options.gpus else {}
    return {
        "node_selector": {cfg.k8s_gpu_node_label: options.partition} if options.gpus else {},
        "extra_resource_limits": dict(gpus),
        "extra_resource_guarantees": dict(gpus),
        "cpu_limit": float(options.cpus), "cpu_guarantee": float(options.cpus),
        "mem_limit": f"{options.memory_gb}G", "mem_guarantee": f"{options.memory_gb}G",
        "extra_pod_config": {"activeDeadlineSeconds": seconds_of(options.runtime)},
        "extra_labels": {"dsportal/gpus": str(options.gpus), "dsportal/gpu-type": options.partition},
    }


class PortalKubeSpawner(ServerOptionsMixin, KubeSpawner):
    """KubeSpawner with the portal's validated GPU form, per-user namespaces and the portal's volumes."""

    pool_label = "GPU type"
    portal_scheduler = "kubernetes"  # the form is a view of the Kubernetes scheduler's limits (spawners.options)

    _image_default = portal_default("image", "k8s_image")
    _pull_default = portal_default("image_pull_policy", "k8s_image_pull_policy")
    _namespace_default = portal_default("namespace", "k8s_namespace")
    _user_namespaces_default = fixed_default("enable_user_namespaces", True)
    _user_namespace_template_default = portal_default("user_namespace_template", "k8s_user_namespace_template")
    _user_namespace_labels_default = fixed_default(
        "user_namespace_labels", {"app.kubernetes.io/part-of": "dsportal", "dsportal/user": "{username}"})
    _pvc_ensure_default = fixed_default("storage_pvc_ensure", True)
    _pvc_name_default = portal_default("pvc_name_template", "k8s_home_claim_template")
    _capacity_default = fixed_default("storage_capacity", HOME_CLAIM_SIZE)
    _working_dir_default = portal_default("working_dir", "k8s_home_mount")
    _uid_default = fixed_default("uid", 1000)  # the image's notebook user
    _fs_gid_default = fixed_default("fs_gid", 100)
    # The image's launcher and the options that shorten the server's start, as on Slurm (spawners.singleuser).
    _args_default = fixed_default("args", list(SINGLEUSER_ARGS))

    @default("cmd")
    def _cmd_default(self) -> list:
        return [str(self.portal.venv / "bin" / "dsportal-jupyterhub-singleuser")]

    @default("volumes")
    def _volumes_default(self) -> list:
        return [{"name": HOME, "persistentVolumeClaim": {"claimName": "{pvc_name}"}},
                {"name": DATA, "persistentVolumeClaim": {"claimName": self.portal.k8s_data_claim, "readOnly": True}},
                {"name": SHM, "emptyDir": {"medium": "Memory", "sizeLimit": f"{self.portal.k8s_shm_gb}Gi"}},
                *site_programs_volume(self.portal)[1]]  # the site's programs, which its notebooks' job API reads

    @default("volume_mounts")
    def _mounts_default(self) -> list:
        return [{"name": HOME, "mountPath": self.portal.k8s_home_mount},
                {"name": DATA, "mountPath": self.portal.k8s_data_mount, "readOnly": True},
                {"name": SHM, "mountPath": "/dev/shm"}, *site_programs_volume(self.portal)[0]]

    @default("lifecycle_hooks")
    def _hooks_default(self) -> dict:
        # Copy the template notebooks the user does not have yet into ~/notebooks (never over their files).
        python = str(self.portal.venv / "bin" / "python")
        dest = posixpath.join(self.portal.k8s_home_mount, self.portal.user_notebooks_dir)
        return {"postStart": {"exec": {"command": [
            "/bin/sh", "-c", f"{python} -m portal.notebook install-templates --dest {shlex.quote(dest)} || true"]}}}

    @default("environment")
    def _environment_default(self) -> dict:
        environment = {
            "TENSORBOARD_PROXY_URL": tensorboard_proxy_url,
            # Notebooks submit MPIJobs with the pod's own service account, in their own namespace.
            "DSPORTAL_SCHEDULER": "kubernetes",
            # Its jobs' directories under ~/jobs are the cluster's, as the dashboard reads them (portal.records.record).
            "DSPORTAL_CLUSTER_NAME": self.portal.cluster_name,
            "DSPORTAL_K8S_USER_NAMESPACE_TEMPLATE": self.portal.k8s_user_namespace_template,
            "DSPORTAL_K8S_IMAGE": self.portal.k8s_image,
            "DSPORTAL_GROUPS": lambda spawner: ",".join(sorted(g.name for g in spawner.user.groups)),
        }
        for name, value in os.environ.items():  # the site's other portal settings travel with the user
            if name.startswith("DSPORTAL_K8S_") and name not in environment and name != "DSPORTAL_K8S_KUBECONFIG":
                environment[name] = value
        if self.portal.site_python_path:  # the site's programs, which its notebooks' job API registers (mounted above)
            environment.update(DSPORTAL_SITE_PYTHON_PATH=self.portal.site_python_path,
                               DSPORTAL_SITE_PROGRAMS=",".join(self.portal.site_programs),
                               DSPORTAL_SITE_LAUNCHERS=",".join(self.portal.site_launchers))
        return {**environment, **server_environment(self.portal, lambda spawner: self.portal.k8s_home_mount)}

    # --- starting: fail fast, say what happens ---

    async def start(self):
        """KubeSpawner's start (Spawner.start, the documented hook; KubeSpawner's own returns the future of its
        `_start`, which its `progress` watches), failed as soon as the pod shows it cannot start (the hub then
        stops the server, which deletes the pod)."""
        await self.prepare_mlflow()
        starting = super().start()
        key = f"{self.namespace}/{self.pod_name}"
        while not starting.done():
            pod = self.pod_reflector.pods.get(key) if self.pod_reflector else None
            why = None if pod is None or pod["metadata"].get("deletionTimestamp") else cannot_start(pod)
            if why:
                starting.cancel()
                self.log.warning("Spawn of %s refused by Kubernetes: %s", key, why)
                raise PodCannotStart(why)
            await asyncio.wait({starting}, timeout=LOOK_EVERY_S)
        url = starting.result()
        await self._answering(url)
        return url

    async def _answering(self, url) -> None:
        """Return once the server's port takes a connection (every ANSWER_EVERY_S, at most ANSWER_WAIT_S): the pod
        runs before JupyterLab listens, and the hub's own wait polls it with a backoff doubling from 0.2 s, which
        found it up 0.8 s late at the median (bench.kube); its first poll now finds it up. A port that never
        answers is left to the hub's wait, which says so."""
        if not isinstance(url, str):
            return
        address = urlsplit(url)
        if not address.hostname or not address.port:
            return
        deadline = asyncio.get_running_loop().time() + min(self.http_timeout, ANSWER_WAIT_S)
        while asyncio.get_running_loop().time() < deadline:
            if await accepts_connections(address.hostname, address.port, ANSWER_EVERY_S * 10):
                return
            await asyncio.sleep(ANSWER_EVERY_S)

    async def progress(self):
        async for update in super().progress():
            event = update.get("raw_event")
            yield {**update, "message": event_in_words(event)} if event else update

    # --- the form (shared with the Slurm spawner: spawners.options) ---

    def apply_server_options(self, options: ServerOptions) -> None:
        """Set only checked values on the pod."""
        self.user_options = options.to_dict()
        for name, value in pod_settings(self.portal, options).items():
            setattr(self, name, value)

    # --- the user's namespace: theirs, with their GPU quota ---

    async def _ensure_namespace(self):
        """KubeSpawner's namespace (made when `enable_user_namespaces`), then what makes it the user's, before the pod
        is created: the Kubernetes scheduler's `ensure_namespace`, as a job's submit makes it (their role binding,
        their GPU quota, the network fences, their home claim), which returns once the quota is in force so that the
        server's pod is counted in it. One owner of a user's namespace, whichever comes first.

        Not a documented hook, and kept so: KubeSpawner 7.1 makes the namespace in `_start` (after `pre_spawn_hook`
        and `modify_pod_hook`, before the pod), and no public hook runs between the two: a `pre_spawn_hook` would
        find no namespace on a user's first start; a `modify_pod_hook` runs on every pod build, may not block on the
        API, and cannot fail the start. If KubeSpawner renames or stops calling it, the pod starts in a namespace
        without the quota and the fences: tests/unit/spawners/test_kubernetes.py checks that KubeSpawner's `_start`
        still calls it, so an upgrade that changes this fails there first."""
        await super()._ensure_namespace()
        scheduler = cast(KubernetesScheduler, self.scheduler())  # portal_scheduler: "kubernetes"
        person = scheduler.person(self.user.name, tuple(sorted(g.name for g in self.user.groups)))
        await asyncio.to_thread(scheduler.ensure_namespace, person)
