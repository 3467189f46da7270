"""The dashboard under load: many users whose jobs page refreshes itself while some submit and cancel.

    python -m bench.dashboard [--users 1000] [--submitters 50] [--seconds 60] [--interval <the page's period>]
                              [--submit-every <the same period>]

Against the running box (`make up`, or the one DSPORTAL_CONFIG names); run as root. It makes its simulated users
itself, idempotently and kept for the next run (bench.dashboard_users): Unix users bench001.. (home 0700), the same
hub users (batched through the hub's REST API, as its `admin`), and one API token each. Each user then does what
an open jobs page does: `GET jobs` once per refresh period (the page's script asks for its rows, `jobs?part=rows`,
once per period, which `GET api/cluster` tells; the whole page is the rows and more), the users' reads spread
evenly over the period; the first `--submitters` users also
submit a tiny CPU job and cancel it at once, each period; their Slurm associations have MaxJobs=0, so no such
job ever starts (only the dashboard's paths are measured), and their ~/jobs of earlier runs are removed first.
Printed: per kind of request the count, p50/p99/max
latency and errors; what the dashboard asked Slurm and the hub meanwhile (`GET api/cluster`'s counters); the CPU
that the load generator and the box's processes used; the targets: p99 <= 250 ms per kind of read, no errors,
squeue at most once per refresh interval. Saved as docs/results/dashboard.json; exit 1 when a target is not met.
`--remove-users` deletes the simulated users (Unix and hub) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import markdown_table as table
from bench.dashboard_users import (
    bench_users,
    cancel_leftover_jobs,
    clear_job_dirs,
    prepare_users,
    remove_hub_users,
    remove_slurm_associations,
    remove_unix_users,
)
from bench.hub_client import HubClient
from bench.results import Target, save
from portal.config import PortalConfig, load

ADMIN, ADMIN_PASSWORD = "admin", "admin-demo"  # the demo directory's admin (DESIGN.md)
PORTAL = "/services/portal/"
TARGET_P99_MS = 250.0
READS = ("jobs page",)  # what the page's own refresh asks; the p99 target holds for each
# A job that needs no GPU (no quota) and is cancelled at once: only the submit and cancel paths are exercised.
TINY_CPU_JOB = {"template": "chexnet", "gpus_per_node": 0, "cpus_per_task": 1, "memory_gb": 1, "epochs": 1,
                "batch_size": 8, "image_size": 64, "time_limit": "00:05:00"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- pure parts ---

def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank: always a value that was measured. NaN for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"q is {q}; allowed: 0-100")
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def counts_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What was counted between two readings of the same counters (one first seen later started at 0)."""
    return {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] != before.get(k, 0)}


def start_offset(index: int, count: int, period: float) -> float:
    """When user `index` of `count` first reads: evenly over one period, so the load is steady (a thousand
    browsers opened at random times refresh at evenly spread moments, not all at once)."""
    if not 0 <= index < count:
        raise ValueError(f"index is {index}; allowed: 0-{count - 1}")
    return period * index / count


def squeue_allowed(seconds: float, refresh_s: float) -> int:
    """At most one squeue per refresh interval (plus the one the run may start inside)."""
    return math.ceil(seconds / refresh_s) + 1


