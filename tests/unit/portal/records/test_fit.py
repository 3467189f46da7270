"""Whether a request can ever be placed on a cluster's nodes (portal.records.fit), and the job spec's use of it
(portal.records.spec): refused at submit with the arithmetic, defaults that fit, a sweep's trials at once."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.quota import GpuQuota
from portal.records.fit import NodeRoom, Request, Shape, cluster_words, fits, most_placed, refusal
from portal.records.spec import JobSpecError, parse_job_spec
from portal.records.sweep import parse_sweep
from tests.unit.helpers import SPEC_LIMITS

GB = 1024
LAUNCHER = Shape(1000, 2 * GB)


def nodes(*shapes: tuple[float, float, int], kept: Shape | None = None) -> tuple[NodeRoom, ...]:
    """Nodes of (CPUs, GB, GPUs) each; `kept` held by the cluster's own pods on the first."""
    return tuple(NodeRoom(f"n{i + 1}", Shape(int(c * 1000), int(m * GB), g), kept if i == 0 and kept else
                          Shape(0, 0, 0)) for i, (c, m, g) in enumerate(shapes))


# The Kubernetes test box: 2 nodes reporting the machine's 2 CPUs, the hub's pod (0.1 CPU, 0.5 GB) on one.
KUBE_BOX = nodes((1.9, 7.5, 2), (2, 8, 2), kept=Shape(100, 512, 0))


def pods(count: int, cpus: float, gb: float = 1, gpus: int = 0, launcher: Shape | None = LAUNCHER) -> Request:
    return Request(Shape(int(cpus * 1000), int(gb * GB), gpus), count, own_nodes=False, launcher=launcher)


def test_the_observed_job_cannot_be_placed_wherever_the_launcher_lands():
    # 2 worker pods of 2 CPUs on 2 nodes of 2 CPUs, and a launcher of 1 CPU: one worker has nowhere to go
    assert most_placed(nodes((2, 8, 2), (2, 8, 2)), pods(2, 2)) == 1
    assert not fits(nodes((2, 8, 2), (2, 8, 2)), pods(2, 2))
    assert fits(nodes((2, 8, 2), (2, 8, 2)), pods(2, 1))  # 1 CPU each: the launcher's node still takes one
    assert fits(nodes((2, 8, 2), (2, 8, 2)), pods(2, 2, launcher=None))  # no launcher: one pod a node


def test_the_launcher_is_counted_on_the_worst_node_it_may_land_on():
    # the 3-CPU pod fits only on the 3-CPU node, which the launcher may take first (the other node would do)
    assert not fits(nodes((3, 8, 0), (1, 8, 0)), pods(1, 3))
    assert fits(nodes((4, 8, 0), (1, 8, 0)), pods(1, 3))
    # a launcher that fits on no node: nothing of the job can run
    assert most_placed(nodes((0.5, 8, 0)), pods(1, 0.1)) == 0


def test_what_the_clusters_own_pods_hold_is_never_a_jobs():
    # the node with the hub's pod gives 1.9 CPUs: a 2-CPU pod fits only on the other, where the launcher may land
    assert not fits(KUBE_BOX, pods(1, 2))
    assert fits(KUBE_BOX, pods(1, 1)) and fits(KUBE_BOX, pods(2, 1))
    assert not fits(KUBE_BOX, pods(3, 1))


def test_memory_and_gpus_count_as_cpus_do():
    assert not fits(nodes((8, 8, 2)), pods(1, 1, gb=7))  # 7 GB beside the launcher's 2 on an 8 GB node
    assert fits(nodes((8, 8, 2)), pods(1, 1, gb=6))
    assert not fits(nodes((8, 64, 2), (8, 64, 2)), pods(3, 1, gpus=2))  # GPUs: one pod of 2 a node
    assert fits(nodes((8, 64, 4), (8, 64, 2)), pods(3, 1, gpus=2))


def test_on_nodes_of_their_own_each_of_a_jobs_nodes_needs_the_whole_share():
    heterogeneous = nodes((8, 19, 4), (8, 19, 2))
    share = Shape(8000, 16 * GB, 4)
    assert most_placed(heterogeneous, Request(share, 2)) == 1
    assert fits(heterogeneous, Request(replace(share, gpus=2), 2))
    # one node with room for two shares still gives a job only one of its nodes
    assert not fits(nodes((16, 64, 8)), Request(Shape(4000, GB, 1), 2))


