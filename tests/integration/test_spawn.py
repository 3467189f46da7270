"""Spawning JupyterLab through Slurm: the GPU form, refusals, fail-fast starts and hub restarts."""

import json
import pwd
import re
import subprocess
import time
from pathlib import Path

import pytest

from portal.config import load
from portal.runas import RUNUSER
from spawners.options import SPAWN_SNAPSHOT_S
from spawners.slurm_script import server_log_dir
from tests.conftest import (
    NODES,
    SERVER_START_S,
    as_user,
    box,
    end_job,
    jobs_of,
    page_error,
    scratch_dir,
    slurm,
    wait_for,
)
from tests.integration.helpers import start_in_background

HOME = Path("/home/alice")
NOTIFICATION_SETTINGS = "lab/api/settings/@jupyterlab/apputils-extension:notification"


def singleuser_environ(user: str, job_id: str) -> dict[str, str]:
    """The environment of the user's jupyterhub-singleuser process in Slurm job `job_id`, read from /proc (a
    server of an earlier test may still be exiting beside it)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if "jupyterhub-singleuser" in cmdline and proc.stat().st_uid == user_uid(user):
                pairs = (proc / "environ").read_bytes().split(b"\0")
                environ = dict(p.decode().split("=", 1) for p in pairs if b"=" in p)
                if environ.get("SLURM_JOB_ID") == job_id:
                    return environ
        except OSError:
            continue
    raise AssertionError(f"no jupyterhub-singleuser process of {user} in Slurm job {job_id} found")


def user_uid(user: str) -> int:
    import pwd
    return pwd.getpwnam(user).pw_uid


def test_alice_gets_jupyterlab_on_a_slurm_job_with_a_gpu(cluster, hub, admin, alice):
    logs_in_home = set(HOME.glob("jupyterhub_slurmspawner_*.log"))
    response = hub.spawn_form(alice, partition="gpu", gpus=1, cpus=2, memory_gb=4, runtime="01:00:00")
    assert response.status_code == 302, page_error(response)
    hub.wait_ready(admin, "alice")

    (job,) = jobs_of("alice")
    job_id, state = job.split()
    assert state == "RUNNING"
    details = slurm("scontrol", "show", "job", "-o", job_id)
    assert "UserId=alice(10001)" in details
    assert "TresPerNode=gres:gpu:1" in details, details
    environ = singleuser_environ("alice", job_id)
    assert environ["CUDA_VISIBLE_DEVICES"] == "0"
    assert environ["USER"] == "alice"
    # It runs on a compute node, a host of its own, and the hub's proxy reaches it at that node's address.
    node = environ["SLURMD_NODENAME"]
    assert node in NODES and f"NodeName={node} " in slurm("scontrol", "show", "node", "-o", node)
    address = slurm("scontrol", "show", "node", "-o", node).split("NodeAddr=")[1].split()[0]
    state = hub.api(admin, "GET", "users/alice").json()["servers"][""]["state"]
    assert state["job_status"].split()[1] == node, state
    hub_log = (cluster.state_dir / "log" / "hub.log").read_text()
    assert re.search(rf"Adding route /user/alice -> http://{re.escape(address)}:\d+", hub_log)

    lab = alice.get(f"{hub.url}/user/alice/lab", timeout=30)
    assert lab.status_code == 200 and "JupyterLab" in lab.text
    assert_a_clean_lab(hub, alice, job_id)

    hub.stop(admin, "alice")
    assert jobs_of("alice") == []
    assert set(HOME.glob("jupyterhub_slurmspawner_*.log")) == logs_in_home  # none new at the home's top level


def assert_a_clean_lab(hub, alice, job_id: str) -> None:
    """What JupyterLab's page does with the server: no news prompt (fetchNews is "none" only when asked), a
    "Portal" card to the dashboard, the portal's idle-GPU notice among its extensions (tests/browser/test_gpu_notice.py
    runs it); and the job's output is out of sight, in a directory only alice reads."""
    page = alice.get(f"{hub.url}/user/alice/lab", timeout=30).text
    config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page,
                                  re.S).group(1))
    (notice,) = [e for e in config["federated_extensions"] if e["name"] == "dsportal-gpu-notice"]
    script = alice.get(f"{hub.url}{config['fullLabextensionsUrl']}/dsportal-gpu-notice/{notice['load']}", timeout=30)
    assert script.status_code == 200 and '_JUPYTERLAB[NAME] = {' in script.text, script.status_code
    settings = alice.get(f"{hub.url}/user/alice/{NOTIFICATION_SETTINGS}", timeout=30).json()
    assert settings["schema"]["properties"]["fetchNews"]["default"] == "false", settings
    assert "fetchNews" not in settings["settings"]  # alice chose nothing: the default is what the page uses
    servers = alice.get(f"{hub.url}/user/alice/server-proxy/servers-info", timeout=30).json()["server_processes"]
    (portal,) = [s for s in servers if s["name"] == "portal"]
    assert portal["new_browser_tab"] and portal["launcher_entry"]["path_info"] == "../../services/portal/"
    cards = [s for s in servers if s["name"] in ("portal", "tensorboard")]
    assert len(cards) == 2, servers
    for card in cards:  # the Portal and TensorBoard cards' icons, served by the server's jupyter-server-proxy
        icon = alice.get(f"{hub.url}{card['launcher_entry']['icon_url']}", timeout=30)
        assert icon.status_code == 200 and icon.headers["Content-Type"] == "image/svg+xml", card
    log_dir = Path(server_log_dir(str(HOME), load().cluster_name))
    assert (log_dir.stat().st_uid, oct(log_dir.stat().st_mode & 0o777)) == (user_uid("alice"), "0o700")
    assert "is running at" in (log_dir / f"jupyterhub_slurmspawner_{job_id}.log").read_text()


