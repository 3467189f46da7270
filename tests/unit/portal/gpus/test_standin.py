"""The boxes' stand-in for GPUs (FAKE): a holder's GPUs are as busy as its processes' CPU time says, shared among
the GPUs it holds on the node; first seen is unknown; its indices stay while it holds them."""

from __future__ import annotations

from portal.gpus.standin import FAKE_MEMORY_MIB, Held, StandIn, Use


class Node:
    def __init__(self):
        self.now, self.use = 1000.0, {}

    def reader(self, gpus: int = 4) -> StandIn:
        return StandIn("tnode1", gpus, lambda holder, held: self.use.get(holder), clock=lambda: self.now)


def test_a_training_job_reads_busy_and_an_idle_server_idle():
    node = Node()
    standin = node.reader()
    held = {"7": Held("alice", 2), "8": Held("bob", 1)}
    node.use = {"7": Use(100.0, 4 << 30), "8": Use(5.0, 1 << 30)}
    first = standin.read(held)
    assert [g.busy for g in first.gpus[:3]] == [None, None, None]  # nothing to take a difference from
    assert first.gpus[3].busy == 0.0 and not first.gpus[3].holder  # free: known, does nothing
    node.now += 10
    node.use = {"7": Use(120.0, 4 << 30), "8": Use(5.02, 1 << 30)}  # 2 CPUs for 2 GPUs; almost nothing
    second = standin.read(held)
    job, server = second.held_by("7"), second.held_by("8")
    assert [(g.index, g.busy, g.memory_used_mib) for g in job] == [(0, 100.0, 2048), (1, 100.0, 2048)]
    assert server[0].index == 2 and server[0].busy is not None and server[0].busy < 1 and server[0].idle
    assert second.interval_s == 10 and second.source == "standin" and job[0].memory_total_mib == FAKE_MEMORY_MIB


def test_indices_stay_while_held_and_a_leaving_holder_frees_its_own():
    node = Node()
    standin = node.reader(3)
    node.use = {"1": Use(0, 0), "2": Use(0, 0), "3": Use(0, 0)}
    standin.read({"1": Held("alice", 1), "2": Held("bob", 1)})
    reading = standin.read({"2": Held("bob", 1), "3": Held("alice", 2)})
    assert [g.index for g in reading.held_by("2")] == [1]  # kept
    assert [g.index for g in reading.held_by("3")] == [0, 2]  # what is free


def test_unreadable_cgroups_or_replaced_processes_read_unknown():
    node = Node()
    standin = node.reader(1)
    node.use = {"7": Use(50.0, 0)}
    standin.read({"7": Held("alice", 1)})
    node.now += 10
    node.use = {"7": Use(10.0, 0)}  # its processes ended and others began: less CPU time than before
    assert standin.read({"7": Held("alice", 1)}).gpus[0].busy is None
    node.now += 10
    node.use = {}  # no cgroup for it
    gpu = standin.read({"7": Held("alice", 1)}).gpus[0]
    assert gpu.busy is None and not gpu.idle and gpu.holder == "7"


def test_a_holder_asking_more_than_the_node_has_gets_what_is_free():
    node = Node()
    node.use = {"7": Use(0, 0)}
    assert len(node.reader(2).read({"7": Held("alice", 5)}).held_by("7")) == 2
