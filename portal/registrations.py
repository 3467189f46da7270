"""Every scheduler the portal has, registered in one place: the one line a new scheduler adds outside its own package.

Pure data at the bottom of the layers (it imports nothing of the portal), so that each layer reads the same table:
the settings check the `scheduler` setting against it (the schedulers with a spawner), portal.scheduler.registry
imports each implementation by it, and the hub's configuration (jupyterhub_config.py) its spawner. Classes are
named as "module:Class" strings and imported only when asked for, so this module knows no scheduler's code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Registered:
    implementation: str  # "module:Class" implementing portal.scheduler.Scheduler
    spawner: str = ""  # "module:Class": the hub's spawner of users' servers there; "" where it runs only jobs
    # Where its servers reach the hub's API: True for servers on the box's nodes (network namespaces behind the
    # box's bridge, whose gateway address is the host's: `box_gateway`), False for servers that reach it on the
    # loopback of the hub's own host.
    hub_api_at_gateway: bool = False


SCHEDULERS: dict[str, Registered] = {
    "slurm": Registered("portal.scheduler.slurm.scheduler:SlurmScheduler", spawner="spawners.slurm:PortalSlurmSpawner",
                        hub_api_at_gateway=True),
    "local": Registered("portal.scheduler.local:LocalScheduler"),  # jobs on this machine, no servers
    "kubernetes": Registered("portal.scheduler.kubernetes.scheduler:KubernetesScheduler",
                             spawner="spawners.kubernetes:PortalKubeSpawner"),
}


def server_schedulers() -> tuple[str, ...]:
    """The schedulers that also run users' servers: the `scheduler` setting's choices."""
    return tuple(name for name, registered in SCHEDULERS.items() if registered.spawner)


def split(named: str) -> tuple[str, str]:
    """("module", "Class") of a "module:Class" string."""
    module, _, cls = named.partition(":")
    return module, cls