# One refusal through the hub's own form handler (bob's quota, read from his groups in the directory); every other
# bad value is the spawner's form reader's (tests/unit/spawners/test_forms.py), the same code behind this handler.
@pytest.mark.parametrize(("user", "fields", "message"), [
    ("bob", {"gpus": 1}, "gpus: 1 is out of range; allowed: 0 (your GPU quota is 0"),
])
def test_bad_choices_are_refused_before_anything_is_submitted(hub, admin, user, fields, message):
    session = hub.login(user)
    response = hub.spawn_form(session, **fields)
    assert response.status_code == 400  # the form again, with the error
    assert message in response.text, response.text[-3000:]
    assert 'name="gpus"' in response.text
    assert hub.server(admin, user) is None
    assert jobs_of(user) == []


def test_gpus_beyond_what_is_free_are_refused(hub, admin):
    # 3 of the 4 GPUs of every node (root's job: no quota), so 1 is the most free on any node.
    holder = slurm("sbatch", "--parsable", f"--nodes={len(NODES)}", "--ntasks-per-node=1", "--gres=gpu:3",
                   "--wrap=sleep 300", "-o", "/dev/null").strip()
    try:
        wait_for(lambda: "RUNNING" in slurm("squeue", "-h", "-j", holder, "-o", "%T"), 30, what="the holder job")
        session = hub.login("alice")
        # The form reads the cluster through a snapshot at most SPAWN_SNAPSHOT_S old, taken off the event loop:
        # it counts the holder once the snapshot is new enough (once, in a CI-order run, the first look did not).
        deadline, said = time.monotonic() + SPAWN_SNAPSHOT_S + 30, ""
        while "1 free on a node now" not in said and time.monotonic() < deadline:
            form = session.get(f"{hub.url}/hub/spawn", timeout=30).text
            said = " ".join(m.group(1).split()) if (m := re.search(r"(0 to \d+:.*?free on a node now)", form,
                                                                  re.S)) else form[-2000:]
            time.sleep(0.5)
        assert "1 free on a node now" in said, said
        response = hub.spawn_form(session, gpus=2)
        assert "gpus: 2 is out of range; allowed: 0-1 (1 free on a node of partition gpu now)" in response.text
        assert jobs_of("alice") == []
    finally:
        end_job(holder)


def test_progress_shows_the_job_and_slurms_pending_reason(hub, admin, alice, every_node_held):
    events, done = start_in_background(hub, admin, "alice", {"gpus": 0})
    pending = wait_for(lambda: [e[1]["message"] for e in events if "(Slurm: Resources)" in e[1].get("message", "")],
                       30, what="a progress event with Slurm's pending reason")
    (job,) = jobs_of("alice")
    # Slurm's reason, then what holds the nodes (a job of root's here) and what each has free, as a job's submit says.
    assert pending[0].startswith(f"Slurm job {job.split()[0]} pending: waiting for GPUs, CPUs or memory to free up "
                                 "(Slurm: Resources); will wait for other users' jobs to end: "), pending[0]
    assert all(f"{node} has 0 of 8 CPUs free" in pending[0] for node in NODES), pending[0]

    slurm("scancel", every_node_held)
    assert done.wait(SERVER_START_S) and events[-1][1].get("ready"), events
    assert any(re.search(rf"running on ({'|'.join(NODES)})", e[1].get("message", "")) for e in events), events


