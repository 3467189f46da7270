"""chexnet.data.tfrecords: shards per split, the manifest, and examples that keep the PNG bytes unchanged."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from chexnet.data.chestxray14 import DataError, load_index
from chexnet.data.synthetic import write_synthetic
from chexnet.data.tfrecords import convert, parse_example
from chexnet.labels import CLASSES


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("data"), 40, 16, seed=1, patients=15)


def test_shards_manifest_and_examples(layout, tmp_path):
    manifest = convert(layout, tmp_path, shards=3)
    index = load_index(layout)
    assert manifest["counts"] == {s: len(index.split(s)) for s in ("train", "val", "test")}
    assert manifest["classes"] == list(CLASSES)
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest
    assert [s["file"] for s in manifest["shards"]["train"]] == [f"train-{i:05d}-of-00003.tfrecord" for i in range(3)]
    by_id = {r.image_id: r for r in index.train + index.val + index.test}
    seen = []
    for split, shards in manifest["shards"].items():
        for shard in shards:
            examples = list(tf.data.TFRecordDataset(str(tmp_path / shard["file"])).map(parse_example))
            assert len(examples) == shard["records"]
            for example in examples:
                record = by_id[example["image_id"].numpy().decode()]
                assert example["image"].numpy() == record.path.read_bytes()  # the PNG, unchanged
                np.testing.assert_array_equal(example["labels"].numpy(), record.labels)
                seen.append((split, record.image_id))
    assert sorted(seen) == sorted((s, r.image_id) for s in ("train", "val", "test") for r in index.split(s))


def test_fewer_shards_when_a_split_is_small_and_reruns_leave_no_stale_files(layout, tmp_path):
    convert(layout, tmp_path, shards=50)
    manifest = convert(layout, tmp_path, shards=2)
    val = manifest["counts"]["val"]
    assert len(manifest["shards"]["val"]) == max(1, min(2, val))
    assert len(list(tmp_path.glob("*.tfrecord"))) == sum(len(s) for s in manifest["shards"].values())


def test_cli_reports_bad_data_without_a_traceback(layout, tmp_path):
    result = subprocess.run([sys.executable, "-m", "chexnet.data.tfrecords", "--source", str(tmp_path / "none"),
                             "--out", str(tmp_path / "t"), "--shards", "2"], capture_output=True, text=True)
    assert result.returncode == 2 and "does not exist" in result.stderr and "Traceback" not in result.stderr
    with pytest.raises(ValueError, match="shards must be at least 1"):
        convert(layout, tmp_path, shards=0)
    with pytest.raises(DataError):
        convert(tmp_path / "none", tmp_path, shards=1)
