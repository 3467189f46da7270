"""The GPU quota: its rule, its arithmetic and its wording, for the spawn form, the jobs and the dashboard alike.

The rule: a user may hold at most `quota_for(groups)` GPUs at once (the largest `gpu_quota` among their groups,
else `default_gpu_quota`), counting everything they run together: their JupyterLab server and every training job,
pending or running, on all nodes. A pending job counts: it is a claim on the quota.

A job array (a sweep: its tasks are its trials, at most `parallel` at once) claims what may run of it at once:
each running task holds its own GPUs, and its pending tasks claim as many tasks' GPUs as may still start beside
the running ones under its throttle (`array_claim`), whoever asks: Slurm's queue (one entry for the pending rest of
an array), the dashboard's count of the sweeps it submitted since its snapshot, Kubernetes' trial pods.

Who holds it:
- the portal refuses first, with `GpuQuota`'s numbers and words: the spawn form (spawners.forms), a job's spec
  (portal.records.spec) and the dashboard, which adds the jobs it submitted since its cluster snapshot was taken
  (`GpuQuota.with_submitted`) so that two quick submits cannot both pass;
- the scheduler holds it too, for whatever does not come through the portal: Slurm's GrpTRES gres/gpu on each
  user's association (portal.accounts, `quota_account` picks the group that gives it), Kubernetes's ResourceQuota
  on requests.nvidia.com/gpu in the user's namespace (portal.scheduler.kubernetes.manifests).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


def quota_for(quotas: Mapping[str, int], default: int, groups: Iterable[str]) -> int:
    """The most GPUs a member of `groups` may hold at once, server and jobs together: the largest quota among them;
    `default` for a user in none of `quotas`' groups."""
    return max([quotas[g] for g in groups if g in quotas], default=default)


def quota_group(quotas: Mapping[str, int], groups: Iterable[str]) -> str | None:
    """The group whose quota applies (the largest; ties: alphabetical); None when none of `groups` has one."""
    found = [g for g in groups if g in quotas]
    return min(found, key=lambda g: (-quotas[g], g)) if found else None


def array_claim(task_gpus: int, pending: int, running: int, throttle: int) -> int:
    """The GPUs a job array's pending tasks claim: as many tasks as may still start beside its `running` ones under
    its `throttle` (Slurm's `%N`, a sweep's `parallel`; 0: none, every pending task may start), each `task_gpus`."""
    can_start = pending if throttle <= 0 else min(pending, max(0, throttle - running))
    return task_gpus * max(0, can_start)


@dataclass(frozen=True)
class GpuHolder:
    """One of a user's jobs that holds (or waits for) GPUs."""

    job_id: str
    gpus: int  # all nodes together
    server: bool = False  # their JupyterLab server

    def describe(self) -> str:
        return "your server" if self.server else f"job {self.job_id}"


@dataclass(frozen=True)
class GpuQuota:
    """A user's quota and what their server and jobs hold of it now."""

    limit: int
    groups: tuple[str, ...] = ()
    holders: tuple[GpuHolder, ...] = ()

    @property
    def in_use(self) -> int:
        return sum(h.gpus for h in self.holders)

    @property
    def left(self) -> int:
        return max(0, self.limit - self.in_use)

    def cap(self, gpus: int, nodes: int = 1) -> int:
        """The most of `gpus` (what a node has, or has free) this user may ask of each of `nodes` nodes now: what
        the quota leaves, shared evenly. The one rule the job form, the API and the spawn form apply."""
        return max(0, min(gpus, self.left // max(1, nodes)))

    def with_submitted(self, submitted: Sequence[tuple[str, int]]) -> GpuQuota:
        """With the (job id, GPUs) of jobs submitted since the snapshot this was read from was taken."""
        added = tuple(GpuHolder(job_id, gpus) for job_id, gpus in submitted if gpus)
        return GpuQuota(self.limit, self.groups, self.holders + added)

    # --- the words: the spawn form and the job spec say them the same way ---

    def note(self, scope: str = "") -> str:
        """ (your GPU quota is 4[ for all nodes together]; your groups: a, b)"""
        return f" (your GPU quota is {self.limit}{scope}; your groups: {', '.join(self.groups) or 'none'})"

    def held(self) -> str:
        """What the user's jobs and server hold, against the quota (jobs waiting in the queue can ask for more)."""
        if self.in_use <= self.limit:
            return f"you use {self.in_use} of your {self.limit} GPUs"
        return f"your jobs and server hold or wait for {self.in_use} GPUs, more than your quota of {self.limit}"

    def described(self) -> tuple[str, ...]:
        """("your server", "job 12")"""
        return tuple(h.describe() for h in self.holders)

    def holders_text(self) -> str:
        return ", ".join(self.described())
