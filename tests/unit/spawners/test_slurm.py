"""The Slurm spawner's start, state by state (no cluster: Slurm's answers are faked): fast (a port report ends
the wait at once; the server is handed over when it listens) and failing fast (a job that ends first); and the spawn
benchmark's pure parts: log timestamps, the breakdown, the statistics, the stock hub's settings."""

import asyncio
import logging
import re
import time
from datetime import datetime
from unittest import mock

import pytest
from batchspawner.batchspawner import JobStatus
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from bench.spawn import Run, first_time, job_id_submitted, log_time, median_ratio, p90, summary, table, verdict
from bench.stock_hub import STOCK_HUB_CONFIG, configure_stock_slurm_spawner, stock_hub_settings
from portal.config import PortalConfig, load
from portal.errors import PortalError
from portal.scheduler.cluster import QueuedJob
from spawners import slurm_cluster
from spawners.slurm import SINGLEUSER_ARGS, PortalSlurmSpawner, ServerJobEnded
from spawners.slurm_script import server_log_dir
from tests.conftest import REPO

SUBVARS = {"req_username": "alice", "req_homedir": "/nonexistent/alice", "req_keepvars": ""}  # no hub user here


def fake_slurm(spawner: PortalSlurmSpawner, states: list[JobStatus], monkeypatch) -> list[float]:
    """Replace sbatch, squeue and scontrol: the job gets id 42 and goes through `states`; returns when each query
    ran. The spawner's own submit runs (the state it saves, its log line)."""
    queried, remaining = [], iter(states)

    async def sbatch(cmd, input=None, env=None):
        assert "sbatch --parsable" in cmd and input.startswith("#!/bin/bash")
        return "42"

    async def query():
        queried.append(time.monotonic())
        state = next(remaining, states[-1])
        spawner.job_status = {JobStatus.RUNNING: "RUNNING localhost None", JobStatus.PENDING: "PENDING n/a None",
                              JobStatus.NOTFOUND: ""}[state]
        return state

    async def node_address(scheduler, node: str) -> str:
        return node  # scontrol's NodeAddr, were there a Slurm

    async def server_start_note(look, user, partition, gpus, cpus, memory_gb) -> str:
        return ""  # the nodes are free, were there a Slurm

    spawner.run_command, spawner.get_env, spawner.query_job_status = sbatch, dict, query
    monkeypatch.setattr(slurm_cluster, "node_address", node_address)
    monkeypatch.setattr(slurm_cluster, "server_start_note", server_start_note)
    return queried


def slurm_remembers(monkeypatch, state: str) -> list[tuple]:
    """squeue --json's record of job 42 (`state`), and the report of its end; returns what each report was given."""
    reported = []

    async def job_record(scheduler, job_id):
        return QueuedJob(id=job_id, user="alice", state=state, elapsed="0:01", nodes=1, gpus_per_node=0,
                         reason="None", exit_code="0:15")

    async def ended_job_report(job_id, job, user, output, tail_lines):
        reported.append((job_id, job.state, user, output, tail_lines))
        return f"Slurm job {job_id} ended ({job.state}, exit code {job.exit_code}) before JupyterLab started."

    monkeypatch.setattr(slurm_cluster, "job_record", job_record)
    monkeypatch.setattr(slurm_cluster, "ended_job_report", ended_job_report)
    return reported


