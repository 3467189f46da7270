"""The dashboard benchmark's simulated users: Unix accounts and Slurm associations (the Slurm box's), hub users and
API tokens (either box's hub), made idempotently and in batches (a thousand users one request at a time took the
hub minutes), and removed again on request.

Names: bench001..bench999, bench1000 (`bench_users`), so the users of a smaller run are the first of a larger one.
"""

from __future__ import annotations

import asyncio
import pwd
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from portal.config import PortalConfig

BENCH_NAME = re.compile(r"bench[0-9]{3,4}")
HUB_PAGE = 200  # the hub's api_page_max_limit (default): lists and batches in pages of this size
HUB_CONCURRENCY = 8  # requests to the hub at once: it is one process; more only queue there
TOKEN_NOTE = "dashboard bench"
# Slurm enforces accounting associations: submitters need one. The demo directory's group with no GPU quota
# (the bench's jobs ask for none); `python -m portal.accounts sync` removes these again, the next run adds them.
SLURM_ACCOUNT = "datascientists"
# The submitters' jobs may run none at once: Slurm queues them (pending, AssocMaxJobsLimit) and never starts one.
# The bench measures the dashboard's submit and cancel paths; a job that started before its cancel (a slow
# cancel under load) trained TensorFlow on the same 2 cores, slowing every later cancel: dozens ran at once.
BENCH_MAX_JOBS = 0
SLURM_TIMEOUT_S = 60


def bench_users(count: int) -> list[str]:
    return [f"bench{i:03d}" for i in range(1, count + 1)]


def pages(items: Sequence[str], size: int = HUB_PAGE) -> list[list[str]]:
    """`items` in consecutive slices of at most `size` (the last may be shorter)."""
    if size < 1:
        raise ValueError(f"size is {size}; allowed: 1 or more")
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def missing_unix_users(names: Sequence[str]) -> list[str]:
    missing = []
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            missing.append(name)
    return missing


def ensure_unix_users(names: Sequence[str]) -> int:
    """Create the missing users (group `users`, home 0700); how many were made. useradd locks /etc/passwd, so
    they are made one after the other; existing ones cost one lookup."""
    missing = missing_unix_users(names)
    for name in missing:
        subprocess.run(["useradd", "--create-home", "--gid", "users", "--shell", "/bin/sh", name], check=True,
                       capture_output=True)
        Path(pwd.getpwnam(name).pw_dir).chmod(0o700)
    return len(missing)


def remove_unix_users(names: Sequence[str]) -> int:
    missing = set(missing_unix_users(names))  # once, not once per name
    present = [n for n in names if n not in missing]
    for name in present:
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)
    return len(present)


def cancel_leftover_jobs(cfg: PortalConfig, names: Sequence[str]) -> int:
    """Cancel the simulated users' jobs still in Slurm's queue (a cancel that failed in a run leaves its tiny job
    to start training, which a run beside it would measure); how many."""
    ours = set(names)
    queue = slurm(cfg, "squeue", "-a", "-h", "-o", "%i|%u").splitlines()
    ids = [job_id for job_id, _, user in (line.partition("|") for line in queue) if user.strip() in ours]
    if ids:
        slurm(cfg, "scancel", *ids)
    return len(ids)


def clear_job_dirs(names: Sequence[str]) -> int:
    """Remove the simulated users' ~/jobs (what earlier runs submitted), so that every run starts alike: a list
    that grew by a dozen jobs per submitter and minute of each run, and jobs that ran in old runs, whose event
    files a restarted dashboard reads once each (a Python process per job), would weigh on later runs. Only
    users named like `bench_users` are touched; how many directories were removed."""
    removed = 0
    for name in names:
        if not BENCH_NAME.fullmatch(name):
            raise ValueError(f"{name[:20]!r} is not a bench user; allowed: bench001, bench002, ...")
        try:
            jobs = Path(pwd.getpwnam(name).pw_dir) / "jobs"
        except KeyError:
            continue
        if jobs.is_dir() and not jobs.is_symlink():
            shutil.rmtree(jobs)
            removed += 1
    return removed


def sacctmgr(cfg: PortalConfig, *args: str) -> str:
    return slurm(cfg, "sacctmgr", *args)


def slurm(cfg: PortalConfig, command: str, *args: str) -> str:
    result = subprocess.run([str(cfg.slurm_bin_dir / command), *args], capture_output=True, text=True,
                            timeout=SLURM_TIMEOUT_S, env={"SLURM_CONF": str(cfg.slurm_conf_path),
                                                          "PATH": "/usr/bin:/bin"})
    if result.returncode != 0:
        raise SystemExit(f"{command} {' '.join(args)[:100]}: {result.stderr.strip()[:300]}")
    return result.stdout


