"""The scheduler contract (portal.scheduler.protocol.Scheduler) for a job's life, one suite over every scheduler:
submit, list, load, state and cancel, the owner checks, and a cluster that does not answer. Each test runs on each
driver of contract_helpers (as batchspawner's `run_spawner_script` runs each scheduler through the same steps): the
local runner and the toy scheduler on this machine, Slurm over the recorded answers of each release the portal reads
(22.05, 24.11, 26.05), Kubernetes over an API server of recorded objects behind the real client. What differs
between schedulers is in the drivers; the tests say what every scheduler owes its callers (the dashboard, the
notebooks' portal.jobs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portal import errors
from portal.errors import JobNotFound
from portal.mlflow_accounts import Account
from portal.records.account import JobUser
from portal.records.readahead import reading_ahead
from portal.records.spec import JobSpecError
from portal.records.sweep import FIELD as SWEEP_FIELD
from portal.records.sweep import parse_sweep
from portal.scheduler.registry import scheduler_of_job
from tests.unit.helpers import parse_spec
from tests.unit.portal.scheduler.contract_helpers import DRIVERS, Driver, driver_for

SPEC = parse_spec(nodes=1, gpus_per_node=0, epochs=1)
SERVED = [kind for kind in DRIVERS if kind not in ("local", "toy")]  # the local runner asks no service: this machine


@pytest.fixture(params=DRIVERS)
def driver(request, tmp_path, monkeypatch):
    """Each scheduler (Slurm once per release) with its cluster's answers recorded; what it started is ended."""
    made = driver_for(request.param, tmp_path, monkeypatch)
    yield made
    made.close()


@pytest.fixture(params=SERVED)
def served(request, tmp_path, monkeypatch):
    """Each scheduler that asks a service (Slurm's controller, the API server), which can stop answering."""
    return driver_for(request.param, tmp_path, monkeypatch)


def submitted(driver: Driver, name: str = "alice"):
    record, _ = driver.scheduler.submit(SPEC, driver.person(name))
    return record


def test_a_submitted_job_has_its_schedulers_id_and_is_listed_for_its_owner_alone(driver):
    """Each submit starts its own job on the cluster (Slurm: held, then released once its directory is made); the
    dashboard's job list and `jobs.jobs()` show each user their own jobs, never another's."""
    alice, bob = driver.person("alice"), driver.person("bob")
    hers, his = submitted(driver, "alice"), submitted(driver, "bob")
    assert driver.scheduler.job_ids.match(hers.id) and scheduler_of_job(hers.id) == driver.name, hers.id
    assert (hers.user, hers.spec, his.user) == ("alice", SPEC, "bob")
    assert sorted(driver.started()) == sorted([hers.id, his.id])
    assert [job.id for job in driver.listed(alice)] == [hers.id]
    assert [job.id for job in driver.listed(bob)] == [his.id]


def test_a_job_loads_as_it_was_submitted_for_its_owner_and_is_not_found_for_anyone_else(driver):
    """`jobs.get` and the job page: the same id, user, spec and submit time; another user's job, an id the
    scheduler never gave and a malformed one are all "not found" (404), so no one learns what others run."""
    alice, bob = driver.person("alice"), driver.person("bob")
    job = submitted(driver)
    loaded = driver.load(alice, job.id)
    assert (loaded.id, loaded.user, loaded.spec, loaded.submitted_at) == (job.id, "alice", SPEC, job.submitted_at)
    never_given = job.id[:-1] + ("1" if job.id[-1] == "0" else "0")
    for who, job_id in ((bob, job.id), (alice, never_given), (alice, "../bob"), (alice, f"{job.id}/../7"),
                        (alice, "")):
        with pytest.raises(JobNotFound) as refused:
            driver.load(who, job_id)
        assert errors.answer(refused.value)[0] == 404, (who.name, job_id)
    with pytest.raises(JobNotFound):  # nor does the scheduler tell bob the state of her job
        driver.scheduler.state(job, bob)


@pytest.mark.parametrize("state", ["RUNNING", "COMPLETED"])
def test_a_jobs_state_is_what_its_cluster_answers(driver, state):
    alice = driver.person("alice")
    job = submitted(driver)
    driver.answer(job, state)
    assert driver.scheduler.state(job, alice) == state


@pytest.mark.parametrize("state", ["RUNNING", "COMPLETED", "CANCELLED"])
def test_a_state_asked_with_its_files_read_ahead_is_the_same_and_reads_no_file_alone(driver, state, monkeypatch):
    """A list asks its jobs' states with each scheduler's `state_files` read together (portal.records.readahead):
    each state is the one `state` gives alone, and every file `state` reads was among those read ahead."""
    alice = driver.person("alice")
    jobs = [submitted(driver), submitted(driver)]
    for job in jobs:
        driver.answer(job, "RUNNING")
    if state != "RUNNING":
        driver.answer(jobs[0], state) if state == "COMPLETED" else driver.scheduler.cancel(jobs[0], alice)
    if not driver.scheduler.state_files:
        assert not driver.scheduler.records_in_home  # Kubernetes: the state is its objects'
        return
    ahead = reading_ahead(alice, ((job.job_dir / name, limit) for job in jobs
                                  for name, limit in driver.scheduler.state_files))
    alone: list[Path] = []
    reads = JobUser.read_text_why
    monkeypatch.setattr(JobUser, "read_text_why", lambda self, path, limit=64: alone.append(path) or reads(
        self, path, limit))
    read_ahead = [driver.scheduler.state(job, ahead) for job in jobs]
    assert not [path for path in alone if any(job.job_dir in path.parents for job in jobs)], alone
    assert read_ahead == [driver.scheduler.state(job, alice) for job in jobs] == [state, "RUNNING"]