@dataclass
class Samples:
    """Latencies (ms) and errors of one kind of request."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""

    def add(self, ms: float, error: str | None = None) -> None:
        self.latencies_ms.append(ms)
        if error is not None:
            self.errors += 1
            self.first_error = self.first_error or error

    def figures(self) -> dict[str, float | int]:
        return {"count": len(self.latencies_ms), "p50_ms": percentile(self.latencies_ms, 50),
                "p99_ms": percentile(self.latencies_ms, 99), "max_ms": max(self.latencies_ms, default=math.nan),
                "errors": self.errors}

    def row(self, name: str) -> list[object]:
        f = self.figures()
        return [name, f["count"], f"{f['p50_ms']:.1f}", f"{f['p99_ms']:.1f}", f"{f['max_ms']:.1f}", f["errors"]]


def targets_of(samples: dict[str, Samples], squeue_calls: int, seconds: float, refresh_s: float) -> list[Target]:
    """p99 of each kind of read, errors of every request, squeue calls against one per refresh interval."""
    found = []
    for kind in READS:
        p99 = percentile(samples[kind].latencies_ms, 99)
        found.append(Target(f"p99 of {kind} (ms)", p99, f"<= {TARGET_P99_MS:g}", p99 <= TARGET_P99_MS))
    errors = sum(s.errors for s in samples.values())
    found.append(Target("errors (all requests)", errors, "== 0", errors == 0))
    allowed = squeue_allowed(seconds, refresh_s)
    found.append(Target(f"squeue calls in {seconds:.0f} s", squeue_calls,
                        f"<= {allowed} (once per {refresh_s:g} s)", squeue_calls <= allowed))
    return found


def verdict_lines(targets: Sequence[Target]) -> list[str]:
    return [f"{t.name}: {t.measured:g}, target {t.target}: {'met' if t.met else 'NOT met'}" for t in targets]


def cpu_of(stat_line: str) -> tuple[float, float]:
    """(own, waited-for children's) CPU ticks of a /proc/<pid>/stat line (fields after the command's ')')."""
    fields = stat_line.rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
    return float(utime + stime), float(cutime + cstime)


# --- the box's processes, for where the CPU went ---

def box_processes(cfg: PortalConfig) -> dict[str, int]:
    """The hub and what it started (proxy, dashboard, culler), slurmctld: label -> pid."""
    run = cfg.state_dir / "run"
    found = {}
    for label, pid_file in (("hub", "hub.pid"), ("slurmctld", "slurmctld.pid")):
        try:
            found[label] = int((run / pid_file).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or "hub" not in found:
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) != found["hub"]:
            continue
        for label, marker in (("dashboard", "portal.service"), ("proxy", "configurable-http-proxy")):
            if marker in cmdline:
                found[label] = int(proc.name)
    return found


def cpu_readings(pids: dict[str, int]) -> dict[str, tuple[float, float]]:
    readings = {}
    for label, pid in pids.items():
        try:
            readings[label] = cpu_of(Path(f"/proc/{pid}/stat").read_text())
        except OSError:
            continue
    return readings


def cpu_table(before: dict, after: dict, seconds: float, generator_s: float) -> dict[str, float]:
    """Cores used during the run (CPU seconds / wall seconds) by each process; children: what they ran."""
    cores = {"load generator": generator_s / seconds}
    for label in sorted(after):
        if label in before:
            own = (after[label][0] - before[label][0]) / CLOCK_TICKS
            children = (after[label][1] - before[label][1]) / CLOCK_TICKS
            cores[label] = own / seconds
            cores[f"{label}'s commands"] = children / seconds
    return {k: round(v, 3) for k, v in cores.items()}


# --- the load ---

@dataclass
class Run:
    samples: dict[str, Samples] = field(default_factory=lambda: {k: Samples() for k in (*READS, "submit", "cancel")})
    started: float = 0.0
    stop_at: float = 0.0
    late: int = 0  # actions that started after their slot (the previous one of that user took over a period)
    missed: int = 0  # slots skipped: the previous action of that user took a whole period longer


async def timed(run: Run, kind: str, request) -> object | None:
    started = time.perf_counter()
    try:
        async with request as response:
            body = await response.read()
            ok = response.status < 300  # a redirect (to the hub's login: the token was not taken) is an error
            error = None if ok else f"{kind}: {response.status} {body[:200]!r}"
    except Exception as err:  # a refused or timed-out request is the run's error, counted and shown
        run.samples[kind].add((time.perf_counter() - started) * 1000, f"{kind}: {type(err).__name__}: {err}")
        return None
    run.samples[kind].add((time.perf_counter() - started) * 1000, error)
    return json.loads(body) if ok and response.content_type == "application/json" else (b"" if ok else None)


async def each_period(run: Run, offset: float, period: float, action) -> None:
    """`action()` at run.started + offset, then every `period` after that (slots kept, never drifting). Of the
    slots that passed while an action ran, the latest runs at once (late) and the others are skipped, counted in
    `run.missed` (a page still loading is not reloaded meanwhile): slow answers do not pile up behind each other
    (a minute each, once), and the run ends on time."""
    slot = run.started + offset
    while slot < run.stop_at:
        delay = slot - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -0.05:
            run.late += 1
        await action()
        slot += period
        passed = math.floor((time.monotonic() - slot) / period)
        if passed > 0:
            run.missed += passed
            slot += passed * period


def reader(run: Run, session, base: str, token: str):
    headers = {"Authorization": f"token {token}"}
    return lambda: timed(run, "jobs page", session.get(f"{base}jobs", headers=headers, allow_redirects=False))


def submitter(run: Run, session, base: str, token: str):
    headers = {"Authorization": f"token {token}"}

    async def submit_and_cancel() -> None:
        job = await timed(run, "submit", session.post(f"{base}api/jobs", headers=headers, json=TINY_CPU_JOB))
        if isinstance(job, dict) and "id" in job:
            await timed(run, "cancel", session.delete(f"{base}api/jobs/{job['id']}", headers=headers))
    return submit_and_cancel


async def counters(session, base: str, token: str) -> dict:
    async with session.get(f"{base}api/cluster", headers={"Authorization": f"token {token}"}) as response:
        return await response.json()


async def warm_up(session, base: str, tokens: dict[str, str]) -> float:
    """Every user's first page (what a cold dashboard costs: token checks, first scans), a few at once; seconds."""
    started = time.monotonic()
    sem = asyncio.Semaphore(16)

    async def one(token: str) -> None:
        async with sem:
            async with session.get(f"{base}jobs", headers={"Authorization": f"token {token}"}) as response:
                await response.read()

    await asyncio.gather(*(one(t) for t in tokens.values()))
    return time.monotonic() - started


