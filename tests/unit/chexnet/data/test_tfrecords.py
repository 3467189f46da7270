"""chexnet.data.tfrecords: shards per split, the manifest, resized JPEG / raw images or the PNG bytes unchanged, labels
and ids kept, the same shards from any number of workers, and manifests a reader does not know refused."""

import io
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from chexnet.data.tfrecords import (
    FORMAT_PNG_ONLY,
    JPEG,
    PNG,
    RAW,
    Storage,
    _encoder,
    _ended_by_sigterm,
    convert,
    encode_image,
    parse_example,
    resized_shape,
)
from programkit.data.chestxray14 import DataError, load_index
from programkit.data.sources import source_of
from programkit.data.synthetic import write_synthetic
from programkit.labels import CLASSES

ORIGINAL = Storage.of(PNG)


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("data"), 40, 16, seed=1, patients=15)


def _examples(out, manifest):
    """{image_id: (split, parsed example)} of every record in the directory."""
    found = {}
    for split, shards in manifest["shards"].items():
        for shard in shards:
            examples = list(tf.data.TFRecordDataset(str(out / shard["file"])).map(parse_example))
            assert len(examples) == shard["records"]
            found.update({e["image_id"].numpy().decode(): (split, e) for e in examples})
    return found


def test_shards_manifest_and_examples(layout, tmp_path):
    manifest = convert(layout, tmp_path, shards=3, storage=ORIGINAL)
    assert (manifest["encoding"], manifest["short_side"], manifest["quality"]) == ("png", None, None)
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


@pytest.mark.parametrize("encoding", [JPEG, RAW])
def test_resized_records_keep_ids_labels_and_the_short_side(layout, tmp_path, encoding):
    manifest = convert(layout, tmp_path, shards=2, storage=Storage.of(encoding, 24, 90), workers=1)
    assert (manifest["encoding"], manifest["short_side"], manifest["quality"]) == \
        (encoding, 24, 90 if encoding == JPEG else None)
    index = load_index(layout)
    found = _examples(tmp_path, manifest)
    assert sorted(found) == sorted(r.image_id for s in ("train", "val", "test") for r in index.split(s))
    for record in index.train + index.val + index.test:
        split, example = found[record.image_id]
        assert record in index.split(split)
        np.testing.assert_array_equal(example["labels"].numpy(), record.labels)
        assert (int(example["height"]), int(example["width"])) == (24, 24)
        expected = np.asarray(Image.open(record.path).resize((24, 24), Image.Resampling.BILINEAR))
        if encoding == RAW:
            pixels = np.frombuffer(example["image"].numpy(), np.uint8).reshape(24, 24)
            np.testing.assert_array_equal(pixels, expected)
        else:
            pixels = tf.io.decode_jpeg(example["image"], channels=1).numpy()[..., 0]
            assert pixels.shape == (24, 24) and np.abs(pixels.astype(int) - expected).mean() < 3  # lossy, barely


def test_the_short_side_keeps_the_aspect_ratio():
    assert resized_shape(1024, 1024, 256) == (256, 256)
    assert resized_shape(2000, 1000, 256) == (512, 256) and resized_shape(300, 400, 30) == (30, 40)
    png = tf.io.encode_png(np.full((30, 60, 1), 200, np.uint8)).numpy()
    for encoding in (JPEG, RAW):
        stored, height, width = encode_image(png, Storage.of(encoding, 12))
        assert (height, width) == (12, 24)
    assert encode_image(png, ORIGINAL) == (png, 30, 60)
    sixteen_bit = Image.fromarray(np.full((8, 8), 51400, np.uint16))  # high byte 200, as decode_png reads it
    out = io.BytesIO()
    sixteen_bit.save(out, format="PNG")
    stored, _, _ = encode_image(out.getvalue(), Storage.of(RAW, 8))
    assert set(stored) == {200}


@pytest.mark.parametrize("encoding", [JPEG, PNG])
def test_workers_write_the_same_shards_as_one_process(layout, tmp_path, encoding):
    storage = Storage.of(encoding, 20)
    serial = convert(layout, tmp_path / "serial", shards=3, storage=storage, workers=1, seed=7)
    parallel = convert(layout, tmp_path / "parallel", shards=3, storage=storage, workers=2, seed=7)
    assert serial["shards"] == parallel["shards"]
    for split in serial["shards"].values():
        for shard in split:
            assert (tmp_path / "serial" / shard["file"]).read_bytes() == \
                (tmp_path / "parallel" / shard["file"]).read_bytes()
    convert(layout, tmp_path / "seed", shards=3, storage=storage, workers=2, seed=8)
    first = serial["shards"]["train"][0]["file"]
    assert (tmp_path / "seed" / first).read_bytes() != (tmp_path / "serial" / first).read_bytes()


