"""A node's reading is checked against its schema before a page uses it: each wrong field is named."""

from __future__ import annotations

import json

import pytest

from portal.gpus.readings import GpuReading, NodeReading, ReadingError

GOOD = {"node": "tnode1", "at": 1764940000.0, "interval_s": 15.0, "source": "standin",
        "gpus": [{"index": 0, "uuid": "FAKE-tnode1-0", "busy": 42.5, "memory_used_mib": 10, "memory_total_mib": 16384,
                  "holder": "123", "user": "alice"}]}


def test_a_good_reading_reads():
    reading = NodeReading.from_json(json.dumps(GOOD))
    assert reading.gpus == (GpuReading(0, "FAKE-tnode1-0", 42.5, 10, 16384, "123", "alice"),)
    assert reading.held_by("123") == reading.gpus and reading.held_by("124") == ()


@pytest.mark.parametrize(("change", "named"), [
    ({"source": "mine"}, "source"),
    ({"at": "yesterday"}, "at"),
    ({"interval_s": float("inf")}, "not JSON"),
    ({"node": "../etc"}, "node"),
    ({"extra": 1}, "unknown field(s) extra"),
    ({"gpus": {"0": {}}}, "gpus"),
    ({"gpus": [GOOD["gpus"][0]] * 2}, "an index twice"),
    ({"gpus": [{**GOOD["gpus"][0], "busy": 101}]}, "gpus[0].busy"),
    ({"gpus": [{**GOOD["gpus"][0], "busy": True}]}, "gpus[0].busy"),
    ({"gpus": [{**GOOD["gpus"][0], "index": -1}]}, "gpus[0].index"),
    ({"gpus": [{**GOOD["gpus"][0], "memory_used_mib": 1.5}]}, "gpus[0].memory_used_mib"),
    ({"gpus": [{**GOOD["gpus"][0], "holder": "1; rm -rf"}]}, "gpus[0].holder"),
    ({"gpus": [{**GOOD["gpus"][0], "user": ["alice"]}]}, "gpus[0].user"),
    ({"gpus": [{"uuid": "x"}]}, "gpus[0].index: missing"),
    ({"error": "line\nbreak"}, "error"),
])
def test_a_wrong_field_is_named(change, named):
    with pytest.raises(ReadingError, match=named.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        NodeReading.from_json(json.dumps({**GOOD, **change}))


def test_too_many_gpus_or_bytes_are_refused():
    with pytest.raises(ReadingError, match="at most 64"):
        NodeReading.from_dict({**GOOD, "gpus": [{"index": i} for i in range(65)]})
    with pytest.raises(ReadingError, match="more than"):
        NodeReading.from_json(" " * (256 * 1024 + 1))


def test_only_a_held_known_gpu_below_the_line_is_idle():
    assert GpuReading(0, busy=0.0, holder="1").idle
    assert not GpuReading(0, busy=None, holder="1").idle  # unknown
    assert not GpuReading(0, busy=0.0).idle  # free
    assert not GpuReading(0, busy=50.0, holder="1").idle
