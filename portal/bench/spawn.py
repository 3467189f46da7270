"""Spawn benchmark: the portal's Slurm spawner against stock batchspawner, on the same cluster in a box.

    python -m portal.bench.spawn [--runs 10] [--warmup 1] [--json runs.json]

The box must be up (`make up`, or deploy/local/box.py up with the same DSPORTAL_CONFIG). Beside its hub (the
portal's spawner) this starts a second hub on hub_port + 40..43 with `slurm_spawner: batchspawner` (stock
batchspawner.SlurmSpawner, `configure_stock_slurm_spawner`), sharing the box's slapd and Slurm, and stops it at
the end. Runs alternate, portal then stock, so the noise of a shared machine hits both alike.

One run, as a browser does it: alice is logged in through the login form; the clock starts at the request that
starts the spawn (ours: the spawn form's POST; stock has no form, so its GET /hub/spawn), follows the progress
stream as the spawn-pending page does, and stops when GET /user/alice/lab (through the hub's OAuth) answers 200.
Then the server is stopped and its job has left the queue before the next run.

Where the time goes, from the millisecond timestamps that each piece logs:
    submit        clock start -> hub log "Job submitted" (form validation, sbatch)
    queue         -> slurmctld.log "sched: Allocate JobId=N" or backfill's "Started JobId=N" (PENDING -> RUNNING)
    job launch    -> slurmd.log "launch task StepId=N.0" (batch script, prologue, srun)
    server start  -> job output "Jupyter Server ... is running at" (batchspawner-singleuser, JupyterLab's start)
    hub ready     -> hub log "User alice took" (the spawner's and the hub's checks that it answers)
    first page    -> /lab 200 seen by the client (progress event, redirect, OAuth, the page)
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import os
import pwd
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from portal.config import PortalConfig, load

REPO = Path(__file__).resolve().parents[2]
USER, PASSWORD = "alice", "wonderland"
# The same server for both spawners: what the benchmark's form asks ours for and stock's req_* traits say.
PARTITION, GPUS, CPUS, MEMORY_GB, RUNTIME = "gpu", 1, 2, 4, "01:00:00"
SPAWNERS = ("portal", "stock")
STOCK_PORT_SHIFT = 40  # the stock hub: hub_port + 40 (public), + 41 (proxy API), + 42 (hub API), + 43 (dashboard)
SEGMENTS = (
    ("submit", "form submit -> sbatch done"),
    ("queue", "sbatch -> Slurm allocates (PENDING -> RUNNING)"),
    ("job_launch", "allocation -> srun step starts"),
    ("server_start", "step starts -> JupyterLab listening"),
    ("hub_ready", "listening -> hub marks it ready"),
    ("first_page", "ready -> GET /user/alice/lab 200"),
)


def configure_stock_slurm_spawner(c: Any, portal: PortalConfig) -> None:
    """Stock batchspawner.SlurmSpawner as batchspawner's README configures it, plus only what this box needs.

    README: the class, `import batchspawner` (registers the hub API that batchspawner-singleuser reports its port
    to), http_timeout 120 (jupyterhub_config.py sets it for both), and the req_* job resources, here equal to what
    the benchmark asks the portal's spawner for. The box needs: `exec_prefix` (the hub runs as root and sudo is
    not installed: runuser; batchspawner runs squeue and scancel without the spawner's environment, so the prefix
    sets SLURM_CONF), SLURM_CONF and PATH in the job's environment (the box's slurm.conf is not
    /etc/slurm/slurm.conf; srun and the venv's programs must be found), and `cmd` / `batchspawner_singleuser_cmd`
    as the venv's programs (platform notes). start_timeout is the portal's, as ours has it.
    """
    import batchspawner  # noqa: F401  (registers /hub/api/batchspawner)

    from portal.slurm import RUNUSER

    c.JupyterHub.spawner_class = "batchspawner.SlurmSpawner"
    c.BatchSpawnerBase.req_partition = PARTITION
    c.BatchSpawnerBase.req_nprocs = str(CPUS)
    c.BatchSpawnerBase.req_memory = f"{MEMORY_GB}G"
    c.BatchSpawnerBase.req_runtime = RUNTIME
    c.SlurmSpawner.req_gres = f"gpu:{GPUS}" if GPUS else ""
    c.BatchSpawnerBase.exec_prefix = f"{RUNUSER} -u {{username}} -- /usr/bin/env SLURM_CONF={portal.slurm_conf_path}"
    c.Spawner.environment = {
        "SLURM_CONF": str(portal.slurm_conf_path),
        "PATH": f"{portal.venv / 'bin'}:{portal.slurm_bin_dir}:/usr/local/bin:/usr/bin:/bin",
    }
    c.Spawner.cmd = [str(portal.venv / "bin" / "jupyterhub-singleuser")]
    c.BatchSpawnerBase.batchspawner_singleuser_cmd = str(portal.venv / "bin" / "batchspawner-singleuser")
    c.Spawner.start_timeout = portal.start_timeout


# --- pure: timestamps, segments, statistics, the table ---------------------------------------------------

HUB_TIME = re.compile(r"^\[\w (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) ")  # JupyterHub and Jupyter Server
SLURM_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] ")  # slurmctld / slurmd (iso8601_ms)


def log_time(line: str) -> float | None:
    """The epoch time at the start of a hub, Jupyter Server or Slurm log line (all log local time), or None."""
    for pattern, layout in ((HUB_TIME, "%Y-%m-%d %H:%M:%S.%f"), (SLURM_TIME, "%Y-%m-%dT%H:%M:%S.%f")):
        match = pattern.match(line)
        if match:
            return datetime.strptime(match.group(1), layout).timestamp()
    return None


def first_time(lines: Sequence[str], needle: str | re.Pattern[str]) -> float | None:
    """The time of the first line that contains `needle` (a string or a regex)."""
    for line in lines:
        found = needle.search(line) if isinstance(needle, re.Pattern) else needle in line
        if found:
            return log_time(line)
    return None


def job_id_submitted(hub_lines: Sequence[str]) -> str | None:
    """The Slurm job id from batchspawner's "Job submitted. output: 42" (both spawners log it)."""
    for line in hub_lines:
        match = re.search(r"Job submitted\. output: (\d+)", line)
        if match:
            return match.group(1)
    return None


