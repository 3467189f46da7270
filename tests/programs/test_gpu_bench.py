"""bench.gpu_torch's smoke run on the CPU, in the PyTorch program's own environment: the same code as on a GPU
(chexnet_torch's training step and DataLoader, the plain torchvision loop, the timed pairs, the saved record) at
tiny sizes and without targets. No test needs a GPU: where CUDA is hidden, --device cuda says so and exits 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

from portal.records.programs import registry

REPO = Path(__file__).resolve().parents[2]
SMOKE = ["--device", "cpu", "--image-size", "32", "--batch-size", "4", "--steps", "2", "--warmup", "1",
         "--pairs", "2", "--images", "24", "--source-size", "32", "--loader-workers", "1"]


def torch_python() -> str:
    """The PyTorch program's interpreter, beside this venv as the job scripts find it."""
    return registry().get("chexnet-torch").python(Path(sys.prefix))


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([torch_python(), "-m", "bench.gpu_torch", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})})


def test_the_gpu_benchmark_runs_on_a_cpu_and_saves_its_record(tmp_path):
    result = bench(*SMOKE, "--results", str(tmp_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "smoke run on the CPU: no targets" in result.stdout
    record = json.loads((tmp_path / "gpu_torch.json").read_text())
    data = record["data"]
    assert record["benchmark"] == "gpu_torch" and record["targets"] == [] and record["met"] is True
    assert data["smoke"] is True and data["versions"]["device"] == "cpu" and data["versions"]["gpu"] is None
    assert data["settings"]["image_size"] == 32 and data["settings"]["amp"] == "bf16"
    rows = {row["name"]: row for row in data["rows"]}
    assert list(rows) == ["program step", "plain torchvision", "program, fed", "input pipeline"]
    assert all(len(row["samples"]) == 2 and row["min"] > 0 for row in rows.values())
    assert len(data["pair_ratios"]) == 2


# Two steps from the same start, one through chexnet_torch.train.train_epoch, the other through the benchmark's
# program_step (which the GPU machine runs without train_epoch's scikit-learn and TensorBoard): the same weights.
SAME_STEP = """
import torch
from bench.gpu_torch import program_step
from chexnet_torch.loop import Precision, weighted_bce
from chexnet_torch.train import train_epoch
from chexnet_torch.vision import build_model

device = torch.device("cpu")
precision = Precision.choose("auto", "auto", device)
loss_fn = weighted_bce(torch.full((14,), 0.7), torch.full((14,), 0.3))
batches = [(torch.randn(4, 3, 32, 32), torch.randint(0, 2, (4, 14)).float()) for _ in range(2)]
weights = []
for way in ("start", "train_epoch", "program_step"):
    torch.manual_seed(0)
    model = precision.place(build_model("tinycnn"), device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    if way == "train_epoch":
        train_epoch(model, batches, optimizer, warmup, loss_fn, precision, device, None, 0, 4)
    elif way == "program_step":
        model.train()
        step = program_step(model, optimizer, warmup, loss_fn, precision, device)
        for images, labels in batches:
            step(images, labels)
    weights.append([p.detach().clone() for p in model.parameters()])
start, epoch, bench = weights
trained = any(not torch.equal(a, b) for a, b in zip(start, epoch, strict=True))
print("same" if trained and all(torch.equal(a, b) for a, b in zip(epoch, bench, strict=True)) else "different")
"""


def test_the_benchmarks_step_is_the_programs():
    result = subprocess.run([torch_python(), "-c", SAME_STEP], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "same", "bench.gpu_torch.program_step no longer does what train_epoch does"


def test_without_a_gpu_the_gpu_run_says_so():
    result = bench("--device", "cuda", env={"CUDA_VISIBLE_DEVICES": ""})  # no GPU, on any machine
    assert result.returncode == 2 and "no CUDA device here; --device cpu runs the smoke mode" in result.stderr
