"""The node's reader loop: holders as the scheduler says (its `gpu_holders`), the latest reading and its history
written for the portal (root's alone), a scheduler that does not answer read as unknown and said once in the log."""

from __future__ import annotations

import json
import logging
import stat

from portal.errors import SchedulerUnavailable
from portal.gpus import agent
from portal.gpus.readings import NodeReading
from portal.gpus.standin import Held, StandIn, Use
from portal.scheduler.cluster import QueuedJob, holders_on
from portal.scheduler.snapshot import ClusterSnapshot


def job(id_: str, state: str = "RUNNING", nodes: str = "tnode[1-2]", gpus: int = 1) -> QueuedJob:
    return QueuedJob(id=id_, user="alice", state=state, elapsed="1:00", nodes=2, gpus_per_node=gpus, reason="None",
                     node_list=nodes)


SNAPSHOT = ClusterSnapshot(taken_at=0.0, queue={j.id: j for j in (
    job("1"), job("2", state="PENDING"), job("3", nodes="tnode2"), job("4", gpus=0), job("5", nodes="tnode10"))})


def test_the_holders_on_a_node_are_its_running_jobs_with_gpus_there():
    assert holders_on(SNAPSHOT.queue.values(), "tnode1") == {"1": Held("alice", 1)}
    assert set(holders_on(SNAPSHOT.queue.values(), "tnode2")) == {"1", "3"}


def test_the_latest_reading_replaces_the_last_and_the_history_keeps_its_newer_half(tmp_path, monkeypatch):
    monkeypatch.setattr(agent, "MAX_HISTORY_BYTES", 2000)
    for second in range(1, 40):
        agent.write(tmp_path, NodeReading("tnode1", float(second), 1.0, "standin"))
    assert NodeReading.from_json((tmp_path / "tnode1.json").read_text()).at == 39.0
    history = [json.loads(line)["at"] for line in (tmp_path / "tnode1.jsonl").read_text().splitlines()]
    assert history[-1] == 39.0 and history == sorted(history) and 1.0 not in history
    assert (tmp_path / "tnode1.jsonl").stat().st_size <= 2000
    assert not list(tmp_path.glob(".*"))  # no part left


def test_a_scheduler_that_does_not_answer_makes_every_gpu_unknown_and_is_said_once(tmp_path, caplog):
    answers = [SNAPSHOT, SchedulerUnavailable("slurmctld did not answer"), SchedulerUnavailable("still not"),
               SNAPSHOT]

    def holders(node: str) -> dict[str, Held]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return holders_on(answer.queue.values(), node)

    standin = StandIn("tnode1", 2, lambda holder, held: Use(1.0, 0))
    loop = agent.Agent("tnode1", tmp_path, holders, standin.read, "standin")
    with caplog.at_level(logging.INFO, logger="dsportal.gpus"):
        readings = [loop.once() for _ in range(4)]
    assert readings[0].held_by("1") and "did not answer" in readings[1].error and readings[1].gpus == ()
    said = [record.getMessage() for record in caplog.records]
    assert sum("did not say" in line for line in said) == 2  # each new error once
    assert any("reads again" in line for line in said) and any("1 now holds GPU(s) 0" in line for line in said)


def test_the_readings_directory_is_roots_alone(tmp_path):
    out = tmp_path / "gpus"
    assert agent.main(["--node", "tnode1", "--out", str(out), "--reader", "standin", "--gpus", "1", "--once"]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert NodeReading.from_json((out / "tnode1.json").read_text()).node == "tnode1"
