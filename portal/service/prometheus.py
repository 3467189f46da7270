"""The portal's Prometheus endpoint (docs/operations.md): `GET <prefix>metrics`, in Prometheus' text format.

Who may read it: a request whose hub token holds `read:metrics`, the scope of the hub's own `/hub/metrics`, so that
one role lets a site's Prometheus read both (the token needs `access:services!service=portal` too, as every request
to the dashboard). Per-user series go only to a reader who may list every user (`read:users` or `admin:users`, or a
hub admin's token); every other reader gets the same figures per group and scheduler.

What it says, read at scrape time from what the dashboard keeps (no command runs for a scrape but the shared
queue answer, at most once per refresh interval):

    dsportal_gpu_{held,busy,idle,unknown}_seconds_total{scheduler,group[,user]}
        GPU-seconds held, of them busy (the busy share), held while idle, held while unknown: each user's totals in
        the GPU watch's ledger (portal.gpus.ledger), by the group whose GPU quota applies to them ("none": none)
    dsportal_jobs{scheduler,kind,state,program}       the queue now: jobs and servers by state and program
                                                      (`unknown` where the queue does not say: Kubernetes)
    dsportal_sweep_trials{scheduler,state,program}    sweeps' trials in the queue now: RUNNING, and PENDING those
                                                      that may start beside them within the sweep's `parallel`
                                                      (Slurm: a job array's tasks; Kubernetes: its trial pods)
    dsportal_queue_pending{scheduler,partition,kind}  jobs and servers waiting now, by partition (or node pool)
    dsportal_queue_oldest_wait_seconds{...}           the longest of their waits so far, since their submit
    dsportal_scheduler_up{scheduler}                  1 when the scheduler answered this scrape's queue, else 0
    dsportal_refusals_total{action,reason}            submits and cancels refused (portal.service.refusals)
    dsportal_gpu_watch_events_total{act,kind}         the GPU watch's warnings, stops and flags (gpu_watch)
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import astuple
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from portal.config import PortalConfig
from portal.errors import SchedulerError
from portal.gpus.ledger import TOTALS, Ledger, Totals
from portal.quota import quota_group
from portal.records.programs import registry as programs
from portal.records.states import PENDING, RUNNING
from portal.scheduler.cluster import UNNAMED_JOB
from portal.scheduler.snapshot import ClusterSnapshot

REGISTRY = CollectorRegistry(auto_describe=True)  # the dashboard's own counters, never the process-wide default
READ_SCOPE = "read:metrics"
PER_USER_SCOPES = frozenset(("read:users", "admin:users"))
WATCH_EVENTS = Counter("dsportal_gpu_watch_events", "The GPU watch's events carried out: warnings, stops and flags, "
                       "of servers and jobs", ("act", "kind"), registry=REGISTRY)
DOCS = {"held": "GPU-seconds held by the users' servers and jobs (the nodes' readings)",
        "busy": "GPU-seconds busy: each reading's interval times its GPU's busy share",
        "idle": "GPU-seconds held while idle (known, under 5 % busy)",
        "unknown": "GPU-seconds held while the reader could not tell"}


def may_read(identity: Mapping[str, Any]) -> tuple[bool, bool]:
    """(may read the endpoint, may see per-user series) for a hub identity (its model, with the token's scopes)."""
    scopes = set(identity.get("scopes") or ())
    return READ_SCOPE in scopes, bool(identity.get("admin")) or bool(scopes & PER_USER_SCOPES)


def program_of(job_name: str, names: Iterable[str]) -> str:
    """A job's program from its scheduler's job name (`chexnet`, `chexnet-sweep`): a label of few values, `other`
    for a name of the user's own (sbatch from a terminal), `unknown` where the queue does not say (Kubernetes)."""
    if job_name == UNNAMED_JOB:
        return "unknown"
    known = set(names)
    name = job_name.removesuffix("-sweep")
    return name if name in known else "other"


class Scrape:
    """One scrape's figures (a prometheus_client collector)."""

    def __init__(self, cfg: PortalConfig, totals: Mapping[str, Totals], groups: Mapping[str, tuple[str, ...]],
                 snapshot: ClusterSnapshot | None, per_user: bool, now: float = 0.0):
        self.cfg, self.totals, self.groups, self.snapshot, self.per_user = cfg, totals, groups, snapshot, per_user
        self.now = now or time.time()

    def collect(self) -> Iterator[Metric]:
        labels = ["scheduler", "group", *(["user"] if self.per_user else [])]
        families = {name: CounterMetricFamily(f"dsportal_gpu_{name}_seconds", DOCS[name], labels=labels)
                    for name in ("held", "busy", "idle", "unknown")}
        sums: dict[tuple[str, ...], list[float]] = {}
        for user, totals in sorted(self.totals.items()):
            group = quota_group(self.cfg.gpu_quota, self.groups.get(user, ())) or "none"
            key = (self.cfg.scheduler, group, *((user,) if self.per_user else ()))
            sums[key] = [a + b for a, b in zip(sums.get(key, [0.0] * len(TOTALS)), astuple(totals), strict=True)]
        for key, values in sorted(sums.items()):
            for field, value in zip(TOTALS, values, strict=True):
                families[field.removesuffix("_s")].add_metric(list(key), value)
        yield from families.values()
        up = GaugeMetricFamily("dsportal_scheduler_up", "1 when the scheduler answered this scrape's queue",
                               labels=["scheduler"])
        up.add_metric([self.cfg.scheduler], 0 if self.snapshot is None else 1)
        yield up
        if self.snapshot is None:
            return
        jobs = GaugeMetricFamily("dsportal_jobs", "Jobs and servers in the scheduler's queue now, by state and "
                                 "program", labels=["scheduler", "kind", "state", "program"])
        names = programs().names
        counted = Tally(("server" if job.server else "job", job.state,
                         "jupyterlab" if job.server else program_of(job.name, names))
                        for job in self.snapshot.queue.values())
        for (kind, state, program), count in sorted(counted.items()):
            jobs.add_metric([self.cfg.scheduler, kind, state, program], count)
        yield jobs
        trials = GaugeMetricFamily("dsportal_sweep_trials", "Sweeps' trials in the queue now: running, and waiting "
                                   "to start within their sweep's parallel", labels=["scheduler", "state", "program"])
        tallied: Tally[tuple[str, str]] = Tally()
        for job in self.snapshot.queue.values():
            program = program_of(job.name, names)
            tallied.update({(RUNNING, program): job.trials_running, (PENDING, program): job.trials_waiting})
        for (state, program), count in sorted(tallied.items()):
            if count:
                trials.add_metric([self.cfg.scheduler, state, program], count)
        yield trials
        yield from self.waits()

    def waits(self) -> Iterator[Metric]:
        """The queue's waits now, by partition and kind: how many wait, and the longest wait so far."""
        assert self.snapshot is not None
        labels = ["scheduler", "partition", "kind"]
        pending = GaugeMetricFamily("dsportal_queue_pending", "Jobs and servers waiting in the queue now, by "
                                    "partition (Kubernetes: GPU node pool)", labels=labels)
        oldest = GaugeMetricFamily("dsportal_queue_oldest_wait_seconds", "How long the longest-waiting of them has "
                                   "waited since its submit", labels=labels)
        waits: dict[tuple[str, str], list[float]] = {}
        for job in self.snapshot.queue.values():
            if job.state == PENDING:
                waits.setdefault((job.partition, "server" if job.server else "job"), []).append(
                    max(0.0, self.now - job.submitted) if job.submitted else 0.0)
        for (partition, kind), seconds in sorted(waits.items()):
            pending.add_metric([self.cfg.scheduler, partition, kind], len(seconds))
            oldest.add_metric([self.cfg.scheduler, partition, kind], max(seconds))
        yield pending
        yield oldest


def exposition(cfg: PortalConfig, folder: Path, snapshot: Any, groups: Mapping[str, tuple[str, ...]],
               per_user: bool) -> bytes:
    """The endpoint's answer: the dashboard's counters, then this scrape's figures. `snapshot`: how to get the
    shared queue answer (ClusterCache.snapshot)."""
    try:
        now: ClusterSnapshot | None = snapshot()
    except SchedulerError:
        now = None
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(Scrape(cfg, Ledger(folder).totals, groups, now, per_user, time.time()))
    return generate_latest(REGISTRY) + generate_latest(scrape)


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # the text format every Prometheus reads
