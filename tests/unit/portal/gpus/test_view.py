"""The portal reads the nodes' readings: the latest of each (a stale one as unknown), and a holder's GPUs over time
node by node, with a history line that is not a reading left out and counted."""

from __future__ import annotations

import json

from portal.gpus import agent, view
from portal.gpus.readings import GpuReading, NodeReading


def reading(node: str, at: float, *gpus: GpuReading) -> NodeReading:
    return NodeReading(node, at, 10.0, "standin", gpus=gpus)


def test_a_jobs_gpus_over_time_node_by_node(tmp_path):
    for at, busy in ((100.0, None), (110.0, 80.0), (120.0, 0.0)):
        agent.write(tmp_path, reading("tnode1", at, GpuReading(0, busy=busy, memory_used_mib=10, holder="7"),
                                      GpuReading(1, busy=busy, memory_used_mib=5, holder="7"),
                                      GpuReading(2, busy=50.0, holder="8")))
        agent.write(tmp_path, reading("tnode2", at, GpuReading(0, busy=100.0, memory_used_mib=1, holder="7")))
    with (tmp_path / "tnode1.jsonl").open("a") as history:
        history.write('{"node":"tnode1","at":"now","gpus":[{"index":0,"holder":"7"}]}\nnot json "holder":"7"\n'
                      'not json, no holder\n')  # the last is not a line of holder 7's: not read at all
    one, two = view.holder_series(tmp_path, "7", ["tnode1", "tnode2"], since=105.0)
    assert one.gpus == (0, 1) and [(p.at, p.busy, p.memory_used_mib) for p in one.points] == [
        (110.0, 80.0, 15), (120.0, 0.0, 15)]
    assert one.left_out == 2 and two.points[-1].busy == 100.0 and two.left_out == 0
    assert view.holder_series(tmp_path, "9", ["tnode1", "tnode3"])[1].points == ()


def test_a_gpu_unknown_on_a_node_makes_that_point_unknown(tmp_path):
    agent.write(tmp_path, reading("n1", 1.0, GpuReading(0, busy=90.0, holder="7"), GpuReading(1, holder="7")))
    assert view.holder_series(tmp_path, "7", ["n1"])[0].points[0].busy is None


def test_the_latest_of_each_node_and_a_stopped_reader_reads_unknown(tmp_path):
    agent.write(tmp_path, reading("n1", 1000.0, GpuReading(0, busy=0.0, holder="7")))
    agent.write(tmp_path, reading("n2", 900.0, GpuReading(0, busy=0.0, holder="8")))
    (tmp_path / "n3.json").write_text(json.dumps({"node": "n3"}))
    found = view.latest(tmp_path, clock=lambda: 1010.0)
    assert found["n1"].gpus[0].idle and not found["n1"].error
    assert "reader stopped" in found["n2"].error and not found["n2"].gpus[0].idle
    assert "unreadable" in found["n3"].error
    assert view.latest(tmp_path / "none") == {}


def test_a_link_or_a_fifo_in_place_of_a_reading_is_not_followed_or_waited_for(tmp_path):
    import os

    (tmp_path / "secret").write_text("{}")
    os.symlink(tmp_path / "secret", tmp_path / "n1.json")
    os.mkfifo(tmp_path / "n2.json")
    found = view.latest(tmp_path, clock=lambda: 0.0)
    assert "unreadable" in found["n1"].error and "unreadable" in found["n2"].error
