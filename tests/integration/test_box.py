"""The cluster in a box itself: `down` stops everything by PID and leaves nothing behind (processes, namespaces,
links, host entries, mounts), `up` brings back the same state; the nodes are hosts of their own; the culler."""

import hashlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import NODES, PASSWORDS, TEST_SETTINGS, box, jobs_of, slurm, wait_for

SERVICES = ("slapd", "munged", "exim4", "mariadb", "slurmdbd", "slurmctld", *NODES, *(f"gpus-{node}" for node in NODES),
            "mlflow", "prometheus", "hub")  # gpus-<node>: each node's GPU reader (deploy/local/parts/gpus.py)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def fingerprint(cfg) -> dict:
    """What must survive a restart: keys, the directory's own record of alice, the Slurm job counter."""
    entry = subprocess.run(
        ["ldapsearch", "-LLL", "-x", "-ZZ", "-H", f"ldap://localhost:{cfg.ldap_port}",
         "-D", "uid=alice,ou=people,dc=dsportal,dc=local", "-w", PASSWORDS["alice"],
         "-b", "uid=alice,ou=people,dc=dsportal,dc=local", "entryUUID", "createTimestamp"],
        env={**os.environ, "LDAPTLS_CACERT": str(cfg.ca_file)}, capture_output=True, text=True, check=True).stdout
    digest = {name: hashlib.sha256((cfg.state_dir / name).read_bytes()).hexdigest()
              for name in ("munge/munge.key", "hub/jupyterhub_cookie_secret", "accounting/slurmdbd.pass")}
    digest.update({name: hashlib.sha256((cfg.directory_dir / name).read_bytes()).hexdigest()
                   for name in ("tls/ca.pem", "tls/server.pem", "ldap/search-password")})
    return {"alice": entry, **digest}


def pids() -> dict[str, str]:
    return dict(line.split(": ", 1) for line in box("status").stdout.splitlines())


def marked_by(cfg, pid: int) -> bool:
    """The hub, its proxy and its services carry the box's state dir in their environment."""
    try:
        return f"CLUSTER_IN_A_BOX={cfg.state_dir}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def hub_family(cfg) -> set[int]:
    pids = (int(proc.name) for proc in Path("/proc").iterdir() if proc.name.isdigit())
    return {pid for pid in pids if marked_by(cfg, pid)}


def node_namespaces() -> dict[str, str]:
    """The test box's nodes' network namespaces, as a process's /proc/<pid>/ns/net names them ("net:[inode]")."""
    found = {}
    for node in NODES:
        try:
            found[node] = f"net:[{os.stat(f'/run/netns/{node}').st_ino}]"
        except FileNotFoundError:
            continue
    return found


def names_state_dir(cfg, text: str) -> bool:
    """Whether `text` names the box's state dir as a whole path (the Kubernetes test box beside it lives in
    /var/tmp/dsportal-test-kube: not this box's)."""
    return re.search(rf"{re.escape(str(cfg.state_dir))}(/|\s|$)", text) is not None