@dataclass
class Run:
    """One spawn: the clock times (epoch seconds) of each milestone; None where a log did not say."""

    spawner: str
    started: float
    lab: float
    job_id: str | None = None
    submitted: float | None = None
    allocated: float | None = None
    step: float | None = None
    listening: float | None = None
    ready: float | None = None

    @property
    def total(self) -> float:
        return self.lab - self.started

    def segments(self) -> dict[str, float | None]:
        marks = [self.started, self.submitted, self.allocated, self.step, self.listening, self.ready, self.lab]
        names = [name for name, _ in SEGMENTS]
        return {name: (end - begin if begin is not None and end is not None else None)
                for name, begin, end in zip(names, marks, marks[1:], strict=False)}


def p90(values: Sequence[float]) -> float:
    """The 90th percentile, interpolated between the closest ranks (numpy's default)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=10, method="inclusive")[8]


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "p90": p90(values), "min": min(values), "max": max(values)}


def median_of(runs: Sequence[Run], segment: str) -> float | None:
    values = [v for v in (r.segments()[segment] for r in runs) if v is not None]
    return statistics.median(values) if values else None


def table(runs: Sequence[Run], command: str) -> str:
    """The benchmark's one table: totals (median, p90, spread) for both spawners, the ratio, the breakdown."""
    by = {name: [r for r in runs if r.spawner == name] for name in SPAWNERS}
    stats = {name: summary([r.total for r in by[name]]) for name in SPAWNERS if by[name]}
    lines = [f"spawn benchmark: {command}",
             f"form submit -> GET /user/{USER}/lab 200; runs alternate; "
             + ", ".join(f"{name}: n={len(by[name])}" for name in SPAWNERS), "",
             f"{'seconds':<52}{'portal':>9}{'stock':>9}{'ratio':>8}"]

    def row(label: str, ours: float | None, stock: float | None) -> str:
        cells = [f"{v:9.2f}" if v is not None else f"{'n/a':>9}" for v in (ours, stock)]
        ratio = f"{ours / stock:8.2f}" if ours is not None and stock else f"{'':>8}"
        return f"{label:<52}{''.join(cells)}{ratio}"

    if len(stats) == 2:
        ours, stock = stats["portal"], stats["stock"]
        lines += [row("total, median", ours["median"], stock["median"]),
                  row("total, p90", ours["p90"], stock["p90"]),
                  row("total, spread (max - min)", ours["max"] - ours["min"], stock["max"] - stock["min"]),
                  f"{'total, min .. max':<52}{ours['min']:5.2f}..{ours['max']:<5.2f} "
                  f"{stock['min']:5.2f}..{stock['max']:<5.2f}",
                  "breakdown (medians; they need not add up to the total's median):"]
        lines += [row(f"  {name}: {what}", median_of(by["portal"], name), median_of(by["stock"], name))
                  for name, what in SEGMENTS]
    return "\n".join(lines)