@pytest.mark.parametrize(("counts", "nodes_per_run", "expected"), [
    ((2, 2, 2), 2, 3), ((4, 0, 0), 2, 0), ((3, 1, 1), 2, 2), ((5, 5), 2, 5), ((1, 1, 1, 1), 3, 1), ((2, 2, 1), 3, 1)])
def test_runs_at_once_on_nodes_of_their_own(counts, nodes_per_run, expected):
    # a node holding `count` shares gives each run at most one of them
    rooms = tuple(NodeRoom(f"n{i}", Shape(count * 1000, count * GB, 0)) for i, count in enumerate(counts))
    request = Request(Shape(1000, GB), nodes_per_run, runs=10)
    assert most_placed(rooms, request) == expected


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=5), st.integers(1, 3), st.integers(1, 8))
def test_the_runs_formula_matches_placing_them_one_by_one(counts, per_run, most):
    rooms = tuple(NodeRoom(f"n{i}", Shape(c * 1000, c * GB, 0)) for i, c in enumerate(counts))
    found = most_placed(rooms, Request(Shape(1000, GB), per_run, runs=most)) if most > 1 else None
    expected = 0
    left = list(counts)
    while expected < most:  # each run on the per_run nodes with the most room left: optimal for identical runs
        order = sorted(range(len(left)), key=lambda i: -left[i])[:per_run]
        if len(order) < per_run or any(left[i] == 0 for i in order):
            break
        for i in order:
            left[i] -= 1
        expected += 1
    if found is not None:
        assert found == expected


def test_sweep_trials_at_once_share_nodes_on_kubernetes():
    trial = Request(Shape(1000, 2 * GB, 1), 1, runs=8, own_nodes=False)
    assert most_placed(KUBE_BOX, trial) == 3  # 1 + 2 CPUs; the GPUs (2 + 2) would have held 4
    assert most_placed(KUBE_BOX, replace(trial, runs=2)) == 2


def test_the_refusal_names_the_field_the_arithmetic_and_what_fits():
    def make(values):
        return Request(Shape(values["cpus_per_task"] * 1000, values["memory_gb"] * GB, values["gpus_per_node"]),
                       values["nodes"], own_nodes=False, launcher=LAUNCHER)
    box = nodes((2, 8, 2), (2, 8, 2))
    field, message = refusal(box, make, {"nodes": 2, "gpus_per_node": 1, "cpus_per_task": 2, "memory_gb": 2})
    assert field == "cpus_per_task"
    assert message == (
        "2 can never be placed: the job asks for 2 node pods of 2 CPUs, 2 GB and 1 GPU each (1 worker x 2 CPUs), "
        "and a launcher pod of 1 CPU and 2 GB on one of the nodes; the cluster has 2 nodes with room for 2 CPUs, "
        "8 GB and 2 GPUs each, which can hold 1 of its 2 node pods wherever the launcher lands, so the job would "
        "never start; allowed: cpus_per_task at most 1, or nodes at most 1")
    field, message = refusal(box, make, {"nodes": 2, "gpus_per_node": 1, "cpus_per_task": 1, "memory_gb": 7})
    assert field == "memory_gb" and "allowed: memory_gb at most 6, or nodes at most 1" in message
    field, message = refusal(box, make, {"nodes": 3, "gpus_per_node": 2, "cpus_per_task": 1, "memory_gb": 1})
    assert field == "gpus_per_node" and "gpus_per_node at most 1" in message and "nodes at most 2" in message
    assert refusal(box, make, {"nodes": 2, "gpus_per_node": 1, "cpus_per_task": 1, "memory_gb": 2}) is None


def test_the_nodes_are_named_by_shape_with_what_the_cluster_keeps():
    assert cluster_words(nodes((2, 8, 2), (2, 8, 2))) == "2 nodes with room for 2 CPUs, 8 GB and 2 GPUs each"
    assert cluster_words(KUBE_BOX) == (
        "2 nodes (n1: 1.9 CPUs, 7.5 GB and 2 GPUs; n2: 2 CPUs, 8 GB and 2 GPUs), after what the cluster's own pods "
        "hold (n1: 0.1 CPUs and 0.5 GB)")
    assert cluster_words(()) == "no node that can take work"


# --- the job spec: every scheduler's limits carry their nodes --------------------------------------------------------

