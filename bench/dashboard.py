"""The dashboard under load: many users reading their jobs while some submit and cancel.

    python -m bench.dashboard [--users 200] [--submitters 20] [--seconds 60] [--interval 5]

Against the running box (`make up`, or the one DSPORTAL_CONFIG names); run as root. It makes its simulated users
itself, idempotently and kept for the next run: Unix users bench001.. (home 0700), the same hub users (through
the hub's REST API, as its `admin`), and one API token each. Every user then reads its job list
(`GET api/jobs`) and the jobs page (`GET jobs`) once per `--interval` (the page's own refresh period); the first
`--submitters` users also submit a tiny CPU job and cancel it at once, each interval. Printed: requests, latency
p50/p99 and errors per kind of request, what the dashboard asked Slurm (its `GET api/cluster` counters) during
the run, and the targets: p99 <= 250 ms, no errors, squeue at most once per refresh interval.
`--remove-users` deletes the simulated users (Unix and hub) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import pwd
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.hub_client import HubClient
from portal.config import PortalConfig, load

ADMIN, ADMIN_PASSWORD = "admin", "admin-demo"  # the demo directory's admin (DESIGN.md)
PORTAL = "/services/portal/"
TARGET_P99_MS = 250.0
# A job that needs no GPU (no quota) and is cancelled at once: only the submit and cancel paths are exercised.
TINY_CPU_JOB = {"template": "chexnet", "gpus_per_node": 0, "cpus_per_task": 1, "memory_gb": 1, "epochs": 1,
                "batch_size": 8, "image_size": 64, "time_limit": "00:05:00"}


# --- pure parts ---

def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank: always a value that was measured. NaN for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"q is {q}; allowed: 0-100")
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (reads as plain text too), columns padded to their widest cell."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def counts_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What was counted between two readings of the same counters (one first seen later started at 0)."""
    return {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] != before.get(k, 0)}


def bench_users(count: int) -> list[str]:
    return [f"bench{i:03d}" for i in range(1, count + 1)]


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

    def row(self, name: str) -> list[object]:
        p50, p99 = percentile(self.latencies_ms, 50), percentile(self.latencies_ms, 99)
        return [name, len(self.latencies_ms), f"{p50:.1f}", f"{p99:.1f}", f"{max(self.latencies_ms, default=0):.1f}",
                self.errors]


def verdict(reads: Samples, errors: int, squeue_calls: int, seconds: float, refresh_s: float) -> list[str]:
    """The targets, each as 'met'/'NOT met' with its figure."""
    p99 = percentile(reads.latencies_ms, 99)
    allowed = math.ceil(seconds / refresh_s) + 1
    return [
        f"p99 of reads {p99:.1f} ms <= {TARGET_P99_MS:.0f} ms: {'met' if p99 <= TARGET_P99_MS else 'NOT met'}",
        f"errors {errors} == 0: {'met' if errors == 0 else 'NOT met'}",
        f"squeue {squeue_calls} <= {allowed} (once per {refresh_s:g} s refresh over {seconds:.0f} s): "
        f"{'met' if squeue_calls <= allowed else 'NOT met'}",
    ]


# --- set-up: Unix users, hub users, tokens ---

def ensure_unix_users(names: Sequence[str]) -> int:
    """Create the missing users (group `users`, home 0700); how many were made."""
    made = 0
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--gid", "users", "--shell", "/bin/sh", name], check=True,
                           capture_output=True)
            made += 1
        Path(pwd.getpwnam(name).pw_dir).chmod(0o700)
    return made


def remove_unix_users(names: Sequence[str]) -> None:
    for name in names:
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


async def user_tokens(session, hub_url: str, admin_token: str, names: Sequence[str]) -> dict[str, str]:
    """Each user in the hub (made if missing) and a fresh API token of theirs, made by the admin."""
    auth = {"Authorization": f"token {admin_token}"}
    sem = asyncio.Semaphore(8)

    async def one(name: str) -> tuple[str, str]:
        async with sem:
            made = await session.post(f"{hub_url}/hub/api/users/{name}", headers=auth)
            if made.status not in (201, 409):
                raise SystemExit(f"hub user {name}: {made.status} {await made.text()}")
            token = await session.post(f"{hub_url}/hub/api/users/{name}/tokens", headers=auth,
                                       json={"note": "dashboard bench", "expires_in": 3600})
            if token.status != 201:
                raise SystemExit(f"token for {name}: {token.status} {await token.text()}")
            return name, (await token.json())["token"]

    return dict(await asyncio.gather(*(one(n) for n in names)))


async def remove_hub_users(session, hub_url: str, admin_token: str, names: Sequence[str]) -> None:
    auth = {"Authorization": f"token {admin_token}"}
    for name in names:
        await session.delete(f"{hub_url}/hub/api/users/{name}", headers=auth)


# --- the load ---

@dataclass
class Run:
    samples: dict[str, Samples] = field(default_factory=lambda: {k: Samples() for k in
                                                                 ("api/jobs", "jobs page", "submit", "cancel")})
    stop_at: float = 0.0


async def timed(run: Run, kind: str, request) -> object | None:
    started = time.perf_counter()
    try:
        async with request as response:
            body = await response.read()
            ok = response.status < 400
            error = None if ok else f"{kind}: {response.status} {body[:200]!r}"
    except Exception as err:  # a refused or timed-out request is the run's error, counted and shown
        run.samples[kind].add((time.perf_counter() - started) * 1000, f"{kind}: {type(err).__name__}: {err}")
        return None
    run.samples[kind].add((time.perf_counter() - started) * 1000, error)
    return json.loads(body) if ok and response.content_type == "application/json" else (b"" if ok else None)