# --- talking to a hub as a browser does -------------------------------------------------------------------


class Browser:
    """One user's cookie session with one hub: the login form, the spawn, the progress stream, the lab."""

    def __init__(self, url: str):
        import requests

        self.url, self.session = url, requests.Session()

    def login(self, username: str, password: str) -> None:
        page = self.session.get(f"{self.url}/hub/login", timeout=10)
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text).group(1)
        answer = self.session.post(f"{self.url}/hub/login?next=", allow_redirects=False, timeout=30,
                                   data={"username": username, "password": password, "_xsrf": xsrf})
        if answer.status_code != 302:
            raise RuntimeError(f"{self.url}: {username} could not log in ({answer.status_code})")
        self.session.headers["X-XSRFToken"] = self.session.cookies.get("_xsrf", path="/hub/")

    def spawn_form_action(self) -> str | None:
        """The spawn form's target, or None when the hub offers no form (stock batchspawner)."""
        page = self.session.get(f"{self.url}/hub/spawn", timeout=30, allow_redirects=False)
        action = re.search(r'<form[^>]*id="spawn_form"[^>]*action="([^"]+)"', page.text)
        return html.unescape(action.group(1)) if action else None

    def start_spawn(self, action: str | None) -> None:
        """Submit the form (ours) or open /hub/spawn (stock: no form, the GET starts the spawn)."""
        if action:
            fields = {"partition": PARTITION, "gpus": GPUS, "cpus": CPUS, "memory_gb": MEMORY_GB, "runtime": RUNTIME}
            answer = self.session.post(f"{self.url}{action}", allow_redirects=False, timeout=60,
                                       files={k: (None, str(v)) for k, v in fields.items()})
        else:
            answer = self.session.get(f"{self.url}/hub/spawn", allow_redirects=False, timeout=60)
        if answer.status_code != 302:
            raise RuntimeError(f"{self.url}: the spawn did not start ({answer.status_code}): {answer.text[-500:]}")

    def wait_ready(self, username: str, timeout: float) -> None:
        """Follow the progress event stream, as the spawn-pending page does, until it says ready."""
        url = f"{self.url}/hub/api/users/{username}/server/progress"
        with self.session.get(url, stream=True, timeout=timeout) as stream:
            for line in stream.iter_lines(decode_unicode=True):
                if line and line.startswith("data:"):
                    event = json.loads(line[5:])
                    if event.get("failed"):
                        raise RuntimeError(f"{self.url}: the spawn failed: {event.get('message')}")
                    if event.get("ready"):
                        return
        raise RuntimeError(f"{self.url}: the progress stream ended without ready")

    def open_lab(self, username: str) -> None:
        lab = self.session.get(f"{self.url}/user/{username}/lab", timeout=60)
        if lab.status_code != 200 or "JupyterLab" not in lab.text:
            raise RuntimeError(f"{self.url}: /user/{username}/lab answered {lab.status_code}")

    def server(self, username: str) -> dict | None:
        model = self.session.get(f"{self.url}/hub/api/users/{username}", timeout=30).json()
        return model.get("servers", {}).get("")

    def stop(self, username: str) -> None:
        self.session.delete(f"{self.url}/hub/api/users/{username}/server", timeout=60)
        wait_for(lambda: self.server(username) is None, 90, f"{username}'s server on {self.url} to stop")


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