KUBE_LIMITS = replace(SPEC_LIMITS, nodes=4, cpus_per_node=2, memory_gb_per_node=7, gpus_per_node=2, rooms=KUBE_BOX,
                      launcher=LAUNCHER, own_nodes=False)


def parse(limits, sweep=False, **raw):
    return parse_job_spec(raw, limits, lambda path: True, sweep=sweep)


def test_the_default_job_fits_the_nodes_it_is_shown_on():
    spec = parse(KUBE_LIMITS)
    assert (spec.nodes, spec.gpus_per_node, spec.cpus_per_task) == (1, 1, 1)
    assert fits(KUBE_LIMITS.node_rooms(), KUBE_LIMITS.request(spec.to_dict()))
    # 2 nodes: the memory too comes down until both pods and the launcher fit
    two = parse(KUBE_LIMITS, nodes=2)
    assert fits(KUBE_LIMITS.node_rooms(), KUBE_LIMITS.request(two.to_dict()))
    # a trial has no launcher: it may have the 2 CPUs of the node without the hub's pod
    assert parse(KUBE_LIMITS, sweep=True).cpus_per_task == 2
    # Slurm's box: nodes of 8 CPUs and 19 GB, no launcher: the defaults stay as they were
    assert (parse(SPEC_LIMITS).cpus_per_task, parse(SPEC_LIMITS).memory_gb) == (4, 16)


def test_a_job_that_can_never_start_is_refused_with_the_numbers():
    with pytest.raises(JobSpecError) as err:
        parse(KUBE_LIMITS, nodes=2, cpus_per_task=2, memory_gb=2)
    assert err.value.field == "cpus_per_task"
    assert "launcher pod of 1 CPU and 2 GB" in str(err.value) and "0 of its 2 node pods" in str(err.value)
    assert str(err.value).startswith("cpus_per_task: 2 can never be placed")
    # Slurm: 2 nodes with 4 GPUs each, on a partition where only one node has 4
    slurm = replace(SPEC_LIMITS, rooms=nodes((8, 19, 4), (8, 19, 2)))
    assert parse(slurm, nodes=2, gpus_per_node=2, cpus_per_task=4).nodes == 2
    with pytest.raises(JobSpecError) as err:
        parse(replace(slurm, quota=GpuQuota(8)), nodes=2, gpus_per_node=4, cpus_per_task=1, memory_gb=1)
    assert err.value.field == "gpus_per_node" and "1 of its 2 nodes" in str(err.value)
    assert "gpus_per_node at most 2, or nodes at most 1" in str(err.value)


def test_a_sweeps_trials_at_once_are_capped_by_the_nodes_with_the_reason():
    trial = parse(KUBE_LIMITS, sweep=True, cpus_per_task=1, memory_gb=2)
    plan = parse_sweep({}, 5, KUBE_LIMITS, trial.gpus, lambda most: KUBE_LIMITS.runs_at_once(trial, most))
    assert plan.parallel == 2  # the default, which fits (3 would)
    with pytest.raises(JobSpecError) as err:
        parse_sweep({"parallel": 4}, 5, KUBE_LIMITS, trial.gpus, lambda most: KUBE_LIMITS.runs_at_once(trial, most))
    assert err.value.field == "sweep.parallel"
    assert "allowed: 1-3 (trials at once that 2 nodes" in str(err.value)
    big = parse(KUBE_LIMITS, sweep=True, cpus_per_task=1, memory_gb=7)
    assert KUBE_LIMITS.runs_at_once(big, 4)[0] == 2  # 7 GB a trial: one on each node


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 8), st.integers(0, 4)), min_size=1, max_size=6),
       st.integers(1, 6), st.booleans(), st.integers(500, 2500), st.integers(0, 2))
def test_a_runs_pods_counted_node_by_node_match_placing_the_launcher_on_each_node(shapes, count, own, cpus, gpus):
    rooms = tuple(NodeRoom(f"n{i}", Shape(c, m * GB, g)) for i, (c, m, g) in enumerate(shapes))
    request = Request(Shape(cpus, GB, gpus), count, own_nodes=own, launcher=LAUNCHER)
    per_node = 1 if own else count
    worst = [min(count, sum(request.pod.times_in(r.room.less(LAUNCHER) if i == at else r.room, per_node)
                            for i, r in enumerate(rooms)))
             for at, landing in enumerate(rooms) if LAUNCHER.times_in(landing.room, 1)]
    assert most_placed(rooms, request) == (min(worst) if worst else 0)
