"""The dashboard benchmark on the Slurm box (`make up`, or the box that DSPORTAL_CONFIG names): what
bench.dashboard needs there besides the hub's users and tokens (bench.dashboard_users). The simulated users' Unix
accounts (home 0700) and the submitters' Slurm associations (MaxJobs=0: no job of theirs ever starts), their
leftover jobs and earlier job directories, what the dashboard ran (GET api/cluster's counters: the shared squeue
is the target's counter) and the box's processes (the hub, its proxy and dashboard, slurmctld)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from bench.common import Proc, counts_delta, processes
from bench.dashboard_users import (
    cancel_leftover_jobs,
    clear_job_dirs,
    ensure_slurm_associations,
    ensure_unix_users,
    remove_slurm_associations,
    remove_unix_users,
)
from portal.config import PortalConfig

HUB_CHILDREN = (("dashboard", "portal.service"), ("proxy", "configurable-http-proxy"))


def hub_children(hub_pid: int, procs: Sequence[Proc]) -> dict[str, int]:
    """The dashboard and the proxy among the hub's children: label -> pid."""
    found = {}
    for proc in procs:
        if proc.ppid != hub_pid:
            continue
        for label, marker in HUB_CHILDREN:
            if marker in " ".join(proc.argv):
                found[label] = proc.pid
    return found


def slurm_counts(before: dict, after: dict) -> dict[str, int]:
    """What the dashboard ran between two readings of GET api/cluster, by command."""
    found = {"squeue (shared)": after["squeue_calls"] - before["squeue_calls"],
             "scontrol (shared)": after.get("scontrol_calls", 0) - before.get("scontrol_calls", 0)}
    found.update({f"{k} (as users)": v for k, v in counts_delta(before.get("user_slurm_calls", {}),
                                                                 after.get("user_slurm_calls", {})).items()})
    found.update({f"runuser {k}": v for k, v in counts_delta(before.get("runuser_calls", {}),
                                                              after.get("runuser_calls", {})).items()})
    if "hub_calls" in after:
        found["hub API requests"] = after["hub_calls"] - before.get("hub_calls", 0)
    return found


class SlurmBox:
    """The Slurm box, its hub at cfg.hub_url (HTTP)."""

    name = "slurm"
    result = "dashboard"  # docs/results/dashboard.json
    calls_name, calls_row = "squeue", "squeue (shared)"  # the target's counter: its name, and its row in `ran`
    ran_title = "what the dashboard ran during the run"
    ca: str | None = None

    def __init__(self, cfg: PortalConfig):
        self.cfg = cfg
        self.hub_url = cfg.hub_url

    def prepare(self, names: Sequence[str], submitters: int) -> dict[str, float]:
        """Unix users (all), Slurm associations (the submitters'), and the data the jobs would read; how many were
        made and what each step took (s)."""
        from portal.jobs.demo_data import ensure_demo_data

        ensure_demo_data(self.cfg)  # what the submitted jobs read (`make up` makes it too)
        timings: dict[str, float] = {}
        started = time.monotonic()
        timings["unix users made"] = ensure_unix_users(names)
        timings["unix users s"] = time.monotonic() - started
        started = time.monotonic()
        timings["slurm associations made"] = ensure_slurm_associations(self.cfg, names[:submitters])
        timings["slurm associations s"] = time.monotonic() - started
        return timings

    def clear(self, names: Sequence[str], submitters: int) -> dict[str, float]:
        """Before a run: the users' jobs still queued cancelled, the submitters' ~/jobs of earlier runs removed."""
        return {"leftover jobs cancelled before": cancel_leftover_jobs(self.cfg, names),
                "job directories of earlier runs removed": clear_job_dirs(names[:submitters])}

    def remove(self, names: Sequence[str]) -> str:
        """Delete what `prepare` made (the hub users aside); what was removed, in words."""
        slurm = remove_slurm_associations(self.cfg, names)
        return f"{slurm} Slurm associations and {remove_unix_users(names)} Unix users"

    def processes(self) -> dict[str, int]:
        """The hub and what it started (proxy, dashboard), slurmctld: label -> pid."""
        run = self.cfg.state_dir / "run"
        found = {}
        for label, pid_file in (("hub", "hub.pid"), ("slurmctld", "slurmctld.pid")):
            try:
                found[label] = int((run / pid_file).read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        if "hub" in found:
            found.update(hub_children(found["hub"], processes()))
        return found

    def read_counters(self) -> dict:
        return {}  # GET api/cluster's counters say it all here

    def ran(self, cluster_before: dict, cluster_after: dict, box_before: dict, box_after: dict) -> dict[str, int]:
        return slurm_counts(cluster_before, cluster_after)

    def after_run(self, names: Sequence[str]) -> dict[str, float]:
        """After a run: the jobs whose cancel failed, cancelled (a tiny job left would start training)."""
        return {"leftover jobs cancelled": cancel_leftover_jobs(self.cfg, names)}