async def listening_port() -> tuple[asyncio.base_events.Server, int]:
    server = await asyncio.start_server(lambda reader, writer: writer.close(), "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def closed_port() -> int:
    server, port = await listening_port()
    server.close()
    await server.wait_closed()
    return port


@pytest.mark.parametrize("states", [
    [JobStatus.PENDING, JobStatus.RUNNING],
    [JobStatus.PENDING, JobStatus.PENDING, JobStatus.RUNNING],  # Slurm lags a moment behind the job's report
])
def test_a_port_report_ends_the_wait_at_once_not_at_the_next_poll(monkeypatch, caplog, states):
    caplog.set_level(logging.INFO)
    spawner = PortalSlurmSpawner(portal=PortalConfig(), startup_poll_interval=5.0, **SUBVARS)
    queried = fake_slurm(spawner, states, monkeypatch)

    async def scenario():
        server, port = await listening_port()
        asyncio.get_running_loop().call_later(0.2, setattr, spawner, "port", port)
        began = time.monotonic()
        async with server:
            result = await spawner.start()
        return result, time.monotonic() - began, port

    (ip, port), took, expected = asyncio.run(scenario())
    assert (ip, port) == ("localhost", expected)  # the host from squeue, the port from the report
    assert took < 1.0  # stock batchspawner sleeps startup_poll_interval (here 5 s) before looking again
    assert len(queried) == len(states)  # the job's state was still checked after the report
    assert not spawner.start_unfinished and spawner.get_state() == {"job_id": "42",
                                                                  "job_status": "RUNNING localhost None"}
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("server of alice")]
    assert logged == ["server of alice submitted: Slurm job 42",
                      f"server of alice up: Slurm job 42 on localhost, at localhost:{port}"]


def test_the_server_must_accept_connections_before_the_start_ends(monkeypatch):
    spawner = PortalSlurmSpawner(portal=PortalConfig(), **SUBVARS)
    fake_slurm(spawner, [JobStatus.RUNNING], monkeypatch)

    async def scenario():
        port = await closed_port()  # the port is reported, nothing listens yet
        starting = asyncio.ensure_future(spawner.start())
        await asyncio.sleep(0.1)
        spawner.port = port
        await asyncio.sleep(0.5)
        assert not starting.done()
        late = await asyncio.start_server(lambda reader, writer: writer.close(), "127.0.0.1", port)
        async with late:
            return await asyncio.wait_for(starting, 2)

    assert asyncio.run(scenario())[0] == "localhost"


def test_a_job_that_ends_while_pending_fails_the_start_with_its_state_and_output(monkeypatch, caplog):
    spawner = PortalSlurmSpawner(portal=PortalConfig(), startup_poll_interval=0.01, **SUBVARS)
    fake_slurm(spawner, [JobStatus.PENDING, JobStatus.NOTFOUND], monkeypatch)
    reported = slurm_remembers(monkeypatch, "CANCELLED")
    with pytest.raises(ServerJobEnded, match=r"^Slurm job 42 ended \(CANCELLED, exit code 0:15\)") as ended:
        asyncio.run(spawner.start())
    assert (ended.value.job_id, ended.value.state) == ("42", "CANCELLED")
    assert isinstance(ended.value, PortalError)
    output = f"{server_log_dir('/nonexistent/alice', 'dsportal')}/jupyterhub_slurmspawner_42.log"
    assert reported == [("42", "CANCELLED", "alice", output, spawner.output_tail_lines)]
    assert spawner.job_id == "" and spawner.get_state() == {}  # nothing left for the hub's stop() to cancel
    assert "start of alice failed: Slurm job 42 ended (CANCELLED) before JupyterLab started" in caplog.text


def test_a_server_that_dies_after_reporting_its_port_fails_the_start_at_the_next_look(monkeypatch):
    """batchspawner-singleuser reports the port before JupyterLab starts: a JupyterLab that dies on start would
    leave the hub waiting http_timeout (120 s here) for a port nothing will ever listen at."""
    spawner = PortalSlurmSpawner(portal=PortalConfig(), startup_poll_interval=0.1, **SUBVARS)
    queried = fake_slurm(spawner, [JobStatus.RUNNING] * 3 + [JobStatus.NOTFOUND], monkeypatch)
    slurm_remembers(monkeypatch, "FAILED")

    async def scenario():
        port = await closed_port()
        asyncio.get_running_loop().call_later(0.05, setattr, spawner, "port", port)
        began = time.monotonic()
        with pytest.raises(ServerJobEnded, match="FAILED"):
            await spawner.start()
        return time.monotonic() - began

    assert asyncio.run(scenario()) < 2.0 and len(queried) == 4