async def reader(run: Run, session, base: str, token: str, interval: float) -> None:
    headers = {"Authorization": f"token {token}"}
    await asyncio.sleep(random.uniform(0, interval))  # users do not all reload in the same instant
    while time.monotonic() < run.stop_at:
        started = time.monotonic()
        await timed(run, "api/jobs", session.get(f"{base}api/jobs", headers=headers))
        await timed(run, "jobs page", session.get(f"{base}jobs", headers=headers))
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


async def submitter(run: Run, session, base: str, token: str, interval: float) -> None:
    headers = {"Authorization": f"token {token}"}
    await asyncio.sleep(random.uniform(0, interval))
    while time.monotonic() < run.stop_at:
        started = time.monotonic()
        job = await timed(run, "submit", session.post(f"{base}api/jobs", headers=headers, json=TINY_CPU_JOB))
        if isinstance(job, dict) and "id" in job:
            await timed(run, "cancel", session.delete(f"{base}api/jobs/{job['id']}", headers=headers))
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


async def counters(session, base: str, token: str) -> dict:
    async with session.get(f"{base}api/cluster", headers={"Authorization": f"token {token}"}) as response:
        return await response.json()


async def warm_up(session, base: str, tokens: dict[str, str]) -> float:
    """Every user's first load (what a cold dashboard costs), a few at once; seconds taken."""
    started = time.monotonic()
    sem = asyncio.Semaphore(16)

    async def one(token: str) -> None:
        async with sem:
            async with session.get(f"{base}api/jobs", headers={"Authorization": f"token {token}"}) as response:
                await response.read()

    await asyncio.gather(*(one(t) for t in tokens.values()))
    return time.monotonic() - started


async def bench(cfg: PortalConfig, args: argparse.Namespace) -> int:
    import aiohttp

    names = bench_users(args.users)
    if not args.remove_users and args.submitters:
        from portal.jobs.demo_data import ensure_demo_data

        ensure_demo_data(cfg)  # what the submitted jobs read (`make up` makes it too)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        admin_token = HubClient(cfg.hub_url).login(ADMIN, ADMIN_PASSWORD).new_token(ADMIN, "dashboard bench", 3600)
        if args.remove_users:
            await remove_hub_users(session, cfg.hub_url, admin_token, names)
            remove_unix_users(names)
            print(f"removed {len(names)} users")
            return 0
        made = ensure_unix_users(names)
        tokens = await user_tokens(session, cfg.hub_url, admin_token, names)
        print(f"{len(tokens)} users ({made} new Unix accounts), each with an API token")
        base = f"{cfg.hub_url}{PORTAL}"
        first = names[0]
        cold_s = await warm_up(session, base, tokens)
        print(f"first load of every user's jobs (cold caches): {cold_s:.1f} s for {len(tokens)} users")
        before = await counters(session, base, tokens[first])
        run = Run(stop_at=time.monotonic() + args.seconds)
        started = time.monotonic()
        await asyncio.gather(*(reader(run, session, base, tokens[n], args.interval) for n in names),
                             *(submitter(run, session, base, tokens[n], args.interval)
                               for n in names[:args.submitters]))
        seconds = time.monotonic() - started
        after = await counters(session, base, tokens[first])

    reads = Samples(latencies_ms=run.samples["api/jobs"].latencies_ms + run.samples["jobs page"].latencies_ms,
                    errors=run.samples["api/jobs"].errors + run.samples["jobs page"].errors)
    print(f"\n{len(names)} users, {args.submitters} submitting, {seconds:.0f} s, one page view per user every "
          f"{args.interval:g} s\n")
    rows = [s.row(k) for k, s in run.samples.items()] + [reads.row("all reads")]
    print(table(["request", "count", "p50 ms", "p99 ms", "max ms", "errors"], rows))
    slurm = {"squeue (shared)": after["squeue_calls"] - before["squeue_calls"],
             "scontrol (shared)": after.get("scontrol_calls", 0) - before.get("scontrol_calls", 0)}
    slurm.update({f"{k} (as users)": v for k, v in counts_delta(before.get("user_slurm_calls", {}),
                                                                 after.get("user_slurm_calls", {})).items()})
    slurm.update({f"runuser {k}": v for k, v in counts_delta(before.get("runuser_calls", {}),
                                                              after.get("runuser_calls", {})).items()})
    if "hub_calls" in after:
        slurm["hub API requests"] = after["hub_calls"] - before.get("hub_calls", 0)
    submits = len(run.samples["submit"].latencies_ms)
    print(f"\nwhat the dashboard ran during the run ({submits} submits; refresh interval {after['refresh_s']:g} s)\n")
    print(table(["command", "count", "per second"], [[k, v, f"{v / seconds:.2f}"] for k, v in slurm.items()]))
    errors = sum(s.errors for s in run.samples.values())
    print()
    lines = verdict(reads, errors, slurm["squeue (shared)"], seconds, after["refresh_s"])
    for line in lines:
        print(line)
    for kind, samples in run.samples.items():
        if samples.first_error:
            print(f"first error ({kind}): {samples.first_error}")
    return 1 if any(line.endswith("NOT met") for line in lines) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=200, help="simulated users (bench001..)")
    parser.add_argument("--submitters", type=int, default=20, help="of them, how many submit and cancel jobs")
    parser.add_argument("--seconds", type=float, default=60, help="how long the load runs")
    parser.add_argument("--interval", type=float, default=5,
                        help="seconds between one user's page views (the jobs page refreshes itself every 5 s)")
    parser.add_argument("--remove-users", action="store_true", help="delete the simulated users and stop")
    args = parser.parse_args(argv)
    if not 1 <= args.submitters <= args.users:
        parser.error(f"--submitters is {args.submitters}; allowed: 1-{args.users}")
    return asyncio.run(bench(load(), args))


if __name__ == "__main__":
    sys.exit(main())
