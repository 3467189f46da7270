"""The notebook API (`portal.jobs`) on Slurm and on Kubernetes, down to the limits each box's nodes set: the form's
default job of each program runs to COMPLETED on each box (each launcher's smoke: mpirun or torchrun, Slurm's job
script or Kubernetes' pods), a site's own program and launcher, registered by the settings alone, run a 2-node job and
a sweep to COMPLETED on each, and a job or a sweep that can never fit is refused with the numbers. Submit, list,
state and cancel are the scheduler contract's (tests/unit/portal/scheduler/test_contract_jobs.py); bob kept out of
alice's job is the dashboard journeys' and the contract's.

Slurm: the test box's real slurmctld/slurmd run the job. Kubernetes: the test session's Kubernetes box runs it as
plain Jobs (k8s_jobs: plain) on its nodes, and RBAC keeps users apart.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from portal import jobs
from portal.config import PortalConfig, load
from portal.jobs import JobSpecError
from portal.jobs.demo_data import LAYOUT_NAME, ensure_demo_data
from portal.service.submit_form import form_values
from tests.conftest import PROGRAMS, TOY, wait_for
from tests.kubernetes.conftest import ALICE, TINY

pytestmark = pytest.mark.integration


@dataclass
class Box:
    name: str
    cfg: PortalConfig
    start: Callable[[jobs.Job], None]  # until the scheduler runs it


@pytest.fixture(params=["slurm", "kubernetes"])  # each on its box's side of `make test` (conftest.side_of)
def box(request) -> Box:
    if request.param == "slurm":
        cluster = request.getfixturevalue("cluster")
        ensure_demo_data(cluster)
        return Box("slurm", cluster, lambda job: wait_for(lambda: job.state == "RUNNING", 120, interval=1,
                                                                what=f"Slurm job {job.id} to run"))
    kube = request.getfixturevalue("kube")
    cfg = dataclasses.replace(load(), scheduler="kubernetes", k8s_kubeconfig=str(kube.kubeconfigs["hub"]),
                              k8s_jobs="plain")
    return Box("kubernetes", cfg, lambda job: wait_for(lambda: job.state == "RUNNING", 180, interval=1,
                                                           what=f"Kubernetes job {job.id} to run"))


@pytest.fixture
def submitted(box):
    """Jobs a test submits as alice; whatever is still queued or running is cancelled afterwards."""
    made: list[jobs.Job] = []

    def submit(**spec) -> jobs.Job:
        job = jobs.submit({**TINY, **spec}, user=ALICE[0], groups=ALICE[1], cfg=box.cfg)
        made.append(job)
        return job
    yield submit
    for job in made:
        if job.state in ("PENDING", "RUNNING"):
            job.cancel()
    if box.name == "kubernetes":  # a cancelled job's pods hold their GPUs until they are gone
        wait_for(lambda: jobs.limits(user=ALICE[0], groups=ALICE[1], cfg=box.cfg).quota.in_use == 0, 90,
                 what="alice's cancelled jobs' pods to be gone")


# --- issue 49: the form's default job starts, and a job the nodes could never hold is refused with the numbers. ----
# Slurm: the test box's 2 nodes of 8 CPUs, 24 GB and 4 GPUs; a run's nodes are whole nodes. Kubernetes: the test
# box's 2 nodes report the machine's CPUs (2 here), a run's node pods a node each, and its launcher pod (half a CPU,
# 2 GB) lands on one of them.

PLACED = ("nodes", "gpus_per_node", "cpus_per_task", "memory_gb")
JOB_WAIT_S = 600  # a tiny job of one epoch: under a minute on an idle box


def alice_limits(box) -> jobs.JobLimits:
    limits = jobs.limits(user=ALICE[0], groups=ALICE[1], cfg=box.cfg)
    assert limits.rooms, "the limits must come from the box's nodes, not from settings"
    return limits


@pytest.mark.parametrize("program", PROGRAMS)
def test_the_forms_default_job_runs_to_completed(box, submitted, program):
    """The form's default placement (one node), each program: on Kubernetes a PyTorch job of one node is node 0's
    pod alone (no workers Job, nothing to gather)."""
    limits = alice_limits(box)
    shown = form_values(limits, {})  # what the dashboard's form shows, and a submit leaving the fields out uses
    placed = {name: shown[name] for name in PLACED}
    assert placed["cpus_per_task"] <= limits.cpus_per_node and placed["nodes"] == 1
    job = submitted(template=program, **placed)  # TINY's training fields (a small model, 1 epoch), the form's placement
    assert {name: getattr(job.spec, name) for name in PLACED} == placed
    box.start(job)
    assert job.wait(timeout=JOB_WAIT_S, poll=2) == "COMPLETED", job.logs(tail=40)
    assert job.metrics().epochs_done == 1


def test_a_site_program_and_its_launcher_run_a_job_and_a_sweep_to_completed(box, submitted):
    """The test boxes' settings register the toy program and its launcher from a directory of the site's
    (tests/conftest.py: site_programs, site_launchers, site_python_path; on Kubernetes its pods mount it as the claim
    k8s_site_programs_claim). Its job on 2 nodes: rank 0 trains, one node each (srun's tasks; the record Job's pod
    and the workers Job's); its sweep's trials each a task or a pod. The portal reads its record, card and trials as
    its own programs'."""
    images = (f"{box.cfg.k8s_data_mount}/{LAYOUT_NAME}" if box.name == "kubernetes"
              else str(box.cfg.default_data_path.parent / LAYOUT_NAME))  # the toy reads the demo set's PNGs
    toy = {"template": TOY, "data_dir": images, "epochs": 2, "gpus_per_node": 0, "grid": 3}
    job = submitted(**toy, nodes=2)
    sweep = submitted(**toy, sweep={"trials": 2, "parallel": 2, "pruner": "none"})  # beside it, where room is left
    assert job.wait(timeout=JOB_WAIT_S, poll=2) == "COMPLETED", job.logs(tail=40)
    assert f"{TOY}: " in job.logs() and "by toyrun" in job.logs(), job.logs(tail=40)
    epochs, problem = job.epochs()
    assert sorted(epochs) == [1, 2] and not problem, (epochs, problem)
    card = job.model_card()
    assert card is not None and card["spec"]["grid"] == 3 and card["epochs_done"] == 2, card
    assert sweep.wait(timeout=JOB_WAIT_S, poll=2) == "COMPLETED", sweep.logs(tail=40, task=0)
    view = sweep.sweep()
    assert sorted(row.number for row in view.rows) == [0, 1], view.to_dict()
    assert view.best is not None and view.counts().get("COMPLETED") == 2, view.to_dict()


def test_the_issues_job_is_refused_where_its_launcher_cannot_be_placed_and_runs_where_there_is_none(
        box, submitted):
    """2 nodes x every CPU of a node: on Kubernetes the launcher needs half of one on a node, so it can never start
    and is refused with the arithmetic; Slurm runs no launcher pod, so the same request starts there."""
    limits = alice_limits(box)
    issue = {"nodes": 2, "gpus_per_node": 1, "cpus_per_task": limits.cpus_per_node, "memory_gb": 1}
    before = {j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=box.cfg)}
    if limits.launcher is None:
        box.start(submitted(**issue))
        return
    with pytest.raises(JobSpecError) as err:
        jobs.submit({**TINY, **issue}, user=ALICE[0], groups=ALICE[1], cfg=box.cfg)
    message = str(err.value)
    assert err.value.field == "cpus_per_task", message
    assert message.startswith(f"cpus_per_task: {limits.cpus_per_node} can never be placed"), message
    assert "launcher pod of 0.5 CPUs and 2 GB" in message and "of its 2 nodes wherever the launcher lands" in message
    assert "allowed: cpus_per_task at most" in message, message
    assert {j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=box.cfg)} - before == set()


