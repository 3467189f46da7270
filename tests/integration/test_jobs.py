"""Training jobs for real: alice's 2-worker Horovod job through Slurm (fake GPUs, real mpirun and TensorFlow),
bob kept out of it, quotas (the local scheduler's jobs: test_local_jobs.py, with no box). The API is called by root
acting for the user, as the dashboard will.

Sized for 2 CPU cores: the demo set (240 synthetic 64x64 images), 1 epoch, batch 8 per worker.
"""

from __future__ import annotations

import pwd
import subprocess
from pathlib import Path

import pytest

from portal import jobs
from portal.config import load
from portal.jobs.demo_data import ensure_demo_data
from portal.records.account import job_user
from portal.records.spec import format_minutes
from portal.runas import RUNUSER
from portal.scheduler.slurm.scheduler import SlurmScheduler
from tests.conftest import TINY_MODEL, job_dir_of, jobs_of, slurm, wait_for

pytestmark = pytest.mark.integration
TINY = {"template": "chexnet", "epochs": 1, "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 4,
        "time_limit": "00:15:00", "model": TINY_MODEL}


@pytest.fixture(scope="module")
def demo_data(cluster) -> Path:
    return ensure_demo_data(cluster)


@pytest.fixture(scope="module")
def alice_job(cluster, demo_data):
    """alice's 2-worker job (both on one node), submitted once for the tests that watch it run; cancelled after
    them. (Its run to COMPLETED, 25 s, was cut on 2026-12-02: the dashboard journey's 2-node job runs to COMPLETED
    with its figures, its log and its files' owner, test_dashboard_journeys.py.)"""
    job = jobs.submit({**TINY, "nodes": 1, "gpus_per_node": 2}, scheduler="slurm", user="alice")
    yield job
    if not job.done:
        job.cancel()


def as_user(user: str, *argv: str) -> subprocess.CompletedProcess:
    env = f"SLURM_CONF={load().slurm_conf_path}"
    return subprocess.run([RUNUSER, "-u", user, "--", "env", env, *argv], capture_output=True, text=True, timeout=30)


def test_a_script_with_every_field_at_its_limits_passes_sbatch_test_only(cluster, demo_data):
    limits = jobs.limits("slurm", user="alice")
    assert (limits.partition, limits.nodes, limits.gpus_per_node, limits.quota.limit) == ("gpu", 2, 4, 4)
    spec = jobs.validate({
        "template": "chexnet", "nodes": limits.nodes, "gpus_per_node": limits.quota.limit // limits.nodes,
        "cpus_per_task": limits.cpus_per_node // (limits.quota.limit // limits.nodes),
        "memory_gb": limits.memory_gb_per_node,
        "time_limit": format_minutes(limits.max_minutes), "epochs": 1000, "batch_size": 1024, "image_size": 1024,
        "model": "resnet50", "fp16": True, "xla": True, "data_dir": str(demo_data)}, "slurm", user="alice")
    slurm, alice = SlurmScheduler(cluster), job_user("alice")
    # sbatch --test-only: Slurm's own check that the script's request can ever run (nothing is queued).
    tested = slurm.commands.complete("sbatch", "--test-only", user=alice,
                                     input=slurm.render(spec, alice, limits.partition))
    answer = tested.stderr.strip()  # "sbatch: Job 7 to start at ... using 8 processors on nodes localhost ..."
    assert tested.returncode == 0 and "to start at" in answer, answer
    assert jobs_of("alice") == []  # --test-only queues nothing


def test_alice_sees_her_job_pending_or_running(alice_job):
    assert alice_job.id.isdigit()
    state = wait_for(lambda: alice_job.state == "RUNNING" and "RUNNING", 60, what="alice's job to run")
    assert state == "RUNNING"
    assert f"{alice_job.id} RUNNING" in jobs_of("alice")
    details = slurm("scontrol", "show", "job", "-o", alice_job.id)
    assert "UserId=alice(" in details and "NumTasks=2" in details and "gres:gpu:2" in details, details
    assert alice_job.job_dir == str(job_dir_of("alice", alice_job.id))  # the test box's own directory
    assert [j.id for j in jobs.jobs(user="alice")][0] == alice_job.id
    assert jobs.get(alice_job.id, user="alice").spec.gpus_per_node == 2


def test_bob_can_neither_see_nor_cancel_alices_job(alice_job):
    with pytest.raises(jobs.JobNotFound):
        jobs.get(alice_job.id, user="bob")
    with pytest.raises(jobs.JobNotFound):
        jobs.cancel(alice_job.id, user="bob")
    assert alice_job.id not in [j.id for j in jobs.jobs(user="bob")]
    # A job.json forged in bob's own ~/jobs that claims alice's job: Slurm says whose it is.
    forged_dir = job_dir_of("bob", alice_job.id)
    forged = alice_job.record.to_json().replace('"user": "alice"', '"user": "bob"').replace(
        str(alice_job.record.job_dir), str(forged_dir))
    bob = job_user("bob")
    bob.make_dir(forged_dir)
    bob.write_text(forged_dir / "job.json", forged)
    try:
        with pytest.raises(jobs.JobNotFound):
            jobs.cancel(alice_job.id, user="bob")
    finally:
        as_user("bob", "rm", "-rf", "--", str(forged_dir))
    # Slurm itself refuses bob's scancel of her job...
    refused = as_user("bob", "scancel", alice_job.id)
    assert refused.returncode != 0 and "denied" in refused.stderr.lower(), refused
    # ...and her job runs on (or has already ended as it would have: not cancelled).
    assert alice_job.state in ("RUNNING", "COMPLETING", "COMPLETED"), alice_job.state


def test_data_dir_must_be_readable_by_the_user_herself(cluster, demo_data):
    alice_home = pwd.getpwnam("alice").pw_dir
    with pytest.raises(jobs.JobSpecError) as err:
        jobs.validate({"data_dir": alice_home}, "slurm", user="bob")  # root could read it; bob cannot
    assert err.value.field == "data_dir" and "cannot read it" in str(err.value)
    assert jobs.validate({"data_dir": alice_home}, "slurm", user="alice").data_dir == alice_home
