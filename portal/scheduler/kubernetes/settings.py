"""The Kubernetes scheduler's section of the settings (scheduler: kubernetes), owned here and a part of every
PortalConfig: its fields, their helpers and their checks (`check_section`).

KubeSpawner runs the servers; training jobs run as plain Jobs (no operator) or as MPIJobs (kubeflow.org/v2beta1)
where the MPI Operator runs. portal.config's PortalConfig inherits these fields and helpers, so `cfg.k8s_image` and
`cfg.user_namespace(name)` read as before; docs/configuration.md tables them in a section of their own. This module
is of the settings' layer: it imports nothing of the scheduler's (tests/unit/test_layers.py), so that the settings
can take it in without the Kubernetes client.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from portal.config_values import ConfigError, setting
from portal.inputs import ascii_digits

K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # a DNS-1123 label: namespaces, claims, label values


@dataclass(frozen=True)
class KubernetesSettings:
    """Kubernetes (scheduler: kubernetes): where the servers and the jobs run, as whom, in what shape"""

    k8s_kubeconfig: str = setting("", "The credentials: a kubeconfig file, or empty for the pod's service account "
                                  "(in the cluster).")
    k8s_namespace: str = setting("dsportal", "The hub's namespace.")
    k8s_user_namespace_template: str = setting("dsportal-u-{username}", "Every user's own namespace, where their "
                                               "server and jobs run.")
    k8s_user_prefix: str = setting("dsportal:", 'The hub and the dashboard act for a user by impersonating '
                                   '"<prefix><name>" (group k8s_users_group), so the API server\'s RBAC '
                                   "(deploy/kubernetes/rbac.yaml) keeps every user to their own namespace.")
    k8s_users_group: str = setting("dsportal-users", "The group the impersonated users are in (see "
                                   "k8s_user_prefix).")
    k8s_image: str = setting("localhost/dsportal-training:latest", "The notebook + training image (docker/training).")
    k8s_image_pull_policy: str = setting("IfNotPresent", "When to pull k8s_image: Always, IfNotPresent or Never.")
    k8s_gpu_node_label: str = setting("nvidia", "GPU node pools: a node label whose value is the GPU type (the "
                                      "spawner's \"partition\"), e.g. nvidia=t4.")
    k8s_gpu_types: tuple[str, ...] = setting(("t4", "v100"), "The GPU types (values of k8s_gpu_node_label).")
    k8s_gpu_profiles: tuple[str, ...] = setting(("0", "1", "2", "4", "8"), "The GPU counts a server may ask for "
                                                "(profiles), within the user's group quota.")
    k8s_node_cpus: int = setting(32, "CPUs of one GPU node, where the pool's nodes cannot be listed (a dry run, "
                                     "a notebook in a user's pod); otherwise each node's allocatable is used.")
    k8s_node_memory_gb: int = setting(180, "Memory (GB) of one GPU node, where the nodes cannot be listed.")
    k8s_node_gpus: int = setting(8, "GPUs of one GPU node, where the nodes cannot be listed.")
    k8s_max_nodes: int = setting(4, "How many nodes one training job may span.")
    k8s_data_claim: str = setting("chestxray14", "The data set's claim (ReadOnlyMany, mounted read-only).")
    k8s_data_mount: str = setting("/data", "Where the data set is mounted.")
    k8s_site_programs_claim: str = setting("", "The claim in each user's namespace (ReadOnlyMany) that holds "
                                           "site_python_path's packages, mounted read-only at site_python_path in "
                                           "every training pod; empty: none (the site's packages are in the image).")
    k8s_home_claim_template: str = setting("home-{username}", "Each user's home claim.")
    k8s_home_mount: str = setting("/home/jovyan", "Where the user's home is mounted.")
    k8s_jobs: str = setting("plain", "How a training job runs: plain (a launcher Job running mpirun over ssh and a "
                            "workers Job, owned by it; needs no operator) or mpijob (an MPIJob, where the Kubeflow "
                            "MPI Operator runs).")
    k8s_shm_gb: int = setting(8, "/dev/shm as an in-memory emptyDir of this size in GB (Horovod and tf.data use "
                              "shared memory).")
    k8s_server_egress: tuple[str, ...] = setting((), "Where users' servers may connect besides the hub's API and DNS "
                                                 "(NetworkPolicy): CIDR[:PORT[-PORT]] each, such as the API server's.")

    def gpu_profiles(self) -> tuple[int, ...]:
        return tuple(sorted({int(p) for p in self.k8s_gpu_profiles}))

    def user_namespace(self, username: str) -> str:
        return self.k8s_user_namespace_template.format(username=username)

    def namespace_user(self, namespace: str) -> str | None:
        """Whose namespace this is by k8s_user_namespace_template (user_namespace turned round), or None."""
        before, _, after = self.k8s_user_namespace_template.partition("{username}")
        name = namespace[len(before):len(namespace) - len(after)] if len(namespace) > len(before) + len(after) \
            else ""
        return name if name and self.user_namespace(name) == namespace else None

    def home_claim(self, username: str) -> str:
        return self.k8s_home_claim_template.format(username=username)

    def user_principal(self, username: str) -> str:
        """Portal user `username` as Kubernetes knows them: the name the portal impersonates and RBAC binds."""
        return f"{self.k8s_user_prefix}{username}"

    def check_section(self) -> None:
        """ConfigError naming the first of these settings whose value is not allowed, and what is (PortalConfig's
        checks call each section's: portal.config_checks)."""
        names = {"k8s_namespace": self.k8s_namespace, "k8s_data_claim": self.k8s_data_claim,
                 **{f"k8s_gpu_types[{t}]": t for t in self.k8s_gpu_types},
                 **({"k8s_site_programs_claim": self.k8s_site_programs_claim} if self.k8s_site_programs_claim else {})}
        for name, value in names.items():
            if not re.match(K8S_NAME, value) or len(value) > 63:
                raise ConfigError(f"{name} is {value!r}; allowed: lower-case letters, digits and '-' (a DNS label)")
        for name in ("k8s_user_namespace_template", "k8s_home_claim_template"):
            if "{username}" not in getattr(self, name):
                raise ConfigError(f"{name} must contain {{username}}; it is {getattr(self, name)!r}")
        if not self.k8s_gpu_types:
            raise ConfigError("k8s_gpu_types is empty; allowed: one or more GPU types (node label values)")
        if not all(ascii_digits(p) for p in self.k8s_gpu_profiles) or "0" not in self.k8s_gpu_profiles:
            raise ConfigError(f"k8s_gpu_profiles is {self.k8s_gpu_profiles}; allowed: whole numbers, 0 among them")
        if self.k8s_jobs not in ("plain", "mpijob"):
            raise ConfigError(f"k8s_jobs is {self.k8s_jobs!r}; allowed: plain, mpijob")
        if self.k8s_image_pull_policy not in ("Always", "IfNotPresent", "Never"):
            raise ConfigError(f"k8s_image_pull_policy is {self.k8s_image_pull_policy!r}; "
                              "allowed: Always, IfNotPresent, Never")
        for name in ("k8s_node_cpus", "k8s_node_memory_gb", "k8s_max_nodes", "k8s_shm_gb"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} is {getattr(self, name)}; allowed: 1 or more")
        if self.k8s_node_gpus < 0:
            raise ConfigError(f"k8s_node_gpus is {self.k8s_node_gpus}; allowed: 0 or more")
        for entry in self.k8s_server_egress:
            egress_entry(entry)
        if self.k8s_site_programs_claim and not getattr(self, "site_python_path", ""):
            raise ConfigError("k8s_site_programs_claim is set and site_python_path is not; allowed: both (the claim "
                              "mounted there) or neither")
        for name in ("k8s_data_mount", "k8s_home_mount"):
            if not getattr(self, name).startswith("/"):
                raise ConfigError(f"{name} is {getattr(self, name)!r}; allowed: an absolute path")


def egress_entry(entry: str) -> tuple[str, int | None, int | None]:
    """One k8s_server_egress entry, CIDR, CIDR:PORT or CIDR:PORT-PORT: (the network, its first and last port, or
    None); ConfigError naming the setting and the entry otherwise."""
    cidr, colon, ports = entry.strip().partition(":")
    numbers = [int(n) for n in ports.split("-", 1) if ascii_digits(n)]
    try:
        network = str(ipaddress.ip_network(cidr))
    except ValueError:
        network = ""
    if not network or (colon and len(numbers) != len(ports.split("-", 1))) or \
            any(not 1 <= n <= 65535 for n in numbers) or numbers != sorted(numbers):
        raise ConfigError(f"k8s_server_egress: {entry!r} is not allowed; allowed: CIDR, CIDR:PORT or CIDR:PORT-PORT "
                          "(ports 1-65535, TCP), such as 198.19.0.1/32:16443")
    return network, (numbers[0] if numbers else None), (numbers[-1] if numbers else None)