def leftovers(cfg, namespaces: dict[str, str]) -> list[str]:
    """Anything of the test box still there, found by its own marks only, never by a user id that a user's box
    beside it shares: processes that name its state dir, carry its CLUSTER_IN_A_BOX mark or live in one of its
    nodes' network namespaces (`namespaces`, read while the box ran); its namespaces, links, hosts entries, the
    cgroups Slurm made for its nodes' jobs, its exim4 configuration's line in exim's list of trusted ones."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            network = os.readlink(proc / "ns" / "net")
        except OSError:
            continue
        if state != "Z" and (names_state_dir(cfg, cmdline) or marked_by(cfg, int(proc.name))
                             or network in namespaces.values()):
            found.append(f"process {proc.name}: {cmdline[:120]}")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"namespace {name}" for name in NODES if name in netns.split()]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [f"link {name}" for name in (f"br-{cfg.box_node_prefix}", *(f"ve-{n}" for n in NODES))
              if f" {name}:" in links or f" {name}@" in links]
    hosts = Path("/etc/hosts").read_text().splitlines()
    found += [f"hosts entry {line}" for line in hosts if names_state_dir(cfg, line)]
    found += [f"cgroup {path}" for node in NODES for path in Path("/sys/fs/cgroup").glob(f"*/slurm_{node}")]
    trusted = Path("/etc/exim4/trusted_configs")
    if trusted.exists():
        found += [f"{trusted} line {line}" for line in trusted.read_text().splitlines()
                  if line.startswith(f"{cfg.state_dir}/")]
    return found


def test_up_again_is_idempotent(cluster):
    before = pids()
    assert all(state.startswith("running") for state in before.values()), before
    assert set(before) == set(SERVICES)
    box("up")
    # The same processes: "running (pid)", not a node's Slurm state, which jobs of earlier tests still move.
    assert {name: state.split(",")[0] for name, state in pids().items()} == \
        {name: state.split(",")[0] for name, state in before.items()}


def test_status_lists_the_nodes_with_their_address_and_slurm_state(cluster):
    status = pids()
    for index, node in enumerate(NODES, start=1):
        assert f", {cluster.box_node_address(index)}, slurm: " in status[node], status[node]
        assert status[node].split("slurm: ")[1] in ("idle", "mixed", "allocated", "completing"), status[node]


def test_each_node_is_a_host_of_its_own(cluster):
    """Its own hostname, its own address on the box's bridge, and nothing else but loopback: no route off the
    machine."""
    pid = int(pids()[NODES[1]].split("(")[1].split(")")[0])
    assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")  # not the login host's network
    uts = subprocess.run(["nsenter", "-t", str(pid), "-u", "hostname"], capture_output=True, text=True, check=True)
    assert uts.stdout.strip() == NODES[1]
    inside = subprocess.run(["ip", "netns", "exec", NODES[1], "ip", "-o", "-4", "addr"], capture_output=True,
                            text=True, check=True).stdout
    assert f"inet {cluster.box_node_address(2)}/27" in inside and "127.0.0.1/8" in inside, inside
    routes = subprocess.run(["ip", "netns", "exec", NODES[1], "ip", "route"], capture_output=True, text=True,
                            check=True).stdout
    assert "default" not in routes, routes
    assert f"{cluster.box_node_address(2)}\t{NODES[1]}" in Path("/etc/hosts").read_text()


def test_another_state_dir_with_the_same_node_names_stops_and_crashes_nothing_of_this_box(cluster):
    """Node names are machine-wide, a box's state dir is not: `down` and `crash` of a box that shares this box's
    settings but not its state dir (as the Kubernetes side's directory-only box does, or a second checkout) stop
    none of this box's nodes (a CI run lost both nodes for 15 minutes to that), and crashing one of its nodes is
    refused, naming what holds it."""
    def slurmds() -> dict[str, str]:  # "running (pid)" per node
        return {node: pids()[node].split(",")[0] for node in NODES}
    before = slurmds()
    assert all(state.startswith("running") for state in before.values()), before
    state = Path(tempfile.mkdtemp(prefix="dsportal-test-other-", dir="/var/tmp"))  # world-searchable parents
    try:
        state.chmod(0o755)
        settings = state.with_suffix(".yaml")
        settings.write_text("".join(f"{key}: {value}\n" for key, value in
                                    {**TEST_SETTINGS, "state_dir": str(state)}.items()))
        box("down", settings=settings)
        box("crash", settings=settings)
        refused = box("crash", NODES[0], check=False, settings=settings)
        assert refused.returncode != 0 and f"{NODES[0]}: not this box's node" in refused.stderr, refused
    finally:
        shutil.rmtree(state, ignore_errors=True)
        state.with_suffix(".yaml").unlink(missing_ok=True)
    assert slurmds() == before  # the same slurmd on each node, still running
    assert all(slurm("sinfo", "-h", "-n", node, "-o", "%T").strip() in ("idle", "mixed", "allocated")
               for node in NODES)


@contextmanager
def alices_own_process_and_directory():
    """A user's box shares the homes and user ids with the test box: alice's process (her server or a job of the
    user's box: here a plain process of hers, outside every node of the test box) and a directory she makes while
    the tests run are hers. Yields a check that both are still there; removes them (and only them) afterwards."""
    home = Path(pwd.getpwnam("alice").pw_dir)
    made = home / f"made-by-alice-during-the-tests-{os.getpid()}"
    assert not made.exists()
    hers = subprocess.Popen(["/usr/sbin/runuser", "-u", "alice", "--", "sleep", "600"], cwd="/",
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        subprocess.run(["/usr/sbin/runuser", "-u", "alice", "--", "mkdir", "--", str(made)], cwd="/", check=True)
        (sleeper,) = wait_for(lambda: [p for p in Path("/proc").iterdir() if p.name.isdigit() and
                                       (p / "cmdline").read_bytes() == b"sleep\x00600\x00" and
                                       p.stat().st_uid == pwd.getpwnam("alice").pw_uid], 10,
                              what="alice's own process to start")

        def still_there() -> None:
            assert sleeper.exists() and hers.poll() is None, "alice's own process did not outlive the test box"
            assert made.is_dir(), "alice's own directory did not outlive the test box"
        yield still_there
    finally:
        os.killpg(hers.pid, signal.SIGKILL)  # what this test made, and only that
        hers.wait()
        if made.is_dir():
            made.rmdir()


def test_down_stops_everything_and_up_brings_back_the_same_state(cluster, hub, admin, box_brought_back):
    """`down` ends the box's servers and jobs and leaves nothing of the box; `up` brings back its state. alice's own
    process and directory (made beside the box, as her own box's would be) are not the test box's: both outlive
    its `down` and `up`."""
    before = fingerprint(cluster)
    last_job = slurm("sbatch", "--parsable", "-o", "/dev/null", "--wrap=true").strip()
    # A user's running server and a job of theirs must not outlive `down` either (slurmstepd is not below slurmd).
    alice = hub.login("alice")
    assert hub.spawn_form(alice, gpus=0).status_code == 302
    hub.wait_ready(admin, "alice")
    subprocess.run(["/usr/sbin/runuser", "-u", "bob", "--", "env", f"SLURM_CONF={cluster.slurm_conf_path}",
                    "sbatch", "--no-requeue", "-o", "/dev/null", "--wrap=sleep 600"], cwd="/tmp", check=True,
                   capture_output=True)
    wait_for(lambda: "RUNNING" in slurm("squeue", "-h", "-u", "bob", "-o", "%T"), 30, what="bob's job to run")

    conf = f"{cluster.state_dir}/exim4/exim4.conf"  # trusted by exim while the box's exim4 runs, and then only
    assert conf in Path("/etc/exim4/trusted_configs").read_text().splitlines()
    namespaces = node_namespaces()
    assert sorted(namespaces) == sorted(NODES)
    with alices_own_process_and_directory() as still_there:
        box("down")
        assert all(state.startswith("stopped") for state in pids().values()), pids()
        ports = (cluster.ldap_port, cluster.ldaps_port, cluster.slurmctld_port, cluster.slurmdbd_port,
                 cluster.accounting_db_port, cluster.smtp_port, cluster.hub_port, cluster.proxy_api_port)
        assert not [port for port in ports if listening(port)]
        assert leftovers(cluster, namespaces) == []  # hers is not the test box's
        still_there()

        shown = box("up").stdout
        still_there()
    assert f"{cluster.hub_url}/" in shown and "alice / wonderland" in shown and "mallory" in shown
    assert f"{NODES[0]} ({cluster.box_node_address(1)})" in shown
    assert f"delivers job e-mail to {cluster.box_mail_dir}/<user>" in shown
    assert fingerprint(cluster) == before
    next_job = slurm("sbatch", "--parsable", "-o", "/dev/null", "--wrap=true").strip()
    assert int(next_job) > int(last_job)  # Slurm's saved state came back
    # The jobs that `down` ended are not running again: they are gone from the nodes and from the queue.
    wait_for(lambda: not slurm("squeue", "-h", "-u", "bob,alice", "-t", "RUNNING", "-o", "%i").strip(), 60,
             what="the jobs `down` killed to leave the queue")
    hub.login("alice")


# Issue 25: a spawn works this soon after `up` has recovered the box from a crash. Sized by what it tells apart: the
# fault it guards against left every spawn refused ("pending check") while the hub's startup check waited for the
# dead server, 104-117 s; the spawn that works is ready about 3 s after `up` alone, and took over 14 s in a CI-order
# run beside the other sides (2026-12-04: 15 s was picked on an idle machine, and failed there).
SPAWN_AFTER_CRASH_S = 60


def test_after_a_power_cut_of_the_whole_box_up_recovers_and_a_spawn_works_at_once(cluster, hub, admin, alice,
                                                                                 box_brought_back):
    """Every process of the box killed at once, alice's server among them, Slurm's saved state saying it runs."""
    assert hub.spawn_form(alice, gpus=0).status_code == 302
    before = hub.wait_ready(admin, "alice")
    (old_job,) = [job.split()[0] for job in jobs_of("alice")]
    # slurmctld saves its state a moment after a change: a job younger than the last save is forgotten in a
    # crash (the hub then finds it gone, which is the easy case). This test is about the saved RUNNING one: another
    # job is a change after it, and the next save holds both.
    ready, saved = time.time(), cluster.state_dir / "slurm" / "state" / "job_state"
    slurm("sbatch", "-o", "/dev/null", "--wrap=true")
    wait_for(lambda: saved.stat().st_mtime > ready, 60, what="slurmctld to save the running job's state")

    assert "processes killed at once" in box("crash").stdout
    # Every process of the box's own; the directory is the machine's, shared by every box (it keeps running).
    assert not [name for name, state in pids().items() if name != "slapd" and not state.startswith("stopped")], pids()
    assert pids()["slapd"].startswith("running")
    box("up")
    recovered = time.monotonic()
    # wait_for raises when the hub has not taken a spawn in time; a refused connection meanwhile is a "not yet".
    wait_for(lambda: hub.spawn_form(alice, gpus=0).status_code == 302, SPAWN_AFTER_CRASH_S, interval=1,
             what="the hub to take a spawn after `up`")
    after = hub.wait_ready(admin, "alice", timeout=max(1.0, SPAWN_AFTER_CRASH_S - (time.monotonic() - recovered)))
    took = time.monotonic() - recovered
    print(f"after the crash, alice's new server was ready {took:.1f} s after `up`")
    assert after["url"] == before["url"] and took < SPAWN_AFTER_CRASH_S
    # The server from before the crash was found gone at the hub's startup check, and its job cancelled.
    assert old_job not in [job.split()[0] for job in jobs_of("alice")]
    said = [line for line in (cluster.state_dir / "log" / "hub.log").read_text().splitlines()
            if f"Slurm job {old_job} is RUNNING, but its server at " in line]
    assert said and all("is gone (Connection refused)" in line for line in said), said  # that job's own line


def test_a_killed_hub_is_replaced_whole_and_the_running_server_is_kept(cluster, hub, admin, alice, box_brought_back):
    """SIGKILL to the hub alone: its proxy and services live on, reparented, holding its ports. `up` stops them and
    starts a whole new hub, which takes alice's running server up again (its job was never touched)."""
    assert hub.spawn_form(alice, gpus=0).status_code == 302
    hub.wait_ready(admin, "alice")
    (job,) = jobs_of("alice")
    old_hub = int(pids()["hub"].split("(")[1].split(")")[0])
    old_family = hub_family(cluster)
    assert len(old_family) == 4, old_family  # the hub, configurable-http-proxy, the dashboard, the idle culler
    os.kill(old_hub, signal.SIGKILL)
    wait_for(lambda: old_hub not in hub_family(cluster), 30, what="the hub to die")
    assert len(hub_family(cluster)) == 3  # orphans

    shown = box("up").stdout
    assert "hub: stopping what a hub killed earlier left running" in shown, shown
    assert not old_family & hub_family(cluster) and len(hub_family(cluster)) == 4
    assert jobs_of("alice") == [job]
    assert hub.server(admin, "alice")["ready"]
    assert alice.get(f"{hub.url}/user/alice/lab", timeout=30).status_code == 200


def test_the_idle_culler_runs_as_a_service_with_its_own_role(cluster, hub, admin):
    service = hub.api(admin, "GET", "services/idle-culler").json()
    assert service["roles"] == ["idle-culler"] and not service["admin"]
    assert os.path.exists(f"/proc/{service['pid']}")
    # Its role lets it list users with their servers' activity (it asks once at start, then every 10 minutes).
    culler_requests = [line for line in (cluster.state_dir / "log" / "hub.log").read_text().splitlines()
                       if "(idle-culler@" in line]
    assert any(" 200 GET /hub/api/users?state=" in line for line in culler_requests), culler_requests
    assert not [line for line in culler_requests if " 403 " in line]


def test_users_exist_with_their_directory_ids_and_private_homes(cluster):
    import pwd
    alice = pwd.getpwnam("alice")
    assert (alice.pw_uid, alice.pw_gid, alice.pw_dir, alice.pw_shell) == (10001, 100, "/home/alice", "/bin/bash")
    groups = subprocess.run(["id", "-nG", "alice"], capture_output=True, text=True, check=True).stdout.split()
    assert {"datascientists", "gpu-users"} <= set(groups)
    peek = subprocess.run(["/usr/sbin/runuser", "-u", "bob", "--", "ls", "/home/alice"], capture_output=True, text=True)
    assert peek.returncode != 0 and "Permission denied" in peek.stderr