async def load_run(session, base: str, names: list[str], tokens: dict[str, str], args: argparse.Namespace,
                   period: float) -> Run:
    run = Run()
    run.started = time.monotonic() + 0.5
    run.stop_at = run.started + args.seconds
    tasks = [each_period(run, start_offset(i, len(names), period), period, reader(run, session, base, tokens[n]))
             for i, n in enumerate(names)]
    # Submitters spread over their own period too, half a slot from the readers' grid.
    every = args.submit_every or period
    tasks += [each_period(run, start_offset(i, args.submitters, every) + every / (2 * args.submitters), every,
                          submitter(run, session, base, tokens[n])) for i, n in enumerate(names[:args.submitters])]
    await asyncio.gather(*tasks)
    return run


def slurm_counts(before: dict, after: dict) -> dict[str, int]:
    found = {"squeue (shared)": after["squeue_calls"] - before["squeue_calls"],
             "scontrol (shared)": after.get("scontrol_calls", 0) - before.get("scontrol_calls", 0)}
    found.update({f"{k} (as users)": v for k, v in counts_delta(before.get("user_slurm_calls", {}),
                                                                 after.get("user_slurm_calls", {})).items()})
    found.update({f"runuser {k}": v for k, v in counts_delta(before.get("runuser_calls", {}),
                                                              after.get("runuser_calls", {})).items()})
    if "hub_calls" in after:
        found["hub API requests"] = after["hub_calls"] - before.get("hub_calls", 0)
    return found


def report(args: argparse.Namespace, run: Run, seconds: float, period: float, refresh_s: float,
           slurm: dict[str, int], cores: dict[str, float], setup: dict[str, float]) -> int:
    submits = len(run.samples["submit"].latencies_ms)
    every = args.submit_every or period
    print(f"\n{args.users} users, {args.submitters} submitting and cancelling every {every:g} s "
          f"({args.submitters / every:.1f} submits/s), {seconds:.0f} s, one jobs page per user every "
          f"{period:g} s ({args.users / period:.0f} reads/s); {run.late} requests started late, {run.missed} "
          f"slots missed (the previous request took a whole period longer)\n")
    print(table(["request", "count", "p50 ms", "p99 ms", "max ms", "errors"],
                [s.row(k) for k, s in run.samples.items()]))
    print(f"\nwhat the dashboard ran during the run ({submits} submits; refresh interval {refresh_s:g} s)\n")
    print(table(["command", "count", "per second"], [[k, v, f"{v / seconds:.2f}"] for k, v in slurm.items()]))
    print("\nCPU during the run (cores; 'commands': the processes it ran and waited for)\n")
    print(table(["process", "cores"], [[k, f"{v:.2f}"] for k, v in cores.items()]))
    targets = targets_of(run.samples, slurm["squeue (shared)"], seconds, refresh_s)
    print()
    for line in verdict_lines(targets):
        print(line)
    for kind, samples in run.samples.items():
        if samples.first_error:
            print(f"first error ({kind}): {samples.first_error}")
    data = {"users": args.users, "submitters": args.submitters, "submit_every_s": every, "seconds": round(seconds, 1),
            "page_refresh_s": period, "refresh_s": refresh_s, "late_requests": run.late, "missed_slots": run.missed,
            "requests": {k: s.figures() for k, s in run.samples.items()}, "dashboard_ran": slurm,
            "cpu_cores": cores, "setup": {k: round(v, 2) for k, v in setup.items()}}
    command = (f"python -m bench.dashboard --users {args.users} --submitters {args.submitters} "
               f"--seconds {args.seconds:g}" + (f" --interval {args.interval:g}" if args.interval else "")
               + (f" --submit-every {args.submit_every:g}" if args.submit_every else ""))
    print(f"\nsaved {save('dashboard', command=command, targets=targets, data=data)}")
    return 0 if all(t.met for t in targets) else 1