def test_the_progress_names_the_node_as_soon_as_slurm_says_it_runs_and_ends_with_the_port(monkeypatch):
    # The hub stops reading progress once the start returns, which a fast server does within a second of its
    # job starting: a progress that looked only every second missed the node (issue 24's CI run).
    spawner = PortalSlurmSpawner(portal=PortalConfig(), progress_poll_interval=3600.0, **SUBVARS)
    fake_slurm(spawner, [JobStatus.PENDING, JobStatus.RUNNING], monkeypatch)

    async def scenario():
        await spawner.submit_batch_script()
        await spawner.query_job_status()
        progress = spawner.progress()
        messages = [(await anext(progress))["message"]]
        spawner.slurm_unavailable = "slurm_load_jobs error: Unable to contact slurm controller"  # a failed look
        messages.append((await asyncio.wait_for(anext(progress), 60))["message"])
        await spawner.query_job_status()  # the next look at Slurm answers: it runs
        spawner.slurm_unavailable = ""
        messages.append((await asyncio.wait_for(anext(progress), 60))["message"])
        spawner.port = 8888  # batchspawner-singleuser reports its port
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(progress), 60)
        return messages

    pending, unavailable, running = asyncio.run(scenario())
    assert pending.startswith("Slurm job 42 pending")
    assert unavailable.startswith("Slurm job 42: Slurm unavailable (slurm_load_jobs error: Unable to contact")
    assert running == "Slurm job 42 running on localhost; JupyterLab is starting"
    assert not spawner._watchers  # the watcher it added is gone with it


def test_the_servers_skip_the_language_server_scan_and_the_pypi_manager_but_keep_the_proxy():
    args = PortalSlurmSpawner(portal=PortalConfig()).args
    assert args == list(SINGLEUSER_ARGS)
    assert "--ServerApp.jpserver_extensions=jupyter_lsp=False" in args
    assert "--KernelManager.transport=ipc" in args  # its kernels' channels are Unix sockets, not loopback ports
    assert not any("server_proxy" in arg or "terminals" in arg for arg in args)
    assert all(" " not in arg and ";" not in arg for arg in args)  # they go into the batch script unquoted


def hub_line(when: str, text: str) -> str:
    return f"[I {when} JupyterHub batchspawner:287] {text}"


def test_log_times_of_the_hub_jupyter_server_and_slurm():
    expected = datetime(2026, 11, 21, 4, 2, 44, 978000).timestamp()
    assert log_time(hub_line("2026-11-21 04:02:44.978", "Job submitted. output: 1")) == expected
    assert log_time("[I 2026-11-21 04:02:44.978 ServerApp] Jupyter Server 2.21.1 is running at:") == expected
    assert log_time("[2026-11-21T04:02:44.978] sched: Allocate JobId=1 NodeList=localhost") == expected
    assert log_time("2026-11-21T04:02:48.025Z [ConfigProxy] info: Adding route") is None


def test_the_job_id_and_the_first_matching_line():
    lines = [hub_line("2026-11-21 04:02:44.968", "Spawner submitting command: sbatch"),
             hub_line("2026-11-21 04:02:44.978", "Job submitted. output: 17"),
             hub_line("2026-11-21 04:02:45.978", "Job submitted. output: 18")]
    assert job_id_submitted(lines) == "17"
    assert first_time(lines, "Job submitted") == log_time(lines[1])
    assert first_time(lines, "User alice took") is None
    assert job_id_submitted(["[I x] Job submitted. output: "]) is None