# --- the stock hub beside the box's ---------------------------------------------------------------------


def _yaml_value(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict) or hasattr(value, "items"):
        return dict(value)
    return value


def stock_hub_settings(cfg: PortalConfig, state_dir: Path) -> dict[str, Any]:
    """The box's settings, for a hub with stock batchspawner on ports of its own and its own database."""
    settings = {f.name: _yaml_value(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    port = cfg.hub_port + STOCK_PORT_SHIFT
    settings.update(state_dir=str(state_dir), slurm_conf=str(cfg.slurm_conf_path), ldap_ca_file=str(cfg.ca_file),
                    hub_port=port, proxy_api_port=port + 1, hub_api_port=port + 2, dashboard_port=port + 3,
                    slurm_spawner="batchspawner")
    return settings


class StockHub:
    """A second jupyterhub process (same jupyterhub_config.py) whose spawner is stock batchspawner."""

    def __init__(self, cfg: PortalConfig):
        import yaml

        self.state_dir = cfg.state_dir / "bench-spawn-stock"
        (self.state_dir / "hub").mkdir(parents=True, exist_ok=True)
        self.config = self.state_dir / "portal.yaml"
        self.config.write_text(yaml.safe_dump(stock_hub_settings(cfg, self.state_dir)))
        self.log = self.state_dir / "hub.log"
        self.url = f"http://{cfg.hub_ip}:{cfg.hub_port + STOCK_PORT_SHIFT}"
        self.cfg = cfg
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> StockHub:
        import requests

        env = {k: v for k, v in os.environ.items() if not k.startswith("DSPORTAL_")}
        env.update(DSPORTAL_CONFIG=str(self.config), PYTHONPATH=str(REPO),
                   PATH=f"{self.cfg.venv}/bin:{self.cfg.node_prefix}/node_modules/.bin:{env.get('PATH', '/usr/bin')}")
        with self.log.open("ab") as log:
            command = [str(self.cfg.venv / "bin" / "jupyterhub"), "-f", str(REPO / "jupyterhub_config.py")]
            self.proc = subprocess.Popen(command, cwd=self.state_dir / "hub", env=env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

        def up() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the stock hub exited ({self.proc.returncode}): read {self.log}")
            try:
                return requests.get(f"{self.url}/hub/api/", timeout=2).ok
            except requests.ConnectionError:
                return False
        wait_for(up, 60, "the stock hub to answer")
        return self

    def __exit__(self, *exc: object) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)  # the hub stops its proxy and services
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


# --- one run ---------------------------------------------------------------------------------------------


class LogTail:
    """The lines a log file gains from now on."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def lines(self) -> list[str]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as log:
            log.seek(self.offset)
            return log.read().decode(errors="replace").splitlines()


def slurm_jobs_of(cfg: PortalConfig, user: str) -> list[str]:
    env = {**os.environ, "SLURM_CONF": str(cfg.slurm_conf_path)}
    out = subprocess.run([str(cfg.slurm_bin_dir / "squeue"), "-h", "-u", user, "-o", "%i"], env=env,
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return out.split()


def spawn_once(spawner: str, browser: Browser, hub_log: Path, cfg: PortalConfig) -> Run:
    """Spawn, open the lab, read the logs for the breakdown, stop the server and wait for its job to end."""
    slurm_dir = cfg.slurm_conf_path.parent
    logs = {name: LogTail(path) for name, path in
            (("hub", hub_log), ("ctld", slurm_dir / "slurmctld.log"), ("slurmd", slurm_dir / "slurmd.log"))}
    action = None  # stock has no form: its GET /hub/spawn starts the spawn, so it must be on the clock
    if spawner == "portal":
        action = browser.spawn_form_action()
        if not action:
            raise RuntimeError(f"{browser.url}: no spawn form (is {USER}'s server already running?)")
    started = time.time()
    browser.start_spawn(action)
    browser.wait_ready(USER, cfg.start_timeout + 60)
    browser.open_lab(USER)
    run = Run(spawner=spawner, started=started, lab=time.time())
    read_breakdown(run, {name: tail.lines() for name, tail in logs.items()})
    browser.stop(USER)
    wait_for(lambda: not slurm_jobs_of(cfg, USER), 60, f"{USER}'s job to leave the queue")
    return run


def read_breakdown(run: Run, lines: dict[str, list[str]]) -> None:
    run.job_id = job_id_submitted(lines["hub"])
    run.submitted = first_time(lines["hub"], "Job submitted. output:")
    run.ready = first_time(lines["hub"], f"User {USER} took")
    if not run.job_id:
        return
    # The main scheduler logs "sched: Allocate JobId=N", the backfill scheduler "_start_job: Started JobId=N".
    started = re.compile(rf"(sched: Allocate|_start_job: Started) JobId={run.job_id} ")
    run.allocated = first_time(lines["ctld"], started)
    run.step = first_time(lines["slurmd"], f"launch task StepId={run.job_id}.0 ")
    output = Path(pwd.getpwnam(USER).pw_dir) / f"jupyterhub_slurmspawner_{run.job_id}.log"
    if output.exists():
        run.listening = first_time(output.read_text(errors="replace").splitlines(), "is running at")


def benchmark(cfg: PortalConfig, runs: int, warmup: int, report: Callable[[str], None]) -> list[Run]:
    """`warmup` uncounted pairs, then `runs` pairs, each pair portal then stock."""
    with StockHub(cfg) as stock:
        browsers = {"portal": Browser(cfg.hub_url), "stock": Browser(stock.url)}
        hub_logs = {"portal": cfg.state_dir / "log" / "hub.log", "stock": stock.log}
        for browser in browsers.values():
            browser.login(USER, PASSWORD)
            if browser.server(USER) is not None:
                browser.stop(USER)
        done: list[Run] = []
        for index in range(warmup + runs):
            for name in SPAWNERS:
                run = spawn_once(name, browsers[name], hub_logs[name], cfg)
                counted = index >= warmup
                report(f"{'run' if counted else 'warm-up'} {index - warmup + 1 if counted else index + 1} {name}: "
                       f"{run.total:.2f} s (job {run.job_id}) "
                       + " ".join(f"{k}={v:.2f}" for k, v in run.segments().items() if v is not None))
                if counted:
                    done.append(run)
        return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Spawn time: the portal's Slurm spawner vs stock batchspawner.")
    parser.add_argument("--runs", type=int, default=10, help="counted runs of each spawner (default 10)")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted runs of each first (default 1)")
    parser.add_argument("--json", type=Path, help="also write every run's milestones here")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be 1 or more, --warmup 0 or more")
    if os.geteuid() != 0:
        print("portal.bench.spawn: run as root (it reads alice's job output and the box's Slurm logs)",
              file=sys.stderr)
        return 2
    cfg = load()
    command = f"python -m portal.bench.spawn --runs {args.runs} --warmup {args.warmup}"
    runs = benchmark(cfg, args.runs, args.warmup, lambda line: print(line, flush=True))
    print()
    print(table(runs, command))
    if args.json:
        args.json.write_text(json.dumps([{**dataclasses.asdict(r), "total": r.total, "segments": r.segments()}
                                         for r in runs], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
