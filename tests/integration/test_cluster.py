"""The cluster past one host: Slurm accounting that holds every GPU quota, the directory synced into it, and faults
of the cluster itself survived with nothing lost (a drained node, slurmctld restarting, accounting down). A job's
end on every node, and a node lost mid-training: test_job_endings.py.

Sized for 2 CPU cores: the trainings are the demo set's 64x64 images, batch 8, one worker on each node.
"""

from __future__ import annotations

import html
import json
import re
import threading
import time
from pathlib import Path

import pytest

from portal import jobs
from portal.config import load
from portal.scheduler.slurm.scheduler import SlurmScheduler
from portal.service.board import USAGE_REFRESH_S
from tests.conftest import BUDGET_GROUP, BUDGET_HOURS, NODES, box, end_job, jobs_of, page_error, slurm, wait_for
from tests.integration.helpers import PORTAL, TINY, accounts, in_group, ldap_modify, portal_client
from tests.integration.helpers import as_user_in_terminal as as_user

pytestmark = pytest.mark.integration


# --- the GPU quota, held by Slurm for everything a user runs together ----------------------------------------


def test_the_quota_counts_servers_jobs_and_sbatch_from_a_terminal(cluster, hub, admin, alice, demo_data,
                                                                  no_jobs_left):
    assert hub.spawn_form(alice, gpus=2).status_code == 302
    hub.wait_ready(admin, "alice")
    # The portal refuses at submit, with the arithmetic.
    with pytest.raises(jobs.JobSpecError) as err:
        jobs.submit({**TINY, "gpus_per_node": 4}, scheduler="slurm", user="alice")
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


def test_a_job_that_could_cost_more_than_the_weekly_budget_is_refused_with_the_arithmetic(cluster, hub, demo_data,
                                                                                           no_jobs_left):
    """bob, given a GPU quota (gpu-users) and the test box's budget group for this test alone, so that what other
    tests left holding GPUs never decides it: this week's use is read from Slurm's accounting as him, and a job that
    could cost more than is left is refused naming time_limit, with the arithmetic, by `jobs.submit` (what his
    notebook calls, here with his groups given as the dashboard gives them: the box made its Unix groups at `up`)
    and through the dashboard's API, whose submit reads his groups from the hub as they are now, and a server whose
    GPUs could cost more is refused by the spawn form, naming its wall time; Slurm refuses it too, typed in his
    terminal, once `portal.accounts sync` gave his association the budget (GrpTRESMins). Nothing is submitted."""
    spec = {**TINY, "gpus_per_node": 1, "time_limit": "168:00:00"}  # 1 node x 1 GPU x 168 h > BUDGET_HOURS
    refusal = (r"this job can cost up to 168 GPU-hours \(1 node x 1 GPU x 168 h\), more than [\d.]+ of your weekly "
               rf"{BUDGET_HOURS} GPU-hours left \([\d.]+ used since Sunday \d+ \w+ 00:00"
               r"(, [\d.]+ held for your queued and running jobs and servers)?\); ")
    before = jobs_of("bob")
    with pytest.raises(jobs.JobSpecError) as err:
        jobs.submit(spec, scheduler="slurm", user="bob", groups=("datascientists", "gpu-users", BUDGET_GROUP))
    assert err.value.field == "time_limit" and re.match(refusal, err.value.message), str(err.value)
    try:
        with in_group(cluster, "gpu-users", ("bob",)), in_group(cluster, BUDGET_GROUP, ("bob",), gid=10198):
            client = portal_client(hub, "bob")  # a login gives the hub his groups as they are now
            refused = client.post(f"{client.base}jobs", json=spec, timeout=60)
            assert refused.status_code == 400 and refused.json()["field"] == "time_limit", refused.text
            assert re.match(f"time_limit: {refusal}", refused.json()["error"]), refused.text
            # A server's GPUs count for its whole wall time: the spawn form refuses one that could cost more.
            form = hub.spawn_form(hub.login("bob"), partition="gpu", gpus=1, cpus=1, memory_gb=2,
                                  runtime="168:00:00")
            page = html.unescape(form.content.decode("utf-8"))
            assert form.status_code == 400 and re.search(refusal.replace("this job", "this server"), page), \
                page_error(form)
            assert 'aria-describedby="ds-budget"' in page  # the form says what is left of the week
            # Slurm holds him to it itself (GrpTRESMins, `portal.accounts sync`): from his terminal too.
            synced = accounts(cluster, "sync")
            assert synced.returncode == 0, synced.stderr
            typed = as_user(cluster, "bob", "sbatch", "-p", "gpu", "--gres=gpu:1", "-t", "168:00:00", "-o",
                            "/dev/null", "--wrap=true")
            assert typed.returncode != 0 and "AssocGrpGRESMinutes" in typed.stderr, (typed.stdout, typed.stderr)
    finally:
        hub.login("bob")  # his groups as they were, for the hub too
        assert accounts(cluster, "sync").returncode == 0  # and for Slurm: no budget, no GPU quota
    assert jobs_of("bob") == before


