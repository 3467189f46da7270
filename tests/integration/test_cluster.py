"""The cluster past one host: Slurm accounting that holds every GPU quota, the directory synced into it, and faults
of the cluster itself survived with nothing lost (a drained node, slurmctld restarting, accounting down, a node
dying in the middle of a 2-node training).

Sized for 2 CPU cores: the trainings are the demo set's 64x64 images, batch 8, one worker on each node.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from portal import jobs
from portal.config import load
from portal.jobs.demo_data import ensure_demo_data
from portal.runas import RUNUSER
from portal.service.board import USAGE_REFRESH_S
from spawners import slurm_cluster
from tests.conftest import NODES, REPO, TEST_CONFIG, box, job_wait_s, jobs_of, slurm, wait_for

pytestmark = pytest.mark.integration
PORTAL = "/services/portal/"
TINY = {"template": "chexnet", "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 4}
JOB_TIMEOUT_S = 900


def as_user(cluster, user: str, *argv: str, check: bool = False) -> subprocess.CompletedProcess:
    """A command as `user` from their home, as typed in a JupyterLab terminal."""
    return subprocess.run([RUNUSER, "-u", user, "--", "env", f"SLURM_CONF={cluster.slurm_conf_path}", *argv],
                          capture_output=True, text=True, timeout=60, cwd="/tmp", check=check)


def portal_client(hub, user: str) -> requests.Session:
    session = hub.login(user)
    token = hub.api(session, "POST", f"users/{user}/tokens", json={"note": "cluster test"}).json()["token"]
    client = requests.Session()
    client.headers["Authorization"] = f"token {token}"
    client.base = f"{hub.url}{PORTAL}api/"  # type: ignore[attr-defined]
    return client


def accounts(cluster, *args: str) -> subprocess.CompletedProcess:
    """`python -m portal.accounts ...` as an admin types it, with the test box's settings."""
    return subprocess.run([str(cluster.venv / "bin" / "python"), "-m", "portal.accounts", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO,
                          env={"DSPORTAL_CONFIG": str(TEST_CONFIG), "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def demo_data(cluster):
    return ensure_demo_data(cluster)


@pytest.fixture
def no_jobs_left(cluster):
    """Every job of the demo users is cancelled after the test, whatever it left."""
    yield
    slurm("scancel", "-u", "alice")
    slurm("scancel", "-u", "bob")
    wait_for(lambda: not jobs_of("alice") and not jobs_of("bob"), 60, what="the test's jobs to end")


# --- the GPU quota, held by Slurm for everything a user runs together ----------------------------------------


def test_the_quota_counts_servers_jobs_and_sbatch_from_a_terminal(cluster, hub, admin, alice, demo_data,
                                                                  no_jobs_left):
    assert hub.spawn_form(alice, gpus=2).status_code == 302
    hub.wait_ready(admin, "alice")
    # The portal refuses at submit, with the arithmetic.
    with pytest.raises(jobs.JobSpecError) as err:
        jobs.submit({**TINY, "gpus_per_node": 4}, backend="slurm", user="alice")
    assert str(err.value) == "gpus_per_node: you use 2 of your 4 GPUs (your server); ask for at most 2"
    client = portal_client(hub, "alice")
    refused = client.post(f"{client.base}jobs", json={**TINY, "nodes": 2, "gpus_per_node": 2}, timeout=60)
    assert refused.status_code == 400 and refused.json()["field"] == "gpus_per_node", refused.text
    assert refused.json()["error"].endswith("ask for at most 1 per node on 2 nodes")
    # The spawn form offers no more than is left either (her server counts; it is not running in this new form).
    # What bypasses the portal meets the same limit in Slurm itself: 2 + 3 > 4, so it waits...
    typed = as_user(cluster, "alice", "sbatch", "--parsable", "--gres=gpu:3", "-o", "/dev/null", "--wrap=sleep 60")
    assert typed.returncode == 0, typed.stderr
    job_id = typed.stdout.strip()
    wait_for(lambda: slurm("squeue", "-h", "-j", job_id, "-o", "%r").strip() in ("AssocGrpGRES",
                                                                                 "AssocGrpGRESLimit"),
             30, what="Slurm to hold the terminal's job at alice's GPU limit")
    # ...and the dashboard says why, in words, beside what holds her GPUs.
    usage = wait_for(lambda: (u := client.get(f"{client.base}usage", timeout=60).json()) and any(
        h["job_id"] == job_id for h in u["quotas"][0]["holders"]) and u, 30, what="the dashboard's usage")
    mine = usage["quotas"][0]
    assert (mine["user"], mine["gpu_quota"], mine["gpus_in_use"]) == ("alice", 4, 5), mine
    waiting = next(h for h in mine["holders"] if h["job_id"] == job_id)
    assert "your other jobs and servers hold your whole GPU quota" in waiting["reason"], waiting
    # A job that can never fit the limit is refused by Slurm at once; a user without an association cannot submit.
    never = as_user(cluster, "bob", "sbatch", "--gres=gpu:1", "-o", "/dev/null", "--wrap=true")
    assert never.returncode != 0 and "Job violates accounting/QOS policy" in never.stderr, never.stderr
    nobody = as_user(cluster, "mallory", "sbatch", "-o", "/dev/null", "--wrap=true")
    assert nobody.returncode != 0 and "Invalid account" in nobody.stderr, nobody.stderr


def test_gpu_hours_this_week_come_from_slurm_accounting(cluster, hub):
    """After the test above: alice's server held 2 GPUs for a while; admins see every user (of the hub)."""
    hub.login("bob")
    users, admins = portal_client(hub, "alice"), portal_client(hub, "admin")

    def both_views() -> tuple[dict, dict] | None:
        """alice's view and the admin's, once both have her server and tell the same hours: each is cached for up
        to USAGE_REFRESH_S, and alice's may still be the one read in the test above, while her server ran or
        before slurmdbd had its record."""
        alice = users.get(f"{hub.url}{PORTAL}api/usage", timeout=60).json()
        everyone = admins.get(f"{hub.url}{PORTAL}api/usage", timeout=60).json()
        mine = alice.get("per_user", {}).get("alice")
        server_seen = any(job["kind"] == "server" and job["gpus"] == 2 for job in alice.get("jobs", []))
        return (alice, everyone) if server_seen and mine and everyone.get("per_user", {}).get(
            "alice") == pytest.approx(mine, abs=0.01) else None

    alice, everyone = wait_for(both_views, USAGE_REFRESH_S + 15, interval=3, what="the two views of GPU-hours")
    assert alice["history_unavailable"] == "" and alice["per_user"].keys() == {"alice"}, alice
    server = next(job for job in alice["jobs"] if job["kind"] == "server" and job["gpus"] == 2)
    assert server["gpu_hours"] > 0 and server["nodes"] in NODES
    assert {"alice", "bob"} <= {q["user"] for q in everyone["quotas"]}


def test_what_a_user_writes_into_a_job_forges_no_job_of_anothers(cluster, hub, no_jobs_left):
    """A job's name, comment and working directory are its user's text (issue 25): bob's CPU job whose name,
    comment and directory hold lines of squeue's, sacct's and scontrol's formats (a job of alice's with 4 GPUs, her
    user id, a state) is read as the one CPU job of bob's it is: in the hub's spawn form, the dashboard's quota for
    alice and for the admin, the job's state, and the week's GPU-hours from accounting."""
    node = NODES[0]
    name = (f"x\n900001|alice|RUNNING|1:00|1|gres:gpu:4|{node}|y\n"
            f"900002|alice|RUNNING|2026-11-16T00:00:00|Unknown|gres/gpu=4|{node}|z")
    comment = "c UserId=alice(10001) JobState=RUNNING TresPerNode=gres:gpu:4"
    workdir = "/tmp/forged\n900003|alice|RUNNING|1:00|1|gres:gpu:4|node1|w"
    as_user(cluster, "bob", "mkdir", "-p", workdir, check=True)
    hours_before = jobs.usage(everyone=True).per_user.get("alice", 0.0)
    try:
        typed = as_user(cluster, "bob", "sbatch", "--parsable", f"--job-name={name}", f"--comment={comment}",
                        f"--chdir={workdir}", "-o", "/dev/null", "--wrap=sleep 30")
        assert typed.returncode == 0, typed.stderr
        job_id = typed.stdout.strip()
        wait_for(lambda: slurm("squeue", "-h", "-j", job_id, "-o", "%T").strip() == "RUNNING", 60,
                 what="bob's job to run")

        form = asyncio.run(slurm_cluster.cluster_limits(load(), "alice", ("datascientists", "gpu-users")))
        assert (form.quota.limit, form.quota.in_use, form.quota.described()) == (4, 0, ())  # what the spawn form offers
        client = portal_client(hub, "alice")
        quota = wait_for(lambda: client.get(f"{client.base}usage", timeout=60).json()["quotas"][0], 30,
                         what="alice's quota on the dashboard")
        assert (quota["gpus_in_use"], quota["holders"]) == (0, []), quota
        admins = portal_client(hub, "admin")
        for quota in admins.get(f"{admins.base}usage", timeout=60).json()["quotas"]:
            assert quota["gpus_in_use"] == 0 and quota["holders"] == [], quota
        assert jobs.limits("slurm", "alice").quota.in_use == 0
    finally:
        slurm("scancel", "-u", "bob")
        as_user(cluster, "bob", "rm", "-rf", "--", workdir)
    wait_for(lambda: any(j.job_id == job_id for j in jobs.usage(everyone=True).jobs), 60,
             what="bob's job in Slurm's accounting")
    report = jobs.usage(everyone=True)
    (bobs,) = [j for j in report.jobs if j.job_id == job_id]
    assert (bobs.user, bobs.name, bobs.gpus, bobs.gpu_hours) == ("bob", name, 0, 0.0)
    assert not any(j.job_id in ("900001", "900002", "900003") for j in report.jobs)
    assert report.per_user.get("alice", 0.0) == pytest.approx(hours_before, abs=0.01)


def test_a_user_at_the_job_limit_is_refused_by_the_portal_and_by_slurm(cluster, hub, no_jobs_left):
    """max_jobs_per_user (50) is Slurm's MaxSubmitJobs on each association (portal.accounts) and the portal's own
    check: bob's 50 held jobs from a terminal fill it; the portal's submit then says so, naming the limit, and the
    51st sbatch is refused by Slurm itself. (Issue 25: 24 jobs in 6.4 s were all accepted, with no limit.)"""
    limit = load().max_jobs_per_user
    assert f"|{limit}" in slurm("sacctmgr", "-nP", "show", "assoc", "user=bob", "format=User,MaxSubmitJobs")
    for _ in range(limit):
        as_user(cluster, "bob", "sbatch", "--hold", "-o", "/dev/null", "--wrap=true", check=True)
    client = portal_client(hub, "bob")

    def refused_by_the_portal() -> bool:
        """Every submit is refused: by Slurm while the dashboard's shared squeue answer is older than bob's jobs,
        then by the portal's own check."""
        refused = client.post(f"{client.base}jobs", json={**TINY, "gpus_per_node": 0}, timeout=60)
        assert refused.status_code == 400 and refused.json()["field"] == "spec", refused.text
        assert "at most" in refused.json()["error"] and str(limit) in refused.json()["error"], refused.text
        return f"you have {limit} jobs queued or running" in refused.json()["error"]

    wait_for(refused_by_the_portal, load().dashboard_refresh_s + 30, interval=1, what="the portal's own refusal")
    typed = as_user(cluster, "bob", "sbatch", "--hold", "-o", "/dev/null", "--wrap=true")
    assert typed.returncode != 0 and "Job violates accounting/QOS policy" in typed.stderr, typed.stderr


# --- the directory's groups and quotas, synced into Slurm -----------------------------------------------------


def ldap_modify(cluster, ldif: str) -> None:
    rootpw = (cluster.state_dir / "ldap" / "rootpw").read_text()
    subprocess.run(["ldapmodify", "-x", "-ZZ", "-H", f"ldap://localhost:{cluster.ldap_port}",
                    "-D", f"cn=admin,{cluster.ldap_base_dn}", "-w", rootpw], input=ldif, text=True, check=True,
                   capture_output=True, env={"LDAPTLS_CACERT": str(cluster.ca_file), "PATH": "/usr/bin:/bin"})


def association(user: str) -> str:
    return slurm("sacctmgr", "-nP", "show", "assoc", f"user={user}", "format=Account,GrpTRES").strip()


def test_the_accounts_follow_the_directory(cluster):
    assert accounts(cluster, "sync", "--dry-run").stdout.strip().endswith("in sync")
    assert association("alice") == "gpu-users|gres/gpu=4" and association("bob") == "datascientists|gres/gpu=0"
    group = f"cn=gpu-users,{cluster.ldap_group_search_base}"
    ldap_modify(cluster, f"dn: {group}\nchangetype: modify\nadd: memberUid\nmemberUid: bob\n")
    try:
        dry = accounts(cluster, "sync", "--dry-run")
        assert dry.returncode == 0 and "move bob from datascientists to gpu-users with at most 4 GPUs" in dry.stdout
        assert association("bob") == "datascientists|gres/gpu=0"  # a dry run changes nothing
        assert accounts(cluster, "sync").returncode == 0
        assert association("bob") == "gpu-users|gres/gpu=4"
        job = as_user(cluster, "bob", "sbatch", "--parsable", "--gres=gpu:1", "-o", "/dev/null", "--wrap=true")
        assert job.returncode == 0, job.stderr
    finally:
        ldap_modify(cluster, f"dn: {group}\nchangetype: modify\ndelete: memberUid\nmemberUid: bob\n")
        wait_for(lambda: not jobs_of("bob"), 30, what="bob's job to end")
        assert accounts(cluster, "sync").returncode == 0
    assert association("bob") == "datascientists|gres/gpu=0"
    assert accounts(cluster, "sync", "--dry-run").stdout.strip().endswith("in sync")


def test_the_accounts_command_explains_itself(cluster):
    assert accounts(cluster, "resync").returncode == 2
    shown = accounts(cluster, "show")
    assert shown.returncode == 0 and "alice" in shown.stdout and "gpu-users" in shown.stdout


# --- a drained node: the forms offer only what usable nodes have ---------------------------------------------


@pytest.fixture
def node2_drained(cluster):
    slurm("scontrol", "update", f"nodename={NODES[1]}", "state=drain", "reason=test")
    yield NODES[1]
    slurm("scontrol", "update", f"nodename={NODES[1]}", "state=resume")


def test_a_drained_node_is_not_offered(cluster, hub, demo_data, node2_drained, no_jobs_left):
    # 3 GPUs of the other node are taken: only 1 is free on any usable node now.
    holder = slurm("sbatch", "--parsable", f"--nodelist={NODES[0]}", "--gres=gpu:3", "-o", "/dev/null",
                   "--wrap=sleep 120").strip()
    wait_for(lambda: "RUNNING" in slurm("squeue", "-h", "-j", holder, "-o", "%T"), 30, what="the holder")
    try:
        limits = jobs.limits("slurm", user="alice")
        assert limits.nodes == 1 and f"{node2_drained} (idle+drain)" in limits.unusable_note
        with pytest.raises(jobs.JobSpecError) as err:
            jobs.validate({**TINY, "nodes": 2, "gpus_per_node": 1}, "slurm", user="alice")
        assert f"nodes: 2 is out of range; allowed: 1 (usable nodes in partition gpu; not usable now: " \
               f"{node2_drained} (idle+drain))" == str(err.value)
        form = hub.login("alice").get(f"{hub.url}/hub/spawn", timeout=30).text
        assert "1 free on a node now" in form and 'max="1"' in form
    finally:
        slurm("scancel", holder)


# --- slurmctld restarts while a server waits and a job runs ----------------------------------------------------


def test_a_controller_restart_loses_neither_a_pending_server_nor_a_running_job(cluster, hub, admin, alice,
                                                                               no_jobs_left):
    done = Path("/tmp/dsportal-test-ctld-job-done")
    done.unlink(missing_ok=True)
    holder = slurm("sbatch", "--parsable", f"--nodes={len(NODES)}", "--exclusive", "--mem=1G", "-o", "/dev/null",
                   f"--wrap=sleep 25 && touch {done}").strip()
    wait_for(lambda: "RUNNING" in slurm("squeue", "-h", "-j", holder, "-o", "%T"), 30, what="the running job")
    threading.Thread(target=hub.api, args=(admin, "POST", "users/alice/server"),
                     kwargs={"data": json.dumps({"gpus": 0})}, daemon=True).start()
    wait_for(lambda: [j for j in jobs_of("alice") if j.endswith("PENDING")], 30, what="alice's server to wait")

    assert box("stop", "slurmctld").returncode == 0
    time.sleep(3)  # the hub's spawner polls while the controller is away
    assert box("start", "slurmctld").returncode == 0

    # The running job carried on and finished by itself; the waiting server started once it had, and the hub
    # took it up.
    wait_for(done.exists, 90, what="the running job to finish")
    server = hub.wait_ready(admin, "alice")
    assert server["ready"] and alice.get(f"{hub.url}/user/alice/lab", timeout=30).status_code == 200
    assert slurm("sacct", "-n", "-X", "-P", "-j", holder, "-o", "State").strip() == "COMPLETED"


# --- accounting (slurmdbd or its database) down ----------------------------------------------------------------


@pytest.mark.parametrize("service", ["slurmdbd", "mariadb"])
def test_jobs_run_while_accounting_is_down_and_nothing_is_missing_after(cluster, hub, service, no_jobs_left):
    client = portal_client(hub, "alice")
    assert box("stop", service).returncode == 0
    try:
        job = as_user(cluster, "alice", "sbatch", "--parsable", "-o", "/dev/null", "--wrap=sleep 2", check=True)
        job_id = job.stdout.strip()
        wait_for(lambda: not [j for j in jobs_of("alice") if j.startswith(f"{job_id} ")], 60,
                 what="the job to run and end while accounting is down")
        usage = client.get(f"{client.base}usage", timeout=90)
        assert usage.status_code == 200, usage.text
        assert "GPU-hours are unavailable" in usage.json()["history_unavailable"], usage.json()
        assert client.get(f"{client.base}jobs", timeout=60).status_code == 200
        page = client.get(f"{hub.url}{PORTAL}usage", timeout=90)
        assert page.status_code == 200 and "GPU-hours are unavailable" in page.text
    finally:
        assert box("start", service).returncode == 0
        if service == "mariadb":
            box("start", "slurmdbd")
    # slurmctld kept the record and hands it over once accounting answers again.
    wait_for(lambda: slurm("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State").strip() == "COMPLETED", 120,
             what=f"job {job_id} to reach accounting")


# --- a job's processes end with it, every one, on every node --------------------------------------------------

# Slurm's KillWait (30 s): a signalled job's processes get that long before SIGKILL; then the epilog runs.
KILL_WAIT_S = 45
# A process hidden in a cgroup below its step that holds the step's output keeps slurmstepd waiting for that
# output for 60 s (fixed in slurmstepd) before the step ends and the epilog kills it.
STEP_IO_WAIT_S = 60
# What bob's job leaves behind on each node unless Slurm tracks it whole: a daemon (setsid, its parent gone), a
# nohup'd child of a shell that exits, and a process moved into a cgroup of its own below the step (Slurm gives
# the user the step's cgroup directory; only with "hide"). $1 tells one job's sleeps from another's: sleep $1<1..4>.
HIDERS = r"""#!/bin/bash
setsid sleep ${1}1 < /dev/null > /dev/null 2>&1 &
sh -c "nohup sleep ${1}2 > /dev/null 2>&1 &"
step=$(awk -F: '$2 == "freezer" {print $3}' /proc/self/cgroup)
[ "${2:-}" = hide ] && mkdir "/sys/fs/cgroup/freezer$step/hidden" &&
    sh -c "echo \$\$ > /sys/fs/cgroup/freezer$step/hidden/cgroup.procs && exec sleep ${1}3" &
sleep ${1}4
"""


def user_processes(user: str) -> dict[str, list[str]]:
    """The user's processes on each node of the box, as "pid command"."""
    uid, found = pwd.getpwnam(user).pw_uid, {}
    for node in NODES:
        pids = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True).stdout.split()
        found[node] = []
        for pid in pids:
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    found[node].append(f"{pid} {command[:100]}")
            except OSError:
                pass  # gone meanwhile
    return found


def job_cgroups(job_id: str) -> list[Path]:
    return [path for node in NODES for path in Path("/sys/fs/cgroup/freezer").glob(f"slurm_{node}/uid_*/job_{job_id}")]


def nothing_left_of(user: str, job_id: str) -> bool:
    """The job has left the queue (its epilog ran on every node), and neither a process of the user nor a cgroup
    of the job is on any node."""
    return not [j for j in jobs_of(user) if j.startswith(f"{job_id} ")] and not any(user_processes(user).values()) \
        and not job_cgroups(job_id)


@pytest.mark.parametrize("when", ["as it starts", "while both nodes train"])
def test_a_cancelled_two_node_training_leaves_no_process_on_any_node(cluster, hub, demo_data, no_jobs_left, when):
    assert not any(user_processes("alice").values()), user_processes("alice")
    client = portal_client(hub, "alice")
    submitted = client.post(f"{client.base}jobs", json={**TINY, "nodes": 2, "gpus_per_node": 1, "epochs": 50},
                            timeout=60)
    assert submitted.status_code == 201, submitted.text
    job = jobs.get(submitted.json()["id"], user="alice")
    if when == "as it starts":
        wait_for(lambda: job.state == "RUNNING", 60, interval=0.2, what="the job to start")
    else:
        wait_for(lambda: all(any("chexnet.train" in p for p in found) for found in user_processes("alice").values())
                 and job_cgroups(job.id), JOB_TIMEOUT_S, interval=1, what="a worker on each node")
    assert client.delete(f"{client.base}jobs/{job.id}", timeout=60).status_code == 204
    wait_for(lambda: nothing_left_of("alice", job.id), KILL_WAIT_S, what="every process of the job to end")
    assert job.state == "CANCELLED"


def test_what_a_job_hides_from_slurm_ends_with_it_at_cancel_and_at_its_time_limit(cluster, no_jobs_left):
    """Both nodes, from a terminal: one job is cancelled once it has hidden its processes (in a cgroup too), the
    other runs into its time limit (1 minute)."""
    script = Path("/tmp/dsportal-test-hiders.sh")
    script.write_text(HIDERS)
    script.chmod(0o755)

    def sleeps(prefix: str) -> list[str]:
        return [p for found in user_processes("bob").values() for p in found if f" sleep {prefix}" in p]

    cancelled, timed_out = (
        as_user(cluster, "bob", "sbatch", "--parsable", "--no-requeue", "-N", "2", *limit, "-o", "/dev/null",
                f"--wrap=srun -N 2 {script} {args}", check=True).stdout.strip()
        for args, limit in (("91 hide", []), ("92", ["--time=1"])))
    wait_for(lambda: len(sleeps("91")) == 8 and len(sleeps("92")) == 6, 60, what="both jobs to start their sleeps")
    as_user(cluster, "bob", "scancel", cancelled, check=True)
    wait_for(lambda: len(sleeps("91")) <= 2, KILL_WAIT_S, what="what Slurm tracks of the cancelled job to end")
    assert len(sleeps("92")) == 6, sleeps("92")  # the other job's, untouched
    wait_for(lambda: not sleeps("91") and not job_cgroups(cancelled), STEP_IO_WAIT_S + KILL_WAIT_S,
             what="the processes it hid in cgroups to end")
    wait_for(lambda: nothing_left_of("bob", timed_out), job_wait_s("00:01:00"),
             what="the job out of time to end whole")
    states = {job: slurm("sacct", "-n", "-X", "-P", "-j", job, "-o", "State").strip() for job in (cancelled, timed_out)}
    assert states[cancelled].startswith("CANCELLED") and states[timed_out] == "TIMEOUT", states


# --- a node dies in the middle of a 2-node training ------------------------------------------------------------


def tensorboard_steps(logdir: Path) -> dict[str, list[int]]:
    """Every step written per tag, repeats included, over all of the run's event files (read as alice, with
    TensorBoard's own reader)."""
    script = ("import json, pathlib, sys\n"
              "from tensorboard.backend.event_processing.event_file_loader import EventFileLoader\n"
              "steps = {}\n"
              "for path in sorted(pathlib.Path(sys.argv[1]).glob('*tfevents*')):\n"
              "    for event in EventFileLoader(str(path)).Load():\n"
              "        for value in event.summary.value:\n"
              "            steps.setdefault(value.tag, []).append(event.step)\n"
              "print(json.dumps({tag: sorted(found) for tag, found in steps.items()}))\n")
    out = subprocess.run([RUNUSER, "-u", "alice", "--", "/opt/dsportal/venv/bin/python", "-c", script, str(logdir)],
                         capture_output=True, text=True, check=True, cwd="/tmp").stdout
    return json.loads(out)


def test_a_node_failure_requeues_the_job_and_it_resumes_with_every_epoch_once(cluster, hub, demo_data,
                                                                              no_jobs_left):
    client = portal_client(hub, "alice")
    submitted = client.post(f"{client.base}jobs", json={**TINY, "nodes": 2, "gpus_per_node": 1, "epochs": 4},
                            timeout=60)
    assert submitted.status_code == 201, submitted.text
    job = jobs.get(submitted.json()["id"], user="alice")
    checkpoints = Path(job.job_dir) / "checkpoints"
    wait_for(lambda: list(checkpoints.glob("ckpt-2.index")), JOB_TIMEOUT_S, interval=1,
             what="the job's second checkpoint")
    # node2 loses its power in epoch 3: link down, every process on it killed, no goodbye to its peers.
    assert box("crash", NODES[1]).returncode == 0
    wait_for(lambda: job.state == "PENDING", 120, interval=2, what="Slurm to requeue the job")
    # The run's half on node1 (mpirun, its worker) ended with it: no process of alice's is left on either node.
    wait_for(lambda: not any(user_processes("alice").values()), KILL_WAIT_S, what="the first run's processes to end")
    page = wait_for(lambda: (j := client.get(f"{client.base}jobs/{job.id}", timeout=60).json())["history"] and j,
                    60, interval=3, what="the dashboard to tell the job's history")
    assert page["history"][0].startswith(f"requeued after {NODES[1]} failed (Not responding) at "), page

    assert box("start", NODES[1]).returncode == 0
    # Slurm holds a requeued job for 120 s before it may start again; the admin who brought the node back lets it
    # go sooner, though not at once: a requeued job started within a second of its node's return can find that node
    # still finishing the killed run (its first step is refused), which is what Slurm's hold avoids.
    time.sleep(5)
    slurm("scontrol", "update", f"jobid={job.id}", "starttime=now")
    assert job.wait(timeout=JOB_TIMEOUT_S, poll=3) == "COMPLETED", job.logs(tail=60)

    log = job.logs()
    assert "restarted (restart 1) after it was requeued" in log
    assert "2 epochs done, continuing with epoch 3 of 4" in log
    steps = tensorboard_steps(Path(job.job_dir) / "tensorboard")
    for tag in ("loss/train", "loss/val", "lr", "auroc/mean"):
        assert steps[tag] == [1, 2, 3, 4], (tag, steps[tag])
    throughput = steps["throughput/images_per_sec"]
    assert throughput and len(throughput) == len(set(throughput)), throughput
    history = client.get(f"{client.base}jobs/{job.id}", timeout=60).json()["history"]
    assert len(history) == 1 and history[0].endswith("; resumed at epoch 3"), history
    assert job.metrics().epochs_done == 4
