"""Each node's GPU reader in the Kubernetes box (portal.gpus.agent, with the stand-in for the box's FAKE GPUs), while
the hub is installed: it asks the API server, as the hub's service account, which pods hold GPUs on its node
(KubernetesScheduler.gpu_holders), reads their cgroups (the nodes' pods are this machine's processes) and writes
into the hub's claim, `<state>/volumes/hub/gpus` (root's, 0700): the hub pod's `<state_dir>/gpus`, where its
dashboard's GPU watch and pages read them (docs/gpus.md). It runs on the machine beside the node's kubelet, as the
Slurm box's readers run beside its slurmds (deploy/local/parts/gpus.py), and opens no port."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from deploy.kubernetes.kubeparts.hub import state_dir
from deploy.kubernetes.kubeparts.layout import PORTAL, KubeBox
from deploy.netns import Node
from deploy.supervise import Service

READY_S = 30  # its first reading: one list of the pods


def readings_dir(box: KubeBox) -> Path:
    return state_dir(box) / "gpus"


def every_s(box: KubeBox) -> str:
    """As often as the hub's GPU watch passes: its gpu_read_every_s (the box's hub_settings, else the default)."""
    return dict(box.hub_settings).get("gpu_read_every_s", str(PORTAL.gpu_read_every_s))


def environment(box: KubeBox) -> dict[str, str]:
    """The portal's settings for the reader: the Kubernetes scheduler as the hub's service account (no file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSPORTAL_")}
    return {**env, "DSPORTAL_SCHEDULER": "kubernetes", "DSPORTAL_K8S_KUBECONFIG": str(box.kubeconfig("hub")),
            "DSPORTAL_STATE_DIR": str(state_dir(box))}


def _ready(box: KubeBox, node: Node) -> str | None:
    return None if (readings_dir(box) / f"{node.name}.json").exists() else f"{node.name}: no GPU reading yet"


def service(node: Node) -> Service:
    return Service(
        f"gpus-{node.name}", "portal.gpus.agent", lambda box: None,
        lambda box: [sys.executable, "-m", "portal.gpus.agent", "--node", node.name, "--out", str(readings_dir(box)),
                     "--reader", "standin", "--gpus", str(box.gpus_per_node), "--every", every_s(box)],
        lambda box: _ready(box, node), READY_S, env=environment)


def services(box: KubeBox) -> list[Service]:
    return [service(node) for node in box.node_network.nodes]