def test_a_sweep_whose_trials_at_once_cannot_fit_is_refused_with_the_numbers(box):
    limits = alice_limits(box)
    usable = len(limits.rooms)
    whole_node = {**TINY, "gpus_per_node": 0, "cpus_per_task": limits.cpus_per_node, "memory_gb": 1}
    before = {j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=box.cfg)}
    with pytest.raises(JobSpecError) as err:
        jobs.submit({**whole_node, "sweep": {"trials": usable + 1, "parallel": usable + 1, "pruner": "none"}},
                    user=ALICE[0], groups=ALICE[1], cfg=box.cfg)
    message = str(err.value)
    # a node holds one such trial where it has all those CPUs (a Kubernetes node may keep some for the cluster's pods)
    fit = sum(node.room.millicpus >= limits.cpus_per_node * 1000 for node in limits.rooms)
    assert err.value.field == "sweep.parallel", message
    assert re.search(rf"allowed: (1-)?{fit} \(trials at once that {usable} nodes", message), message
    assert f"{limits.cpus_per_node} CPUs" in message
    assert {j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=box.cfg)} - before == set()
    # what the refusal allows is accepted (checked, not submitted: validate_sweep makes nothing)
    plan = jobs.validate_sweep({**whole_node, "sweep": {"trials": usable + 1, "parallel": fit, "pruner": "none"}},
                               user=ALICE[0], groups=ALICE[1], cfg=box.cfg)
    assert plan.parallel == fit
