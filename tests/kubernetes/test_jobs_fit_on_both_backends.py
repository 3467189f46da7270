"""On both boxes the form's default job starts, and a job the nodes could never hold is refused at submit with the
numbers (issue 49): the same journey through the notebook API on Slurm and on Kubernetes, the limits read from each
box's own nodes (portal.records.fit).

Slurm: the test box's 2 nodes of 8 CPUs, 24 GB and 4 GPUs; a run's nodes are whole nodes. Kubernetes: the test box's
2 nodes report the machine's CPUs (2 here), and a run's launcher pod (1 CPU, 2 GB) lands on one of them.
"""

from __future__ import annotations

import re

import pytest

from portal import jobs
from portal.jobs import JobSpecError
from portal.service.submit_form import form_values
from tests.kubernetes.conftest import ALICE, TINY
from tests.kubernetes.test_jobs_on_both_backends import backend, submitted  # noqa: F401  (the shared fixtures)

pytestmark = pytest.mark.integration
PLACED = ("nodes", "gpus_per_node", "cpus_per_task", "memory_gb")


def alice_limits(backend) -> jobs.JobLimits:  # noqa: F811  (the fixture's value)
    limits = jobs.limits(user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)
    assert limits.rooms, "the limits must come from the box's nodes, not from settings"
    return limits


def test_the_forms_default_job_starts(backend, submitted):  # noqa: F811
    limits = alice_limits(backend)
    shown = form_values(limits, {})  # what the dashboard's form shows, and a submit leaving the fields out uses
    placed = {name: shown[name] for name in PLACED}
    assert placed["cpus_per_task"] <= limits.cpus_per_node and placed["nodes"] == 1
    job = submitted(**placed)  # TINY's training fields (a small model, 1 epoch) with the form's placement
    assert {name: getattr(job.spec, name) for name in PLACED} == placed
    backend.start(job)


def test_the_issues_job_is_refused_where_its_launcher_cannot_be_placed_and_runs_where_there_is_none(
        backend, submitted):  # noqa: F811
    """2 nodes x every CPU of a node: on Kubernetes the launcher needs 1 of them on one node, so it can never start
    and is refused with the arithmetic; Slurm runs no launcher pod, so the same request starts there."""
    limits = alice_limits(backend)
    issue = {"nodes": 2, "gpus_per_node": 1, "cpus_per_task": limits.cpus_per_node, "memory_gb": 1}
    before = {j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)}
    if limits.launcher is None:
        backend.start(submitted(**issue))
        return
    with pytest.raises(JobSpecError) as err:
        jobs.submit({**TINY, **issue}, user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)
    message = str(err.value)
    assert err.value.field == "cpus_per_task", message
    assert message.startswith(f"cpus_per_task: {limits.cpus_per_node} can never be placed"), message
    assert "launcher pod of 1 CPU and 2 GB" in message and "of its 2 node pods wherever the launcher lands" in message
    assert "allowed: cpus_per_task at most" in message, message
    assert {j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)} - before == set()


def test_a_sweep_whose_trials_at_once_cannot_fit_is_refused_with_the_numbers(backend):  # noqa: F811
    limits = alice_limits(backend)
    usable = len(limits.rooms)
    whole_node = {**TINY, "gpus_per_node": 0, "cpus_per_task": limits.cpus_per_node, "memory_gb": 1}
    before = {j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)}
    with pytest.raises(JobSpecError) as err:
        jobs.submit({**whole_node, "sweep": {"trials": usable + 1, "parallel": usable + 1, "pruner": "none"}},
                    user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)
    message = str(err.value)
    # a node holds one such trial where it has all those CPUs (a Kubernetes node may keep some for the cluster's pods)
    fit = sum(node.room.millicpus >= limits.cpus_per_node * 1000 for node in limits.rooms)
    assert err.value.field == "sweep.parallel", message
    assert re.search(rf"allowed: (1-)?{fit} \(trials at once that {usable} nodes", message), message
    assert f"{limits.cpus_per_node} CPUs" in message
    assert {j.id for j in jobs.jobs(user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)} - before == set()
    # what the refusal allows is accepted (checked, not submitted: validate_sweep makes nothing)
    plan = jobs.validate_sweep({**whole_node, "sweep": {"trials": usable + 1, "parallel": fit, "pruner": "none"}},
                               user=ALICE[0], groups=ALICE[1], cfg=backend.cfg)
    assert plan.parallel == fit
