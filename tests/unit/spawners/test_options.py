"""spawners.options: a spawner's form is a view of its scheduler's limits, asked over one look at the cluster that
a burst of spawn requests shares."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import types
from typing import Any
from unittest import mock

from jupyterhub.spawner import LocalProcessSpawner

from portal.config import SERVER_DASHBOARD_ENV, PortalConfig
from portal.scheduler.local import LocalScheduler
from portal.scheduler.snapshot import ClusterSnapshot
from portal.scheduler.usage import UsageReport
from spawners.options import SPAWN_BUDGET_S, SPAWN_SNAPSHOT_S, ServerOptionsMixin


class CountingScheduler(LocalScheduler):
    """This machine, counting how often the cluster and the accounting are looked at."""

    looks = 0
    accounted = 0
    ahead = 0  # the GPU-minutes its limits say the user's queue holds ahead

    def limits(self, user, snapshot=None, held=()):
        return dataclasses.replace(super().limits(user, snapshot, held), gpu_minutes_ahead=CountingScheduler.ahead)

    def snapshot(self, clock=time.monotonic) -> ClusterSnapshot:
        CountingScheduler.looks += 1
        return super().snapshot(clock)

    def usage(self, user, everyone, now):
        CountingScheduler.accounted += 1
        return UsageReport(now, per_user={user.name: 1.5})


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


def test_a_spawns_checks_a_moment_apart_read_the_users_week_in_the_accounting_once():
    """The form's submit and the start each weigh the options against the weekly budget: one sacct between them."""
    CountingScheduler.accounted, CountingScheduler.ahead = 0, 0
    alice = spawner()
    alice.portal = PortalConfig(gpu_hours_budget={"gpu-users": 40})
    checks = [asyncio.run(alice.limits()).budget for _ in range(3)]
    assert CountingScheduler.accounted == 1 and {(b.limit, b.used) for b in checks} == {(40, 1.5)}
    CountingScheduler.ahead = 90  # a job queued since: charged ahead at once, the week's use not read again
    queued = asyncio.run(alice.limits()).budget
    assert CountingScheduler.accounted == 1 and (queued.used, queued.ahead_minutes) == (1.5, 90)
    read_at, budget = alice._budget
    alice._budget = (read_at - SPAWN_BUDGET_S, budget)  # that read, SPAWN_BUDGET_S older
    asyncio.run(alice.limits())
    assert CountingScheduler.accounted == 2  # a form rendered earlier than that is weighed again


def test_a_starting_server_gets_the_users_mlflow_account_in_its_environment(mlflow_server, tmp_path):
    """spawners.options.prepare_mlflow, which both spawners' `start` calls first: the user's account is made (off
    the event loop) and its MLflow variables join the server's environment, so a notebook's `mlflow` client logs
    and reads as them; with no server configured, nothing is added."""
    admin = tmp_path / "admin"
    admin.write_text(":".join(mlflow_server.admin) + "\n")
    made = spawner()
    made.portal = PortalConfig(state_dir=tmp_path, mlflow_url=mlflow_server.url, mlflow_admin_file=str(admin))
    asyncio.run(made.prepare_mlflow())
    with mock.patch.object(LocalProcessSpawner, "get_env", lambda self: {"JUPYTERHUB_API_TOKEN": "t"}):
        env = made.get_env()
        assert env["MLFLOW_TRACKING_URI"] == mlflow_server.url and env["MLFLOW_TRACKING_USERNAME"] == "alice"
        assert env["MLFLOW_EXPERIMENT_ID"] and len(env["MLFLOW_TRACKING_PASSWORD"]) == 64
        assert env["JUPYTERHUB_API_TOKEN"] == "t"  # the spawner's own environment stays
        made.portal = PortalConfig(state_dir=tmp_path, mlflow_url="")
        asyncio.run(made.prepare_mlflow())
        # no MLflow: the spawner's own environment, and the dashboard as the server reaches it (portal.lab_gpus)
        assert made.get_env() == {"JUPYTERHUB_API_TOKEN": "t",
                                  SERVER_DASHBOARD_ENV: made.portal.dashboard_for_servers}
