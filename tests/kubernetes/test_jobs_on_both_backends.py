"""The notebook API (`portal.jobs`: submit, state, jobs, get, cancel) behaves the same on Slurm and on Kubernetes.

Slurm: the test box's real slurmctld/slurmd run the job. Kubernetes: the test session's Kubernetes box runs it as
plain Jobs (k8s_jobs: plain) on its nodes, and RBAC keeps users apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from portal import jobs
from portal.config import PortalConfig, load
from portal.jobs import JobNotFound, JobSpecError
from portal.jobs.demo_data import ensure_demo_data
from tests.conftest import wait_for
from tests.kubernetes.conftest import ALICE, BOB, TINY

pytestmark = pytest.mark.integration


@dataclass
class Backend:
    name: str
    cfg: PortalConfig
    start: Callable[[jobs.Job], None]  # until the scheduler runs it


@pytest.fixture(params=["slurm", "kubernetes"])  # each on its box's side of `make test` (conftest.side_of)
def backend(request) -> Backend:
    if request.param == "slurm":
        cluster = request.getfixturevalue("cluster")
        ensure_demo_data(cluster)
        return Backend("slurm", cluster, lambda job: wait_for(lambda: job.state == "RUNNING", 120, interval=1,
                                                                what=f"Slurm job {job.id} to run"))
    kube = request.getfixturevalue("kube")
    cfg = dataclasses.replace(load(), scheduler="kubernetes", k8s_kubeconfig=str(kube.kubeconfigs["hub"]),
                              k8s_jobs="plain")
    return Backend("kubernetes", cfg, lambda job: wait_for(lambda: job.state == "RUNNING", 180, interval=1,
                                                           what=f"Kubernetes job {job.id} to run"))


@pytest.fixture
def submitted(backend):
    """Jobs a test submits as alice; whatever is still queued or running is cancelled afterwards."""
    made: list[jobs.Job] = []

    def submit(**spec) -> jobs.Job:
        job = jobs.submit({**TINY, **spec}, user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)
        made.append(job)
        return job
    yield submit
    for job in made:
        if job.state in ("PENDING", "RUNNING"):
            job.cancel()
    if backend.name == "kubernetes":  # a cancelled job's pods hold their GPUs until they are gone
        wait_for(lambda: jobs.limits(user=ALICE[0], groups=ALICE[1], cfg=backend.cfg).quota.in_use == 0, 90,
                 what="alice's cancelled jobs' pods to be gone")


def test_submit_lists_runs_and_cancels(backend, submitted):
    job = submitted()
    assert job.backend == backend.name and job.state in ("PENDING", "RUNNING")
    assert job.id in [j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)]
    assert jobs.get(job.id, user=ALICE[0], groups=ALICE[1], cfg=backend.cfg).spec == job.spec
    backend.start(job)
    assert job.state == "RUNNING"
    job.cancel()
    assert wait_for(lambda: job.state == "CANCELLED", 60, interval=1, what=f"job {job.id} to be cancelled")
    assert job.done


def test_another_user_can_neither_see_nor_cancel_it(backend, submitted):
    job = submitted()
    with pytest.raises(JobNotFound):
        jobs.get(job.id, user=BOB[0], groups=BOB[1], cfg=backend.cfg)
    with pytest.raises(JobNotFound):
        jobs.cancel(job.id, user=BOB[0], groups=BOB[1], cfg=backend.cfg)
    assert job.id not in [j.id for j in jobs.jobs(user=BOB[0], groups=BOB[1], cfg=backend.cfg)]
    assert job.state in ("PENDING", "RUNNING")  # untouched


def test_a_bad_spec_names_the_field_and_submits_nothing(backend):
    before = {j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)}
    for spec, field in (({"gpus_per_node": 99}, "gpus_per_node"), ({"epochs": "two"}, "epochs"),
                        ({"data_dir": "/nonexistent/set"}, "data_dir"), ({"gpu": 1}, "gpu")):
        with pytest.raises(JobSpecError) as err:
            jobs.submit({**TINY, **spec}, user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)
        assert err.value.field == field
    with pytest.raises(JobSpecError) as err:  # bob's groups carry no GPU quota
        jobs.submit({**TINY, "gpus_per_node": 1}, user=BOB[0], groups=BOB[1], cfg=backend.cfg)
    assert err.value.field == "gpus_per_node" and "quota" in str(err.value)
    # Nothing new (a job an earlier test cancelled may meanwhile have gone: Kubernetes deletes it a moment later).
    assert {j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)} - before == set()
