"""spawners.options: a spawner's form is a view of its scheduler's limits, asked over one look at the cluster that
a burst of spawn requests shares."""

from __future__ import annotations

import asyncio
import time
import types
from typing import Any

from jupyterhub.spawner import LocalProcessSpawner

from portal.config import PortalConfig
from portal.scheduler.local import LocalScheduler
from portal.scheduler.snapshot import ClusterSnapshot
from spawners.options import SPAWN_SNAPSHOT_S, ServerOptionsMixin


class CountingScheduler(LocalScheduler):
    """This machine, counting how often the cluster is looked at."""

    looks = 0

    def snapshot(self, clock=time.monotonic) -> ClusterSnapshot:
        CountingScheduler.looks += 1
        return super().snapshot(clock)


class MachineSpawner(ServerOptionsMixin, LocalProcessSpawner):
    made: Any = None

    def scheduler(self):
        return self.made

    def apply_server_options(self, options) -> None:
        self.user_options = options.to_dict()


def spawner() -> MachineSpawner:
    user = types.SimpleNamespace(name="alice", groups=[types.SimpleNamespace(name="gpu-users")], url="/user/alice/")
    made = MachineSpawner(user=user, portal=PortalConfig())
    made.made = CountingScheduler(PortalConfig())
    return made


def test_a_burst_of_spawn_requests_looks_at_the_cluster_once_and_a_later_one_again():
    CountingScheduler.looks = 0
    alice = spawner()

    async def burst() -> None:
        for _ in range(20):  # the form, its submit, a client's retries: each validated against the limits
            await alice.options_from_form({"gpus": ["0"], "_xsrf": ["t"]})
    started = time.monotonic()
    asyncio.run(burst())
    assert CountingScheduler.looks == 1 or time.monotonic() - started > SPAWN_SNAPSHOT_S, CountingScheduler.looks
    time.sleep(SPAWN_SNAPSHOT_S)
    asyncio.run(alice.options_from_form({"gpus": ["0"], "_xsrf": ["t"]}))
    assert CountingScheduler.looks >= 2  # a request after the interval sees the cluster as it is now