def test_cancel_asks_the_cluster_to_cancel_that_job_and_no_other(driver):
    alice = driver.person("alice")
    first, second = submitted(driver), submitted(driver)
    for job in (first, second):
        driver.answer(job, "RUNNING")
    driver.scheduler.cancel(first, alice)
    assert driver.cancelled() == [first.id]
    assert driver.scheduler.state(first, alice) == "CANCELLED"
    assert driver.scheduler.state(second, alice) == "RUNNING"


def test_cancel_refuses_another_users_job_as_not_found_and_cancels_nothing(driver):
    alice, bob = driver.person("alice"), driver.person("bob")
    job = submitted(driver)
    driver.answer(job, "RUNNING")
    with pytest.raises(JobNotFound) as refused:
        driver.scheduler.cancel(job, bob)
    status, said, _ = errors.answer(refused.value)
    assert status == 404 and "bob" in said and "alice" not in said, said
    assert driver.cancelled() == []
    assert driver.scheduler.state(job, alice) == "RUNNING"


def test_a_sweep_is_listed_with_its_plan_where_the_scheduler_runs_sweeps_and_refused_by_name_elsewhere(driver):
    alice = driver.person("alice")
    plan = parse_sweep({"trials": 3, "pruner": "none"}, SPEC.epochs, None, SPEC.gpus)
    if not driver.scheduler.sweeps:
        with pytest.raises(JobSpecError) as refused:
            driver.scheduler.submit(SPEC, alice, "", plan)
        assert refused.value.field == SWEEP_FIELD and errors.answer(refused.value)[0] == 400
        assert "no sweeps" in str(refused.value) and driver.listed(alice) == []
        return
    job, _ = driver.scheduler.submit(SPEC, alice, "", plan)
    assert job.sweep == plan and driver.load(alice, job.id).sweep == plan


@pytest.mark.parametrize("step", ["submit", "list", "state", "cancel"])
def test_a_cluster_that_does_not_answer_is_that_schedulers_unavailable_and_nothing_is_half_made(served, step):
    """503 in the scheduler's own name (the page says which service is down), never a job state or "not found";
    a submit that failed leaves no job behind once the cluster answers again."""
    alice = served.person("alice")
    job = submitted(served)
    steps = {"submit": lambda: served.scheduler.submit(SPEC, alice), "list": lambda: served.listed(alice),
             "state": lambda: served.scheduler.state(job, alice), "cancel": lambda: served.scheduler.cancel(job, alice)}
    served.down()
    with pytest.raises(errors.SchedulerUnavailable) as raised:
        steps[step]()
    status, said, _ = errors.answer(raised.value)
    assert status == 503 and raised.value.scheduler.lower() == served.name, (status, said)
    assert said.lower().startswith(served.name) or f"the {served.name} api" in said.lower(), said
    served.up()
    assert [listed.id for listed in served.listed(alice)] == [job.id] and served.cancelled() == []


def test_a_job_given_an_mlflow_account_carries_it_for_its_rank_0_readable_by_its_user_alone(driver):
    """portal.jobs.submit hands the scheduler the user's MLflow account (portal.mlflow_accounts): the scheduler puts
    the job file where the job reads it (the job directory, mode 0600; on Kubernetes the job's own Secret, mounted
    in every pod), with the run's tags, and its scripts name it in DSPORTAL_MLFLOW_FILE. Without one, nothing."""
    account = Account("http://198.18.0.1:8095/services/portal/mlflow", "alice", "alices-password", "7")
    record, _ = driver.scheduler.submit(SPEC, driver.person("alice"), tracking=account)
    text, mode, scripts = driver.tracking_file(record)
    found = json.loads(text)
    assert (found["username"], found["password"], found["experiment_id"]) == ("alice", "alices-password", "7")
    assert found["tags"] == {"dsportal.user": "alice", "dsportal.job": record.id,
                             "dsportal.scheduler": driver.scheduler.name, "dsportal.program": SPEC.template,
                             "dsportal.cluster": driver.cfg.cluster_name}
    assert mode & 0o077 in (0, 0o040), oct(mode)  # the user's alone (a pod's group is the user's own fsGroup)
    assert any("DSPORTAL_MLFLOW_FILE=" in script for script in scripts), scripts  # the launcher's
    plain = submitted(driver, "bob")
    with pytest.raises((FileNotFoundError, KeyError)):
        driver.tracking_file(plain)
    # Both started (and the local runner's scripts have written their PIDs, which the driver's close ends by).
    assert sorted(driver.started()) == sorted([record.id, plain.id])
