"""chexnet_torch for real, in its own environment (/opt/dsportal/torch-venv, `make install`): two processes under
torchrun (gloo on CPUs), meeting as the job scripts make them meet (a FileStore in a directory only the owner can
enter; torchrun's agent listens on no port), learn the synthetic set's signal and write what every program writes (the
per-epoch record and its `dsportal.epoch` lines, chexnet's TensorBoard tags, layout and HPARAMS, the model card
with torch's versions); a run killed in the middle of an epoch and run again with --resume ends with every epoch
once and the weights of a run never killed; the project's record formats read without TensorFlow; a bad flag
fails in one line. Sized for 2 CPU cores: 64x64 images, tinycnn, a few epochs, no DataLoader workers (the
weights of two runs compare exactly only when the augmentation's random numbers come from the restored RNG).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from chexnet_torch.rendezvous import ENV
from programkit.schemas import EPOCH_RECORD, check
from programkit.tags import AUROC_TAGS, TAG_AUROC_MEAN, TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_LR, TAG_THROUGHPUT
from programkit.tblog import RECORD_LINE_PREFIX
from tests.children import LIMIT_S, run_child, start_in_own_session
from tests.conftest import REPO, wait_for
from tests.listeners import Sampler, pids_matching
from tests.programs.helpers import torch_python

SIZE, EPOCHS = 64, 3  # SIZE: the images of conftest.py's dataset


def command(tmp: Path, data: Path, *flags: str, processes: int = 2) -> list[str]:
    """The program's command line: under torchrun, with the job scripts' rendezvous (torchrun-rendezvous.sh), for
    several processes; their environment is `environment(tmp)`."""
    python = torch_python()
    meet = tmp / ".rendezvous"
    launcher = [str(python), "-m"]
    if processes > 1:
        launcher = [str(python.with_name("torchrun")), "--nnodes=1", f"--nproc-per-node={processes}",
                    "--rdzv-backend=c10d", "--rdzv-conf=store_type=file", f"--rdzv-endpoint={meet}/run.store",
                    f"--rdzv-id=run-{time.monotonic_ns()}", "--max-restarts=0", "-m"]
    return [*launcher, "chexnet_torch.train", "--data-dir", str(data), "--logdir", str(tmp / "logs"),
            "--checkpoint-dir", str(tmp / "checkpoints"), "--batch-size", "16", "--image-size", str(SIZE),
            "--model", "tinycnn", "--loader-workers", "0", "--epochs", str(EPOCHS), *flags]


def environment(tmp: Path) -> dict[str, str]:
    meet = tmp / ".rendezvous"
    meet.mkdir(mode=0o700, exist_ok=True)
    return {**os.environ, "OMP_NUM_THREADS": "1", ENV: str(meet), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def run(tmp: Path, data: Path, *flags: str, processes: int = 2) -> subprocess.CompletedProcess:
    return run_child(command(tmp, data, *flags, processes=processes), cwd=tmp, env=environment(tmp))


def records(checkpoints: Path) -> list[dict]:
    return [json.loads(line) for line in (checkpoints / "epochs.jsonl").read_text().splitlines()]


def steps(logdir: Path) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for path in sorted(logdir.glob("*tfevents*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                found.setdefault(value.tag, []).append(event.step)
    return found


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, dataset) -> tuple[Path, subprocess.CompletedProcess, dict]:
    """The run, and what its processes listened on while it ran (by command name)."""
    tmp = tmp_path_factory.mktemp("two")
    with Sampler(lambda: pids_matching([str(tmp / ".rendezvous")]) + pids_matching(["chexnet_torch.train",
                                                                                  str(tmp / "logs")])) as sampled:
        done = run(tmp, dataset)
    return tmp, done, sampled.seen


def test_two_processes_meet_in_their_directory_and_torchrun_listens_on_nothing(two_processes):
    """torchrun's c10d rendezvous on a TCPStore let another user's process replace its state with a pickle that
    every agent ran (docs/security.md). Here the agent holds no TCP listener at all, and the store is a file in a
    directory only the owner can enter. The ranks' gloo transport still listens (docs/security.md says what
    protects it and what does not)."""
    tmp, done, seen = two_processes
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torchrun" in seen and len(seen) >= 2, seen  # the agent and its ranks were seen running
    assert seen["torchrun"] == set(), seen
    stores = sorted(path.name for path in (tmp / ".rendezvous").iterdir())
    assert any(name.endswith(".store") for name in stores), stores


def test_two_processes_learn_and_write_the_record_the_tags_and_the_card(two_processes):
    tmp, done, _ = two_processes
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 of 2 on " in done.stderr and "rank 1 of 2 on " in done.stderr
    lines = records(tmp / "checkpoints")
    assert [line["epoch"] for line in lines] == list(range(1, EPOCHS + 1))
    for line in lines:
        check(EPOCH_RECORD, line, "epochs.jsonl")
        assert line["program"] == "chexnet-torch" and line["images_per_sec"] > 0 and line["seconds"] > 0
        assert line["checkpoint"] == f"ckpt-{line['epoch']}.pt"
    printed = [json.loads(line[len(RECORD_LINE_PREFIX):]) for line in done.stdout.splitlines()
               if line.startswith(RECORD_LINE_PREFIX)]
    assert printed == lines  # the log's copy is the record, once (rank 0)
    assert lines[-1]["scalars"][TAG_AUROC_MEAN] > 0.8, lines[-1]
    found = steps(tmp / "logs")
    for tag in (TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_LR, TAG_AUROC_MEAN):
        assert found[tag] == list(range(1, EPOCHS + 1)), (tag, found.get(tag))
    assert set(AUROC_TAGS) & set(found) and found[TAG_THROUGHPUT]
    plugins = {value.metadata.plugin_data.plugin_name for path in (tmp / "logs").glob("*tfevents*")
               for event in EventFileLoader(str(path)).Load() for value in event.summary.value}
    assert {"hparams", "custom_scalars"} <= plugins, plugins
    card = json.loads((tmp / "checkpoints" / "model_card.json").read_text())
    assert card["spec"]["program"] == "chexnet-torch" and card["epochs_done"] == EPOCHS
    assert card["environment"]["frameworks"]["PyTorch"].startswith("2.")
    assert card["checkpoint"]["files"][0]["file"] == "ckpt-3.pt"
    assert card["data"]["counts"]["train"] > 0
    assert card["auroc"]["mean"] == pytest.approx(lines[-1]["scalars"][TAG_AUROC_MEAN])


def test_a_run_killed_mid_epoch_resumes_with_every_epoch_once_and_the_same_weights(two_processes, dataset,
                                                                                    tmp_path):
    import_torch = [str(torch_python()), "-c", "import sys, torch; a, b = (torch.load(p, weights_only=False)['model']"
                    " for p in sys.argv[1:]); print(all(torch.equal(a[k], b[k]) for k in a))"]
    whole, _, _ = two_processes
    child = start_in_own_session(command(tmp_path, dataset), cwd=tmp_path, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, env=environment(tmp_path))
    deadline = time.monotonic() + LIMIT_S
    for line in child.stdout:  # killed in epoch 2: the moment epoch 1's checkpoint is whole (written, then renamed)
        if line.startswith(f'{RECORD_LINE_PREFIX}{{"epoch": 1,'):
            wait_for(lambda: (tmp_path / "checkpoints" / "ckpt-1.pt").exists(), LIMIT_S, interval=0.02,
                     what="epoch 1's checkpoint")  # a fixed 0.3 s once let the run finish first, on a loaded machine
            break
        assert time.monotonic() < deadline
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    assert (tmp_path / "checkpoints" / "ckpt-1.pt").exists() and not (tmp_path / "checkpoints" / "ckpt-3.pt").exists()
    resumed = run(tmp_path, dataset, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "epochs done, continuing with epoch" in resumed.stderr
    final = {line["epoch"]: line for line in records(tmp_path / "checkpoints")}  # the last line of an epoch wins
    assert sorted(final) == list(range(1, EPOCHS + 1))
    found = steps(tmp_path / "logs")
    for tag in (TAG_LOSS_TRAIN, TAG_LOSS_VAL, TAG_LR, TAG_AUROC_MEAN):
        assert found[tag] == list(range(1, EPOCHS + 1)), (tag, found.get(tag))
    points = found[TAG_THROUGHPUT]
    assert len(points) == len(set(points)), points
    same = subprocess.run([*import_torch, str(whole / "checkpoints" / "ckpt-3.pt"),
                           str(tmp_path / "checkpoints" / "ckpt-3.pt")], capture_output=True, text=True, timeout=60)
    assert same.stdout.strip() == "True", same.stdout + same.stderr


@pytest.mark.parametrize("encoding", ["jpeg", "raw"])
def test_the_projects_record_formats_train_without_tensorflow(dataset, tmp_path, encoding):
    records_dir = tmp_path / "records"
    subprocess.run([sys.executable, "-m", "chexnet.data.tfrecords", "--source", str(dataset), "--out",
                    str(records_dir), "--shards", "2", "--encoding", encoding, "--short-side", str(SIZE),
                    "--workers", "1"], cwd=REPO, check=True, capture_output=True, timeout=300)
    done = run(tmp_path, records_dir, "--epochs", "1", processes=1)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tensorflow" not in done.stderr.lower()
    (line,) = records(tmp_path / "checkpoints")
    assert line["scalars"][TAG_AUROC_MEAN] is not None


@pytest.mark.parametrize(("flags", "said"), [
    (("--amp", "fp8"), "--amp must be one of auto, off, bf16, fp16"),
    (("--batch-size", "0"), "--batch-size"),
    (("--model", "vit"), "--model must be one of"),
])
def test_bad_arguments_fail_in_one_line_with_exit_2(dataset, tmp_path, flags, said):
    done = run(tmp_path, dataset, *flags, processes=1)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("chexnet_torch.train: error: ") and said in line, line
