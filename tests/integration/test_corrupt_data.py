"""A corrupt TFRecord shard during training is skipped and counted, not a crash (issue 11, item 8).

Two Horovod workers train the tiny model on tiny JPEG records in which one training shard has flipped bytes near its
end (its CRC fails there: the rest of the shard is lost, under the 10 % that would stop training) and one validation
record holds an image that does not decode. Training finishes every epoch; the log names the files; TensorBoard
holds data/skipped_records for every epoch.
A set with nothing readable stops at once with exit 2 and a line naming the shards.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from chexnet.callbacks import TAG_SKIPPED
from programkit.data.sources import source_of
from tests.conftest import REPO
from tests.integration.helpers import horovodrun_installed, scalars, train  # noqa: F401  (autouse)

PYTHON = sys.executable
IMAGES, SIZE, SHORT_SIDE, SHARDS = 240, 40, 36, 4
EPOCHS = 2


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corrupt")
    subprocess.run([PYTHON, "-m", "programkit.data.synthetic", "--out", str(root / "png"), "--images", str(IMAGES),
                    "--size", str(SIZE), "--seed", "3"], cwd=REPO, check=True, capture_output=True, timeout=300)
    subprocess.run([PYTHON, "-m", "chexnet.data.tfrecords", "--source", str(root / "png"), "--out",
                    str(root / "rec"), "--shards", str(SHARDS), "--short-side", str(SHORT_SIDE), "--workers", "2"],
                   cwd=REPO, check=True, capture_output=True, timeout=300)
    return root / "rec"


def flip_bytes_at(path: Path, where: float) -> None:
    data = bytearray(path.read_bytes())
    at = int(len(data) * where)
    data[at:at + 16] = bytes(b ^ 0x5A for b in data[at:at + 16])
    path.write_bytes(bytes(data))


def undecodable_image_in(path: Path, index: int) -> None:
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    example = tf.train.Example.FromString(serialized[index])
    example.features.feature["image"].bytes_list.value[0] = b"\xff\xd8\xff\xe0" + b"\x00garbage" * 20
    serialized[index] = example.SerializeToString()
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in serialized:
            writer.write(record)


def test_training_skips_and_counts_a_corrupt_shard_and_a_bad_record(records, tmp_path):
    source = source_of(records)
    damaged = Path(source.shards["train"][1][0])
    flip_bytes_at(damaged, 0.9)
    bad_val = Path(source.shards["val"][0][0])
    undecodable_image_in(bad_val, 0)
    run = train(tmp_path, "--epochs", str(EPOCHS), "--image-size", "32", "--progress", "epoch", data=records)
    assert run.proc.returncode == 0, run.output[-3000:]
    assert "Traceback" not in run.output
    lines = [line for line in run.output.splitlines() if "skipped unreadable records (all workers)" in line]
    assert [re.search(r"epoch (\d+):", line).group(1) for line in lines] == [str(e) for e in range(1, EPOCHS + 1)]
    for line in lines:  # validation reads its split once per epoch: exact
        assert f"1 of {source.count('val')} val records skipped" in line
        assert f"{bad_val.name} 1 records that do not parse or decode" in line
    # The training stream reads ahead (shuffle buffer): its first epoch has certainly met the damage.
    assert f"{damaged.name} damaged (read stopped at the damage)" in lines[0]
    skipped = scalars(run.logdir)[TAG_SKIPPED]
    assert [step for step, _ in skipped] == list(range(1, EPOCHS + 1))
    # Epoch 1: the records lost in every pass its read-ahead made, and the bad validation record; then at least that.
    assert skipped[0][1] >= 2 and all(value >= 1 for _, value in skipped), skipped
    assert f"Epoch {EPOCHS}/{EPOCHS}" in run.output


def test_nothing_readable_stops_with_a_line_naming_the_shards(records, tmp_path):
    for path, _ in source_of(records).shards["train"]:
        Path(path).write_bytes(b"\x07" * 64)
    run = train(tmp_path, "--epochs", "1", "--image-size", "32", "--progress", "epoch", workers=1, data=records)
    assert run.proc.returncode == 2, run.output[-3000:]
    assert "Traceback" not in run.output
    errors = [line for line in run.output.splitlines() if line.startswith("chexnet.train: error:")]
    assert len(errors) == 1 and "no readable training record" in errors[0]
    assert "train-00000-of-00004.tfrecord damaged" in errors[0]