def test_segments_run_from_each_milestone_to_the_next_and_skip_what_a_log_did_not_say():
    run = Run("portal", started=100.0, lab=106.0, submitted=100.5, allocated=101.0, step=101.5, listening=104.0,
              ready=105.0)
    assert run.total == 6.0
    assert run.segments() == {"submit": 0.5, "queue": 0.5, "job_launch": 0.5, "server_start": 2.5,
                              "hub_ready": 1.0, "first_page": 1.0}
    assert sum(run.segments().values()) == run.total
    partial = Run("stock", started=100.0, lab=107.0, submitted=100.5)
    assert partial.segments()["queue"] is None and partial.segments()["submit"] == 0.5


def test_p90_interpolates_and_summary_has_the_spread():
    assert p90([1.0]) == 1.0
    assert p90([float(i) for i in range(1, 11)]) == pytest.approx(9.1)
    assert summary([3.0, 1.0, 2.0]) == {"median": 2.0, "p90": pytest.approx(2.8), "min": 1.0, "max": 3.0}


def test_the_table_has_both_spawners_the_ratio_and_the_breakdown():
    runs = [Run("portal", 0.0, 4.0, submitted=0.1), Run("stock", 0.0, 5.0, submitted=0.2),
            Run("portal", 0.0, 4.0, submitted=0.1), Run("stock", 0.0, 5.0, submitted=0.2)]
    text = table(runs, "python -m bench.spawn --runs 2")
    assert "python -m bench.spawn --runs 2" in text
    assert "total, median" in text and "    4.00     5.00    0.80" in text
    assert "submit: form submit -> sbatch done" in text and "n/a" in text  # queue: no slurmctld line


def test_the_verdict_is_met_at_half_of_stock_and_not_without_both_spawners():
    runs = [Run("portal", 0.0, 2.0), Run("stock", 0.0, 4.0), Run("portal", 0.0, 2.4), Run("stock", 0.0, 4.4)]
    assert median_ratio(runs) == pytest.approx(2.2 / 4.2)
    assert verdict(median_ratio(runs)) == (False, "target: median ratio <= 0.50: 0.52, NOT met")
    assert verdict(0.5) == (True, "target: median ratio <= 0.50: 0.50, met")
    assert verdict(median_ratio(runs[:1]))[0] is False


def test_the_stock_hub_shares_the_boxs_slurm_and_ldap_on_its_own_ports(tmp_path):
    cfg = PortalConfig(state_dir=tmp_path / "box", hub_port=19100)
    settings = stock_hub_settings(cfg, tmp_path / "stock")
    assert settings["slurm_conf"] == str(tmp_path / "box" / "slurm" / "slurm.conf")
    assert settings["ldap_ca_file"] == str(cfg.directory_dir / "tls" / "ca.pem")  # the one directory of the machine
    assert settings["ldap_search_password_file"] == str(cfg.directory_dir / "ldap" / "search-password")
    assert (settings["hub_port"], settings["proxy_api_port"], settings["hub_api_port"],
            settings["dashboard_port"]) == (19140, 19141, 19142, 19143)
    (tmp_path / "stock.yaml").write_text("".join(f"{k}: {v!r}\n" if isinstance(v, str) else f"{k}: {v}\n"
                                                 for k, v in settings.items() if not isinstance(v, (list, dict))))
    stock = load({"DSPORTAL_CONFIG": str(tmp_path / "stock.yaml")})
    assert stock.ldap_port == cfg.ldap_port and stock.hub_port == 19140


def test_stock_batchspawner_gets_the_same_job_and_only_what_the_box_needs():
    c = Config()
    configure_stock_slurm_spawner(c, PortalConfig())
    assert c.JupyterHub.spawner_class == "batchspawner.SlurmSpawner"
    assert (c.BatchSpawnerBase.req_partition, c.BatchSpawnerBase.req_nprocs, c.BatchSpawnerBase.req_memory,
            c.BatchSpawnerBase.req_runtime, c.SlurmSpawner.req_gres) == ("gpu", "2", "4G", "01:00:00", "gpu:1")
    assert c.BatchSpawnerBase.exec_prefix.startswith("/usr/sbin/runuser -u {username} -- /usr/bin/env SLURM_CONF=")
    assert "startup_poll_interval" not in c.BatchSpawnerBase and "args" not in c.Spawner  # stock's own timing


