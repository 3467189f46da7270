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
    implementation: str  # "module:Class" implementing portal.scheduler.protocol.Scheduler
    # Its job ids, unanchored: they become directory names, routes and Kubernetes object names, so each has one
    # spelling, and no two schedulers' ids look alike, so that an id names its scheduler (the class's `job_ids`
    # is this, anchored: portal.records.ids.anchored).
    job_ids: str
    # Whether its job records are job.json files in the users' homes (the class's `records_in_home`): the records
    # layer then reads them, checking their ids against `job_ids` (portal.records.ids.JOB_ID).
    records_in_home: bool = False
    spawner: str = ""  # "module:Class": the hub's spawner of users' servers there; "" where it runs only jobs
    # Where its servers reach the hub's API: True for servers on the box's nodes (network namespaces behind the
    # box's bridge, whose gateway address is the host's: `box_gateway`), False for servers that reach it on the
    # loopback of the hub's own host.
    hub_api_at_gateway: bool = False
    # Its own commands outside its package, as modules: entry points above the scheduler layer (they use the job
    # API, portal.jobs), kept at the names sites run them by. Only these, its package and its spawner's modules
    # (spawners/<name>*.py) import its package (tests/unit/portal/test_registrations.py).
    tools: tuple[str, ...] = ()


SCHEDULERS: dict[str, Registered] = {
    # Slurm's ids are ASCII digits without leading zeros ("0002" and "2" would name the same job, and an owner
    # check that compares strings would take them for two); a sweep's is its job array's.
    "slurm": Registered("portal.scheduler.slurm.scheduler:SlurmScheduler", job_ids=r"[1-9][0-9]{0,11}",
                        records_in_home=True, spawner="spawners.slurm:PortalSlurmSpawner", hub_api_at_gateway=True,
                        # `python -m portal.accounts` (the directory's groups as associations); slurm.conf's MailProg
                        tools=("portal.accounts", "portal.jobmail")),
    # Jobs on this machine, no servers: "local-<date>T<time>-<hex>".
    "local": Registered("portal.scheduler.local:LocalScheduler", job_ids=r"local-[0-9]{8}T[0-9]{6}-[0-9a-f]{6}",
                        records_in_home=True),
    # "k8s-<date>-<time>-<hex>": also a valid Job or MPIJob name (a DNS-1123 label), which is the job's record.
    "kubernetes": Registered("portal.scheduler.kubernetes.scheduler:KubernetesScheduler",
                             job_ids=r"k8s-[0-9]{8}-[0-9]{6}-[0-9a-f]{6}",
                             spawner="spawners.kubernetes:PortalKubeSpawner"),
}


def server_schedulers() -> tuple[str, ...]:
    """The schedulers that also run users' servers: the `scheduler` setting's choices."""
    return tuple(name for name, registered in SCHEDULERS.items() if registered.spawner)


def split(named: str) -> tuple[str, str]:
    """("module", "Class") of a "module:Class" string."""
    module, _, cls = named.partition(":")
    return module, cls
