"""The model card's parts (programkit.model_card): the data's fingerprints, the same for an image directory and the
TFRecords made from it, and changed by any image or patient moved; the checkpoint's hashes; the card's file."""

from __future__ import annotations

import hashlib
import json

import pytest

from chexnet.data.tfrecords import PNG, Storage, convert
from programkit import model_card
from programkit.data.sources import source_of
from programkit.data.synthetic import write_synthetic
from programkit.labels import CLASSES


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("data"), 40, 16, seed=1, patients=15)


def test_fingerprints_ignore_order_and_see_every_move():
    pairs = {"train": [("a.png", "p1"), ("b.png", "p1"), ("c.png", "p2")], "val": [("d.png", "p3")]}
    found = model_card.split_fingerprints(pairs)
    assert found["splits"]["train"]["images"] == 3 and found["splits"]["train"]["patients"] == 2
    assert model_card.split_fingerprints({s: list(reversed(p)) for s, p in pairs.items()}) == found
    image_moved = {"train": pairs["train"][:2], "val": [*pairs["val"], ("c.png", "p2")]}
    assert model_card.split_fingerprints(image_moved)["patient_split_sha256"] != found["patient_split_sha256"]
    renamed = {"train": [("a.png", "p1"), ("b.png", "p1"), ("e.png", "p2")], "val": pairs["val"]}
    changed = model_card.split_fingerprints(renamed)
    assert changed["splits"]["train"]["image_list_sha256"] != found["splits"]["train"]["image_list_sha256"]
    assert changed["patient_split_sha256"] == found["patient_split_sha256"]  # the same patients, the same splits


def test_an_image_directory_and_its_tfrecords_have_the_same_fingerprints(layout, tmp_path):
    images = model_card.data_section(source_of(layout))
    convert(layout, tmp_path, shards=2, storage=Storage.of(PNG), workers=1)
    records = model_card.data_section(source_of(tmp_path))
    assert images["kind"] == "images" and records["kind"] == "tfrecord"
    assert images["counts"] == records["counts"] and sum(images["counts"].values()) == 40
    assert images["splits"] == records["splits"] and images["patient_split_sha256"] == records["patient_split_sha256"]
    index = source_of(layout).index
    expected = hashlib.sha256("\n".join(sorted(r.image_id for r in index.split("val"))).encode()).hexdigest()
    assert images["splits"]["val"]["image_list_sha256"] == expected


def test_tfrecords_converted_before_fingerprints_say_so(layout, tmp_path):
    convert(layout, tmp_path, shards=1, storage=Storage.of(PNG), workers=1)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    del manifest["fingerprints"]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    section = model_card.data_section(source_of(tmp_path))
    assert "splits" not in section and "convert the data again" in section["note"]


def test_the_checkpoint_is_its_files_with_their_hashes(tmp_path):
    (tmp_path / "ckpt-3.index").write_bytes(b"index")
    (tmp_path / "ckpt-3.data-00000-of-00001").write_bytes(b"weights" * 1000)
    (tmp_path / "ckpt-2.index").write_bytes(b"older")
    section = model_card.checkpoint_section(str(tmp_path / "ckpt-3"))
    assert section["prefix"] == "ckpt-3" and [f["file"] for f in section["files"]] == [
        "ckpt-3.data-00000-of-00001", "ckpt-3.index"]
    assert section["files"][1]["sha256"] == hashlib.sha256(b"index").hexdigest()
    assert model_card.checkpoint_section(None) == {"prefix": None, "files": []}


def test_the_card_beside_the_checkpoint(tmp_path, layout):
    per_class = {name: 0.5 for name in CLASSES} | {CLASSES[0]: None}
    card = model_card.build_card({"model": "densenet121"}, model_card.data_section(source_of(layout)), per_class,
                                 model_card.checkpoint_section(None), epochs_done=2,
                                 frameworks={"TensorFlow": model_card.installed("tensorflow", "tensorflow-cpu"),
                                             "Nothing": model_card.installed("no-such-distribution")})
    path = model_card.write_card(tmp_path, card)
    read = json.loads(path.read_text())
    assert read["format"] == model_card.CARD_FORMAT and read["epochs_done"] == 2
    assert read["auroc"]["mean"] == 0.5 and read["auroc"]["paper_mean"] > 0.8
    assert read["auroc"]["per_class"][0] == {"class": CLASSES[0], "auroc": None,
                                             "paper": read["auroc"]["per_class"][0]["paper"]}
    assert read["environment"]["python"] and read["code"]["dsportal"]
    assert read["environment"]["frameworks"]["TensorFlow"].startswith("2.15")
    assert read["environment"]["frameworks"]["Nothing"] is None
    assert [p.name for p in tmp_path.iterdir()] == [model_card.CARD_FILE]  # no temporary file left


def test_comparing_the_data_names_what_differs(layout, tmp_path):
    trained = model_card.data_section(source_of(layout))
    convert(layout, tmp_path, shards=2, storage=Storage.of(PNG), workers=1)
    assert model_card.compare_data(trained, model_card.data_section(source_of(tmp_path))) == []  # stored otherwise
    moved = json.loads(json.dumps(trained))
    moved["patient_split_sha256"] = "0" * 64
    moved["splits"]["test"]["image_list_sha256"] = "1" * 64
    said = model_card.compare_data(trained, moved)
    assert len(said) == 2 and "patient split differs" in said[0] and said[1].startswith("the test split holds")
    unknown = {"dir": "/old", "kind": "tfrecord", "note": "its manifest.json records no image or patient lists"}
    assert model_card.compare_data(unknown, trained) == [
        "the data cannot be compared: its manifest.json records no image or patient lists"]


def test_a_non_editable_install_names_the_commit_it_was_made_from(tmp_path, monkeypatch):
    """Jobs run the venv's copy (deploy/local/install-package.sh), outside any git checkout: the card's commit is
    the one that copy was installed from, and a record of the wrong types names nothing."""
    from programkit.model_card import installed_commit

    monkeypatch.setattr("sys.prefix", str(tmp_path))
    assert installed_commit() == (None, None)
    (tmp_path / "share/dsportal").mkdir(parents=True)
    record = tmp_path / "share/dsportal/source.json"
    record.write_text('{"source_hash": "ab", "git_commit": "0123abcd", "git_dirty": false}')
    assert installed_commit() == ("0123abcd", False)
    record.write_text('{"git_commit": 5, "git_dirty": "no"}')
    assert installed_commit() == (None, None)
    record.write_text("not json")
    assert installed_commit() == (None, None)