def test_a_job_killed_right_after_submission_fails_the_spawn_with_the_reason(hub, admin, alice, every_node_held):
    events, done = start_in_background(hub, admin, "alice", {"gpus": 0})
    (job,) = wait_for(lambda: jobs_of("alice"), 10, interval=0.1, what="alice's job")
    job_id = job.split()[0]
    wait_for(lambda: events, 10, what="the first progress event")
    slurm("scancel", job_id)
    killed = time.monotonic()

    assert done.wait(15), f"the spawn did not fail within 15 s: {events}"
    failed_at, final = events[-1]
    assert final.get("failed") and failed_at - killed < 15
    assert f"Slurm job {job_id} ended (CANCELLED" in final["message"]
    assert hub.server(admin, "alice") is None


BROKEN = "alice"


@pytest.fixture
def broken_user_config():
    """A user config that makes alice's JupyterLab exit on start, as a typo in a real one would: in the Jupyter
    config directory of the test box's servers (its server_environment's JUPYTER_CONFIG_DIR, in its scratch mark),
    so her own ~/.jupyter, which her servers of a user's box read, is never touched. Removed afterwards."""
    home = Path(pwd.getpwnam(BROKEN).pw_dir)
    (folder,) = [item.split("=", 1)[1].replace("{home}", str(home)) for item in load().server_environment
                 if item.startswith("JUPYTER_CONFIG_DIR=")]
    config = Path(folder) / "jupyter_server_config.py"
    scratch_dir(BROKEN)
    as_user(BROKEN, "mkdir", "-p", "--", str(config.parent))
    subprocess.run([RUNUSER, "-u", BROKEN, "--", "/bin/sh", "-c", 'cat > "$1"', "sh", str(config)], cwd="/",
                   input=f'c.ServerApp.root_dir = "{home}/no-such-folder"\n', text=True, check=True)
    yield config
    config.unlink()


def test_a_server_that_dies_on_start_fails_the_spawn_within_seconds(hub, admin, alice, broken_user_config):
    started = time.monotonic()
    events, done = start_in_background(hub, admin, BROKEN, {"gpus": 0})
    assert done.wait(30), f"no end to the spawn: {events}"
    failed_at, final = events[-1]
    assert final.get("failed"), final
    assert failed_at - started < 15  # stock batchspawner waits http_timeout (here 120 s) or start_timeout
    assert re.search(r"Slurm job \d+ ended \(FAILED, exit code 1:0", final["message"]), final["message"]
    home = pwd.getpwnam(BROKEN).pw_dir
    assert re.search(rf"No such directory: '+{home}/no-such-folder", final["message"])  # the job's output
    assert f"Last lines of {server_log_dir(home, load().cluster_name)}/jupyterhub_slurmspawner_" in final["message"]


def server_log_tail(user: str, job_id: str) -> str:
    """The end of the output of the user's server job (the spawner's log file of that job), for a failure's
    message."""
    home = pwd.getpwnam(user).pw_dir
    found = sorted(Path(server_log_dir(home, load().cluster_name)).glob(f"*_{job_id}.log"))
    return found[-1].read_text(errors="replace")[-3000:] if found else f"no log of job {job_id}"


def test_a_hub_restart_keeps_running_servers(hub, admin, alice):
    assert hub.spawn_form(alice, gpus=0).status_code == 302
    hub.wait_ready(admin, "alice")
    (before,) = jobs_of("alice")

    box("stop", "hub")
    # Once (in a dozen full runs) her server's job ended with exit status 0 within a second of the hub's stop, right
    # after its start: its own log says why, so a failure shows it.
    assert jobs_of("alice") == [before], server_log_tail("alice", before.split()[0])
    box("start", "hub")

    assert jobs_of("alice") == [before]
    assert hub.server(admin, "alice")["ready"]
    assert alice.get(f"{hub.url}/user/alice/lab", timeout=30).status_code == 200
