"""The cluster in a box itself: `down` stops everything by PID, `up` brings back the same state; the culler."""

import hashlib
import os
import socket
import subprocess

from tests.conftest import PASSWORDS, box, slurm

SERVICES = ("slapd", "munged", "slurmctld", "slurmd", "hub")


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
              for name in ("munge/munge.key", "tls/ca.pem", "tls/server.pem", "hub/jupyterhub_cookie_secret")}
    return {"alice": entry, **digest}


def pids() -> dict[str, str]:
    return dict(line.split(": ", 1) for line in box("status").stdout.splitlines())


def test_up_again_is_idempotent(cluster):
    before = pids()
    assert all(state.startswith("running") for state in before.values()), before
    assert set(before) == set(SERVICES)
    box("up")
    assert pids() == before


def test_down_stops_everything_and_up_brings_back_the_same_state(cluster, hub):
    before = fingerprint(cluster)
    last_job = slurm("sbatch", "--parsable", "-o", "/dev/null", "--wrap=true").strip()

    box("down")
    assert all(state == "stopped" for state in pids().values()), pids()
    ports = (cluster.ldap_port, cluster.ldaps_port, cluster.slurmctld_port, cluster.slurmd_port, cluster.hub_port,
             cluster.hub_api_port, cluster.proxy_api_port)
    assert not [port for port in ports if listening(port)]

    shown = box("up").stdout
    assert f"{cluster.hub_url}/" in shown and "alice / wonderland" in shown and "mallory" in shown
    assert fingerprint(cluster) == before
    next_job = slurm("sbatch", "--parsable", "-o", "/dev/null", "--wrap=true").strip()
    assert int(next_job) > int(last_job)  # Slurm's saved state came back
    hub.login("alice")


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
