"""The demo set is made again once when its TFRecords predate the fingerprints a model card compares."""

from __future__ import annotations

import json

from portal.jobs.demo_data import _without_fingerprints


def test_tfrecords_without_fingerprints_are_moved_aside_to_be_made_again(tmp_path):
    records = tmp_path / "chestxray14-demo-tfrecords"
    records.mkdir()
    (records / "manifest.json").write_text(json.dumps({"format": "chexnet-tfrecord-2"}))
    old = _without_fingerprints(records)
    assert old is not None and not records.exists() and (old / "manifest.json").is_file()
    records.mkdir()
    (records / "manifest.json").write_text(json.dumps({"fingerprints": {}}))
    assert _without_fingerprints(records) is None and records.is_dir()
    assert _without_fingerprints(tmp_path / "missing") is None