@pytest.mark.parametrize(("change", "needle"), [
    ({"format": "chexnet-tfrecord-9"}, "format 'chexnet-tfrecord-9' with encoding 'jpeg'"),
    ({"encoding": "webp"}, "format 'chexnet-tfrecord-2' with encoding 'webp'"),
    ({"encoding": "raw", "short_side": None}, "short_side must be at least 1"),
])
def test_readers_refuse_a_manifest_they_do_not_know(layout, tmp_path, change, needle):
    manifest = convert(layout, tmp_path, shards=1, storage=Storage.of(JPEG, 20))
    (tmp_path / "manifest.json").write_text(json.dumps({**manifest, **change}))
    with pytest.raises(DataError, match=str(tmp_path)) as refused:
        source_of(tmp_path)
    assert needle in str(refused.value)


def test_the_first_format_is_still_read_as_original_pngs(layout, tmp_path):
    manifest = convert(layout, tmp_path, shards=1, storage=ORIGINAL)
    first = {k: v for k, v in manifest.items() if k not in ("encoding", "short_side", "quality", "seed")}
    (tmp_path / "manifest.json").write_text(json.dumps({**first, "format": FORMAT_PNG_ONLY}))
    assert source_of(tmp_path).storage == ORIGINAL


def test_an_unreadable_image_stops_the_conversion_unless_skipped(tmp_path):
    layout = write_synthetic(tmp_path / "d", 12, 16, seed=4, patients=5)
    bad = sorted((layout / "images").iterdir())[3]
    bad.write_bytes(bad.read_bytes()[:30])
    with pytest.raises(DataError, match=f"{bad.name}: cannot be read as an image"):
        convert(layout, tmp_path / "t", shards=1, storage=Storage.of(JPEG, 16), workers=2)
    manifest = convert(layout, tmp_path / "t", shards=1, storage=Storage.of(JPEG, 16), workers=2, skip_bad=True)
    assert sum(manifest["counts"].values()) == 11 and manifest["skipped"] == 1
    assert sum(s["records"] for split in manifest["shards"].values() for s in split) == 11


def _sigterm_ends_it(_) -> bool:
    return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


SLOW_START_S = 1.0


def _slow_start() -> None:
    """A worker's start as a loaded machine runs it: the pool is ended before it is done."""
    time.sleep(SLOW_START_S)
    _ended_by_sigterm()  # this module's name for it: the original, whatever the test patched


@pytest.mark.parametrize("start", ["at once", "slowly"])
@pytest.mark.timeout(60)  # what failed here hung for ever
def test_a_conversions_workers_end_on_sigterm_whatever_handler_their_parent_has(monkeypatch, start):
    """The pool ends its workers with SIGTERM after a failure. Under a handler that does not end a process
    (coverage.py's, under `make coverage`), a forked worker kept waiting on the task queue's lock for ever, and the
    pool with it; and so did one whose start came after the pool's SIGTERM (a loaded `make test`, 2026-12-05: the
    test ran into its 1,200 s timeout), which "slowly" makes certain: the pool ends while its workers start."""
    if start == "slowly":
        monkeypatch.setattr("chexnet.data.tfrecords._ended_by_sigterm", _slow_start)
    kept = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        with _encoder(2) as encode:
            if start == "at once":
                assert all(encode(_sigterm_ends_it, range(8)))
    finally:
        signal.signal(signal.SIGTERM, kept)


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
    with pytest.raises(ValueError, match="quality must be in 1..100"):
        Storage.of(JPEG, 256, 0)


def test_cli_converts_with_the_documented_flags(layout, tmp_path):
    out = tmp_path / "t"
    result = subprocess.run([sys.executable, "-m", "chexnet.data.tfrecords", "--source", str(layout), "--out",
                             str(out), "--shards", "2", "--encoding", "raw", "--short-side", "20", "--workers", "2"],
                            capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["encoding"], manifest["short_side"]) == ("raw", 20) and "test" in result.stderr
