"""Each node's GPU reader (portal.gpus.agent) with the stand-in for the box's FAKE GPUs: it reads the node's
cgroups and asks slurmctld who holds what, every gpu_read_every_s, into <state_dir>/gpus/<node>.json (root's, 0700),
where the portal reads them (portal.gpus.readings_dir). It runs on the login host beside the node's slurmd: the
nodes share this machine's cgroups and /proc, and it opens no port."""

from __future__ import annotations

from deploy.local.parts.layout import Layout
from deploy.netns import Node
from deploy.supervise import Service
from portal.gpus import readings_dir


def _ready(lay: Layout, node: Node) -> str | None:
    return None if (readings_dir(lay.cfg) / f"{node.name}.json").exists() else f"{node.name}: no GPU reading yet"


def service(node: Node) -> Service:
    return Service(
        f"gpus-{node.name}", "portal.gpus.agent", lambda lay: None,
        lambda lay: [f"{lay.cfg.venv}/bin/python", "-m", "portal.gpus.agent", "--node", node.name,
                     "--out", str(readings_dir(lay.cfg)), "--reader", "standin",
                     "--gpus", str(lay.cfg.slurm_node_gpus), "--every", str(lay.cfg.gpu_read_every_s)],
        lambda lay: _ready(lay, node), 30,
        env=lambda lay: lay.slurm_env,  # the box's settings (DSPORTAL_CONFIG) and its Slurm's
        beside=True)