async def bench(cfg: PortalConfig, args: argparse.Namespace) -> int:
    import aiohttp

    names = bench_users(args.users)
    if not args.remove_users and args.submitters:
        from portal.jobs.demo_data import ensure_demo_data

        ensure_demo_data(cfg)  # what the submitted jobs read (`make up` makes it too)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        admin_token = HubClient(cfg.hub_url).login(ADMIN, ADMIN_PASSWORD).new_token(ADMIN, "dashboard bench", 3600)
        if args.remove_users:
            hub = await remove_hub_users(session, cfg.hub_url, admin_token, names)
            slurm = remove_slurm_associations(cfg, names)
            print(f"removed {hub} hub users, {slurm} Slurm associations and {remove_unix_users(names)} Unix users")
            return 0
        left = cancel_leftover_jobs(cfg, names)
        cleared = clear_job_dirs(names[:args.submitters])
        tokens, setup = await prepare_users(session, cfg, admin_token, names, args.submitters,
                                            int(args.seconds) + 3600)
        setup["leftover jobs cancelled before"] = left
        setup["job directories of earlier runs removed"] = cleared
        print(f"{len(tokens)} users ready; set-up: " + ", ".join(
            f"{k} {v:.1f}" if k.endswith(" s") else f"{k} {v:.0f}" for k, v in setup.items()))
        base = f"{cfg.hub_url}{PORTAL}"
        setup["cold first pages s"] = await warm_up(session, base, tokens)
        print(f"first jobs page of every user (cold caches): {setup['cold first pages s']:.1f} s")
        before = await counters(session, base, admin_token)  # the counters are the admins' to read
        refresh_s = float(before["refresh_s"])
        period = args.interval or float(before.get("page_refresh_s", max(5.0, refresh_s)))
        pids = box_processes(cfg)
        cpu_before, generator_before = cpu_readings(pids), time.process_time()
        started = time.monotonic()
        run = await load_run(session, base, names, tokens, args, period)
        seconds = time.monotonic() - started
        setup["leftover jobs cancelled"] = cancel_leftover_jobs(cfg, names)
        cores = cpu_table(cpu_before, cpu_readings(pids), seconds, time.process_time() - generator_before)
        after = await counters(session, base, admin_token)
    return report(args, run, seconds, period, refresh_s, slurm_counts(before, after), cores, setup)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1000, help="simulated users (bench001..)")
    parser.add_argument("--submitters", type=int, default=50, help="of them, how many submit and cancel jobs")
    parser.add_argument("--seconds", type=float, default=60, help="how long the load runs")
    parser.add_argument("--interval", type=float, default=None,
                        help="seconds between one user's page views (default: the jobs page's own refresh period)")
    parser.add_argument("--submit-every", type=float, default=None,
                        help="seconds between one submitter's submit-and-cancel (default: the page period)")
    parser.add_argument("--remove-users", action="store_true", help="delete the simulated users and stop")
    args = parser.parse_args(argv)
    if not 1 <= args.submitters <= args.users:
        parser.error(f"--submitters is {args.submitters}; allowed: 1-{args.users}")
    if args.interval is not None and args.interval <= 0:
        parser.error(f"--interval is {args.interval:g}; allowed: more than 0 seconds")
    if args.submit_every is not None and args.submit_every <= 0:
        parser.error(f"--submit-every is {args.submit_every:g}; allowed: more than 0 seconds")
    return asyncio.run(bench(load(), args))


if __name__ == "__main__":
    sys.exit(main())
