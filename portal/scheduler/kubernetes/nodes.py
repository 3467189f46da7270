"""The Kubernetes nodes as the dashboard reads them (pure): each GPU pool's nodes with what they can give (their
allocatable CPUs, memory and GPUs) and what is free of it (less the requests of the pods bound to them that have
not ended, as the kube-scheduler counts them), as the same `ClusterNode` and `NodePool` records that Slurm's
snapshot has. The start warning of a submit (portal.scheduler.slurm.answers.start_note) and the cluster page read them
on both schedulers alike.

Everything here comes from the API server's answers, which a cluster's operators (not the portal's users) write;
a value that is not a quantity counts as nothing, and a node without the pool label is in no pool.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from portal.records.fit import Shape
from portal.records.limits import Pool
from portal.scheduler.cluster import ClusterNode, NodePool

GPU_RESOURCE = "nvidia.com/gpu"
# A resource quantity (k8s.io/apimachinery's resource.Quantity, as the API server writes it): a decimal number
# with an optional binary (Ki, Mi, ...) or decimal (m, k, M, G, ...) suffix. Exponents (1e3) count as nothing.
QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?\Z")
SUFFIX = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
MIB = 2**20


def quantity(value: Any) -> float:
    """A quantity's value ("250m" CPUs is 0.25, "3Gi" bytes is 3 * 2**30); 0 for what is not one."""
    found = QUANTITY.match(str(value).strip()) if isinstance(value, str | int) else None
    return float(found.group(1)) * SUFFIX[found.group(2)] if found else 0.0


def pod_requests(pod: Mapping[str, Any]) -> tuple[float, float, float]:
    """(CPUs, memory bytes, GPUs) that the pod's containers request together (a limit stands for a request that
    is not given, as the API server defaults it)."""
    cpus = memory = gpus = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        if not isinstance(container, Mapping):
            continue
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        cpus += quantity(asked.get("cpu", 0))
        memory += quantity(asked.get("memory", 0))
        gpus += quantity(asked.get(GPU_RESOURCE, 0))
    return cpus, memory, gpus


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions if isinstance(c, Mapping))


def _address(node: Mapping[str, Any]) -> str:
    for entry in (node.get("status") or {}).get("addresses") or []:
        if isinstance(entry, Mapping) and entry.get("type") == "InternalIP":
            return str(entry.get("address", ""))
    return ""


def node_record(node: Mapping[str, Any], used: tuple[float, float, float], pool: str,
                kept: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> ClusterNode:
    """One node: what it can give, what its pods leave free (nothing, when it cannot take a pod now: not
    Ready, or cordoned), and what a job can ever have of it: its allocatable less `kept`, what the cluster's own
    pods request (counted in `used` too)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    cpus, memory_mb = int(quantity(allocatable.get("cpu"))), int(quantity(allocatable.get("memory")) // MIB)
    gpus = int(quantity(allocatable.get(GPU_RESOURCE)))
    whole = Shape(round(quantity(allocatable.get("cpu")) * 1000), memory_mb, gpus)
    held = Shape(math.ceil(kept[0] * 1000 - 1e-6), math.ceil(kept[1] / MIB), math.ceil(kept[2]))
    room = Shape(max(0, whole.millicpus - held.millicpus), max(0, whole.memory_mb - held.memory_mb),
                 max(0, whole.gpus - held.gpus))
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    usable = _ready(node) and not cordoned
    state = "CORDONED" if cordoned else "READY" if usable else "NOT READY"
    free = (max(0, math.floor(cpus - used[0] + 1e-9)), max(0, int(memory_mb - used[1] // MIB)),
            max(0, int(gpus - used[2]))) if usable else (0, 0, 0)
    return ClusterNode(name=str((node.get("metadata") or {}).get("name", "")), cpus=cpus, memory_mb=memory_mb,
    gpus=gpus,
                     free_gpus=free[2], usable=usable, partitions=(pool,), state=state, address=_address(node),
                     free_cpus=free[0], free_memory_mb=free[1], room=room, kept=held)


def node_pools(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], label: str,
               pools: Sequence[str], user_of: Callable[[str], str | None] = lambda namespace: "",
               ) -> tuple[NodePool, ...]:
    """Each GPU pool (a value of the node label `label`, in the configured order; the first is the default) with
    its nodes, their free resources less what the pods bound to them that have not ended request, and what a job
    can ever have of them: less what the pods in namespaces that are no user's (`user_of` None: the hub's, the
    cluster's own) request, which no user's job ends."""
    used: dict[str, tuple[float, float, float]] = {}
    kept: dict[str, tuple[float, float, float]] = {}
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or phase in ("Succeeded", "Failed"):
            continue
        asked = pod_requests(pod)
        owners = [used] if user_of((pod.get("metadata") or {}).get("namespace", "")) is not None else [used, kept]
        for counted in owners:
            before = counted.get(node_name, (0.0, 0.0, 0.0))
            counted[node_name] = (before[0] + asked[0], before[1] + asked[1], before[2] + asked[2])
    members: dict[str, list[ClusterNode]] = {pool: [] for pool in pools}
    for node in nodes:
        pool = ((node.get("metadata") or {}).get("labels") or {}).get(label)
        if pool in members:
            name = str((node.get("metadata") or {}).get("name", ""))
            members[pool].append(node_record(node, used.get(name, (0.0, 0.0, 0.0)), pool,
                                             kept.get(name, (0.0, 0.0, 0.0))))
    return tuple(NodePool(name=pool, nodes=tuple(sorted(found, key=lambda n: n.name)), max_minutes=None,
                                default=i == 0) for i, (pool, found) in enumerate(members.items()))


def gpu_type_pools(gpu_types: Sequence[str], listed: Sequence[NodePool], configured: Shape) -> tuple[Pool, ...]:
    """Each GPU type (the first is the default) as a server sees it: its usable nodes as a pod can ever have them
    (`listed`: node_pools; each node's room, less what the cluster's own pods hold) with the most GPUs free on
    one of them now; the `configured` shape (k8s_node_cpus, ...) where the nodes could not be listed or none is
    usable. The scheduler and the ResourceQuota have the last word."""
    found = {pool.name: pool for pool in listed if pool.usable_nodes}

    def pool(index: int, gpu_type: str) -> Pool:
        nodes = found.get(gpu_type)
        if nodes is None:
            return Pool(name=gpu_type, cpus_per_node=configured.millicpus // 1000,
                        memory_mb_per_node=configured.memory_mb, gpus_per_node=configured.gpus,
                        free_gpus_per_node=configured.gpus, default=index == 0)
        rooms = [node.room for node in nodes.rooms()]
        return Pool(name=gpu_type, cpus_per_node=max(r.millicpus // 1000 for r in rooms),
                    memory_mb_per_node=max(r.memory_mb for r in rooms), gpus_per_node=max(r.gpus for r in rooms),
                    free_gpus_per_node=nodes.free_gpus_per_node, default=index == 0)
    return tuple(pool(index, gpu_type) for index, gpu_type in enumerate(gpu_types))
