"""The NVML reader against NVML's answers played back (nvml_replay.py): figures, holders, a lost GPU, a node whose
NVML does not start."""

from __future__ import annotations

import json

from portal.gpus import nvml
from portal.gpus.readings import NodeReading
from tests.unit.portal.gpus.nvml_replay import Replay


def test_a_training_gpu_reads_busy_with_its_memory_and_holder_and_a_lost_one_reads_unknown():
    replay = Replay("written-2xh100-one-lost.json")
    reading = nvml.read(replay, "gpu1", {0: nvml.Holding("4711", "alice"), 1: nvml.Holding("4712", "bob")})
    training, lost = reading.gpus
    assert (training.busy, training.memory_used_mib, training.memory_total_mib) == (97.0, 57344, 81559)
    assert (training.holder, training.user, training.uuid) == ("4711", "alice", replay.answers["devices"][0]["uuid"])
    assert lost.busy is None and lost.memory_used_mib is None and lost.holder == "4712"
    assert not lost.idle  # unknown is never idle
    assert reading.source == "nvml" and not reading.error and replay.started == 0


def test_a_held_gpu_at_zero_percent_is_idle_and_a_free_one_is_not():
    held = nvml.read(Replay("written-1xh200-idle.json"), "gpu2", {0: nvml.Holding("server-alice", "alice")})
    free = nvml.read(Replay("written-1xh200-idle.json"), "gpu2", {})
    assert held.gpus[0].idle and held.gpus[0].memory_used_mib == 1024
    assert not free.gpus[0].idle and free.gpus[0].holder == ""


def test_a_node_whose_nvml_fails_reads_as_an_error_with_no_gpu_idle():
    for call in ("nvmlInit", "nvmlDeviceGetCount"):
        replay = Replay("written-1xh200-idle.json", fail={call: "Driver Not Loaded"})
        reading = nvml.read(replay, "gpu2", {0: nvml.Holding("9", "alice")})
        assert "Driver Not Loaded" in reading.error and reading.gpus == (), call
        assert replay.started == 0, call


def test_a_reading_survives_its_schema_and_the_recording_replays():
    replay = Replay("written-2xh100-one-lost.json")
    reading = nvml.read(replay, "gpu1", {0: nvml.Holding("4711", "alice")})
    assert NodeReading.from_json(json.dumps(reading.to_dict())) == reading
    healthy = Replay("written-1xh200-idle.json")
    recorded = nvml.record(healthy)
    assert recorded["devices"][0]["uuid"] == healthy.answers["devices"][0]["uuid"] and healthy.started == 0