def test_the_default_server_and_a_default_2_node_job_run_side_by_side(cluster, hub, admin, alice, demo_data,
                                                                       no_jobs_left):
    """The demo's defaults fit the box: the spawn form's default server, and beside it a 2-node job with every
    other field left to its default, run at once."""
    assert hub.spawn_form(alice, gpus=1).status_code == 302  # what the form shows first: one GPU, 2 CPUs, 4 GB
    hub.wait_ready(admin, "alice")
    client = portal_client(hub, "alice")
    submitted = client.post(f"{client.base}jobs", json={"nodes": 2}, timeout=60)
    assert submitted.status_code == 201, submitted.text
    job = submitted.json()
    assert (job["spec"]["memory_gb"], job["spec"]["gpus_per_node"]) == (16, 1), job["spec"]  # the defaults
    wait_for(lambda: client.get(f"{client.base}jobs/{job['id']}", timeout=60).json()["state"] == "RUNNING", 90,
             what="the default job to start beside her default server")


def test_a_job_behind_her_own_server_says_it_waits_for_it(cluster, hub, admin, alice, demo_data, no_jobs_left):
    """Her server holds 4 GB on one node; a 2-node job asking for more than the rest of that node is accepted
    with a warning naming her server, waits (Resources), and its page says why in words once and names her
    server as what holds it."""
    assert hub.spawn_form(alice, gpus=1, memory_gb=4).status_code == 302
    hub.wait_ready(admin, "alice")
    (server,) = [line.split()[0] for line in jobs_of("alice")]
    per_node = jobs.limits(scheduler="slurm", user="alice").memory_gb_per_node
    client = portal_client(hub, "alice")
    wait_for(lambda: client.get(f"{client.base}usage", timeout=60).json()["quotas"][0]["gpus_in_use"] == 1, 60,
             what="the dashboard's view of the cluster to hold her server")
    submitted = client.post(f"{client.base}jobs", json={**TINY, "nodes": 2, "gpus_per_node": 1, "epochs": 1,
                                                        "memory_gb": per_node - 4 + 1, "time_limit": "00:10:00"},
                            timeout=60)
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    # Accepted, saying before it waits what it will wait for.
    assert submitted.json()["warning"].startswith(f"will wait for your server (job {server}) to end: "), \
        submitted.json()
    assert f"has {per_node - 4} of {per_node} GB free" in submitted.json()["warning"], submitted.json()

    def waits() -> dict | None:  # once Slurm's scheduler has looked at it (before: reason None, "not looked at yet")
        job = client.get(f"{client.base}jobs/{job_id}", timeout=60).json()
        return job if job["state"] == "PENDING" and job["reason"] and "(Slurm: None)" not in job["reason"] else None
    job = wait_for(waits, 60, what="the dashboard to say why the job waits")
    assert job["reason"] == "waiting for GPUs, CPUs or memory to free up (Slurm: Resources)", job
    assert job["held_by"] == f"your server (job {server})", job


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

        scheduler = SlurmScheduler(load())
        form = scheduler.limits(scheduler.person("alice", ("datascientists", "gpu-users")), scheduler.snapshot())
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
        # Slurm's own state words; +planned when its backfill has planned a pending job there (as it may, in the
        # newcomer's order, beside the user's box).
        shown = rf"{node2_drained} \(idle\+drain(\+planned)?\)"
        limits = jobs.limits("slurm", user="alice")
        assert limits.nodes == 1 and re.search(shown, limits.unusable_note), limits.unusable_note
        with pytest.raises(jobs.JobSpecError) as err:
            jobs.validate({**TINY, "nodes": 2, "gpus_per_node": 1}, "slurm", user="alice")
        assert re.fullmatch(r"nodes: 2 is out of range; allowed: 1 \(usable nodes in partition gpu; not usable now: "
                            rf"{shown}\)", str(err.value)), str(err.value)
        form = hub.login("alice").get(f"{hub.url}/hub/spawn", timeout=30).text
        assert "1 free on a node now" in form and 'max="1"' in form
    finally:
        end_job(holder)


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


def test_gpu_hours_this_week_come_from_slurm_accounting(cluster, hub):
    """Last of the module: the quota test's server of alice's held 2 GPUs for a while; admins see every user (of
    the hub). Each view's report is kept USAGE_REFRESH_S (30 s): right after the quota test, which read alice's
    while her server ran, this test waited that out (29 s of 9962798's run); here the tests since have outlasted
    every report they read, and accounting has answered again after the outages just before."""
    hub.login("bob")
    users, admins = portal_client(hub, "alice"), portal_client(hub, "admin")

    def both_views() -> tuple[dict, dict] | None:
        """alice's view and the admin's, once both have her server and tell the same hours: each is cached for up
        to USAGE_REFRESH_S, and one may still be a report read before slurmdbd had a record the other has."""
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