def test_the_stock_hub_runs_the_production_config_then_stock_batchspawner_and_production_never_imports_bench():
    """The baseline is the product's hub with only the spawner swapped, and the product has no benchmark in it."""
    c = PyFileConfigLoader(STOCK_HUB_CONFIG.name, path=str(STOCK_HUB_CONFIG.parent)).load_config()
    assert c.JupyterHub.spawner_class == "batchspawner.SlurmSpawner"
    assert c.JupyterHub.authenticator_class.__name__ == "PortalLDAPAuthenticator"  # the rest is production's
    assert c.Spawner.default_url == "/lab" and c.BatchSpawnerBase.req_partition == "gpu"
    production = [REPO / "jupyterhub_config.py", *(REPO / "portal").rglob("*.py"), *(REPO / "spawners").rglob("*.py")]
    importers = [str(p.relative_to(REPO)) for p in production
                 if re.search(r"^\s*(from|import)\s+bench\b", p.read_text(), re.MULTILINE)]
    assert importers == []


def test_the_breakdown_reads_the_hub_slurm_and_either_scheduler(tmp_path, monkeypatch):
    from bench import spawn

    monkeypatch.setattr(spawn.pwd, "getpwnam", lambda name: mock.Mock(pw_dir=str(tmp_path)))
    (tmp_path / "jupyterhub_slurmspawner_7.log").write_text(
        "install-templates: copied 0\n[I 2026-11-21 04:10:15.500 ServerApp] Jupyter Server 2.21.1 is running at:\n")
    run = Run("stock", started=0.0, lab=1.0)
    spawn.read_breakdown(run, {
        "hub": [hub_line("2026-11-21 04:10:12.740", "Job submitted. output: 7"),
                hub_line("2026-11-21 04:10:15.790", "User alice took 3.1 seconds to start")],
        "ctld": ["[2026-11-21T04:10:13.006] sched/backfill: _start_job: Started JobId=7 in gpu on localhost"],
        "slurmd": ["[2026-11-21T04:10:13.081] launch task StepId=7.0 request from UID:10001"],
    })
    assert run.job_id == "7"
    assert run.allocated - run.submitted == pytest.approx(0.266, abs=1e-6)
    assert run.step - run.allocated == pytest.approx(0.075, abs=1e-6)
    assert run.ready - run.listening == pytest.approx(0.29, abs=1e-6)


def test_the_servers_launcher_is_the_installed_console_script():
    from importlib.metadata import entry_points

    cmd = PortalSlurmSpawner(portal=PortalConfig()).batchspawner_singleuser_cmd
    assert cmd == "/opt/dsportal/venv/bin/dsportal-singleuser"
    found = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert found.get("dsportal-singleuser") == "spawners.singleuser:singleuser_main"


def test_the_iri_parsers_are_built_at_the_first_check_and_the_check_still_works():
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from spawners.singleuser import defer_iri_syntax_parsers\n"
        "assert defer_iri_syntax_parsers()\n"
        "from jsonschema import Draft7Validator\n"
        "assert 'lark' not in sys.modules  # imported jsonschema's format checks, built no parser\n"
        "v = Draft7Validator({'format': 'iri'}, format_checker=Draft7Validator.FORMAT_CHECKER)\n"
        "assert v.is_valid('https://example.org/r%C3%A9sum%C3%A9') and not v.is_valid('not an iri')\n"
        "assert 'lark' in sys.modules and not defer_iri_syntax_parsers()\n"
    )
    import rfc3987_syntax  # noqa: F401  (jsonschema's, with jupyter_server: missing, this fails)
    # run in this checkout, for its spawners, whatever the venv installed
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, cwd=REPO)