def slurm_users(cfg: PortalConfig) -> set[str]:
    """Users that hold an association in Slurm's accounting."""
    return {line.strip() for line in sacctmgr(cfg, "-nP", "show", "assoc", "format=user").splitlines()}


def ensure_slurm_associations(cfg: PortalConfig, names: Sequence[str]) -> int:
    """One association each (account SLURM_ACCOUNT) for those that have none, one sacctmgr per page of names; and
    on every one MaxJobs=0 (BENCH_MAX_JOBS): how many were made."""
    known = slurm_users(cfg)  # once (one sacctmgr), not once per name
    missing = [n for n in names if n not in known]
    for batch in pages(missing):
        sacctmgr(cfg, "-i", "add", "user", f"name={','.join(batch)}", f"account={SLURM_ACCOUNT}",
                 f"maxjobs={BENCH_MAX_JOBS}")
    for batch in pages(names):  # those made by an earlier version of the bench, or changed since
        sacctmgr(cfg, "-i", "modify", "user", "where", f"name={','.join(batch)}", "set", f"maxjobs={BENCH_MAX_JOBS}")
    return len(missing)


def remove_slurm_associations(cfg: PortalConfig, names: Sequence[str]) -> int:
    known = slurm_users(cfg)  # once (one sacctmgr), not once per name
    present = [n for n in names if n in known]
    for batch in pages(present):
        sacctmgr(cfg, "-i", "delete", "user", f"name={','.join(batch)}")
    return len(present)


async def _checked(response, expected: tuple[int, ...], what: str) -> object:
    if response.status not in expected:
        raise SystemExit(f"{what}: the hub answered {response.status} {(await response.text())[:300]}")
    return await response.json() if response.content_type == "application/json" else None


async def hub_user_names(session, hub_url: str, auth: dict[str, str]) -> set[str]:
    """Every hub user's name, page by page."""
    names: set[str] = set()
    while True:
        async with session.get(f"{hub_url}/hub/api/users", headers=auth,
                               params={"offset": str(len(names)), "limit": str(HUB_PAGE)}) as response:
            page = await _checked(response, (200,), "listing the hub's users")
        names.update(u["name"] for u in page)
        if len(page) < HUB_PAGE:
            return names


async def ensure_hub_users(session, hub_url: str, admin_token: str, names: Sequence[str]) -> int:
    """The missing ones made with one POST per page of names; how many were made."""
    auth = {"Authorization": f"token {admin_token}"}
    existing = await hub_user_names(session, hub_url, auth)
    missing = [n for n in names if n not in existing]
    for batch in pages(missing):
        async with session.post(f"{hub_url}/hub/api/users", headers=auth, json={"usernames": batch}) as response:
            await _checked(response, (201,), f"creating {len(batch)} hub users")
    return len(missing)


async def user_tokens(session, hub_url: str, admin_token: str, names: Sequence[str],
                      expires_in: int) -> dict[str, str]:
    """A fresh API token of each user's, made by the admin (the hub has no batch call for tokens)."""
    auth = {"Authorization": f"token {admin_token}"}
    sem = asyncio.Semaphore(HUB_CONCURRENCY)

    async def one(name: str) -> tuple[str, str]:
        async with sem:
            async with session.post(f"{hub_url}/hub/api/users/{name}/tokens", headers=auth,
                                    json={"note": TOKEN_NOTE, "expires_in": expires_in}) as response:
                body = await _checked(response, (201,), f"a token for {name}")
        return name, body["token"]

    return dict(await asyncio.gather(*(one(n) for n in names)))


async def remove_hub_users(session, hub_url: str, admin_token: str, names: Sequence[str]) -> int:
    auth = {"Authorization": f"token {admin_token}"}
    known = await hub_user_names(session, hub_url, auth)  # once: in the comprehension it was asked per name
    present = [n for n in names if n in known]
    sem = asyncio.Semaphore(HUB_CONCURRENCY)

    async def one(name: str) -> None:
        async with sem:
            async with session.delete(f"{hub_url}/hub/api/users/{name}", headers=auth) as response:
                await _checked(response, (204, 404), f"deleting hub user {name}")

    await asyncio.gather(*(one(n) for n in present))
    return len(present)


async def prepare_hub_users(session, hub_url: str, admin_token: str, names: Sequence[str],
                            token_life_s: int) -> tuple[dict[str, str], dict[str, float]]:
    """Hub users and a fresh token each; the tokens and what each step took (s), with how many were made. The
    box's own part (Unix users, Slurm associations; or namespaces) is its `prepare`'s: bench.dashboard_slurm,
    bench.dashboard_kubernetes."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    timings["hub users made"] = await ensure_hub_users(session, hub_url, admin_token, names)
    timings["hub users s"] = time.monotonic() - started
    started = time.monotonic()
    tokens = await user_tokens(session, hub_url, admin_token, names, token_life_s)
    timings["tokens s"] = time.monotonic() - started
    return tokens, timings
