"""The images run what they are for: a 2-worker Horovod training of CheXNet inside the training image, the hub
image answering its REST API on a published port, and the pinned versions and template notebooks in place.

Sized for 2 CPU cores: a 320-image synthetic set at 64x64, batch 8, 1 epoch (as tests/integration/test_training.py,
smaller). The data set, the logs and the checkpoints are written by the container's notebook user into a host
directory mounted at /work; the event files are read with the image's own TensorBoard.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from pathlib import Path

import pytest
import requests

from tests.conftest import TINY_MODEL, TRAINER_SPEEDUP
from tests.images.conftest import BUILD_TIMEOUT_S, REPO, podman

# The images' fixture waits for their build (seconds in `make test`, which builds them first; up to BUILD_TIMEOUT_S in
# a plain run on a machine without them): the session's guard against a hung test is that much longer here.
pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S + 1200)

VENV = "/opt/dsportal/venv"
TORCH_VENV = "/opt/dsportal/torch-venv"  # the PyTorch program's (chexnet_torch/program.py: VENV)
WORKERS = 2
IMAGES = 320
IMAGE_SIZE = 64
BATCH = 8
TRAIN_TIMEOUT_S = 900
HUB_START_TIMEOUT_S = 60
THROUGHPUT_TAG = "throughput/images_per_sec"

# Run inside the image after training: the TensorBoard tags that rank 0 wrote, read with the image's TensorBoard.
READ_TAGS = """
import json, sys
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util
acc = event_accumulator.EventAccumulator(sys.argv[1], size_guidance={event_accumulator.TENSORS: 0})
acc.Reload()
tags = [tag for tag in acc.Tags()[event_accumulator.TENSORS] if not tag.startswith(("_hparams_", "custom_scalars"))]
print(json.dumps({tag: [float(tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)] for tag in tags}))
"""

VERSIONS = """
import json, os, sys, importlib.metadata as md
names = ["tensorflow", "tensorflow-cpu", "horovod", "jupyterlab", "jupyter-server-proxy", "tensorboard",
         "jupyterhub", "jupyterhub-kubespawner", "kubernetes", "dsportal"]
versions = {}
for name in names:
    try:
        versions[name] = md.version(name)
    except md.PackageNotFoundError:
        pass
notebooks = os.path.join(sys.prefix, "share", "dsportal", "notebooks")
editable = any(f.name == "direct_url.json" and "editable" in f.read_text() for f in md.distribution("dsportal").files)
overrides = os.path.join(sys.prefix, "share", "jupyter", "lab", "settings", "overrides.d", "dsportal.json")
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "prefix": sys.prefix, "versions": versions,
                  "notebooks": sorted(os.listdir(notebooks)) if os.path.isdir(notebooks) else None,
                  "editable": editable,
                  "lab_overrides": open(overrides).read() if os.path.exists(overrides) else None}))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_python(image: str, code: str, venv: str = VENV) -> dict:
    """Run code with the image's venv Python (no network); its last line of output is JSON."""
    proc = podman("run", "--rm", "--network=none", "--entrypoint", f"{venv}/bin/python", image, "-c", code)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def training_run(images, tmp_path_factory) -> tuple[Path, str, float]:
    """Synthetic data and a `horovodrun -np 2` training, both inside the training image, as its notebook user. The
    image's stack is under test, not the model: tinycnn, as every job that tests the portal (DenseNet-121 took
    223 s of the Kubernetes side's time here in a loaded `make test`; its own tests are tests/integration)."""
    work = tmp_path_factory.mktemp("image-training")
    work.chmod(0o777)  # the container's user (uid 1000) writes here
    script = (
        f"set -e; python -m programkit.data.synthetic --out /work/data --images {IMAGES} --size {IMAGE_SIZE} --seed 3;"
        f" horovodrun -np {WORKERS} -H localhost:{WORKERS} python -m chexnet.train --data-dir /work/data"
        f" --logdir /work/logs --checkpoint-dir /work/checkpoints --epochs 1 --batch-size {BATCH}"
        f" --image-size {IMAGE_SIZE} --model {TINY_MODEL} --pipeline parallel --progress epoch"
        f" {' '.join(TRAINER_SPEEDUP)}"
    )
    started = time.monotonic()
    proc = podman("run", "--rm", "--network=none", "--shm-size=1g", "-e", "TF_CPP_MIN_LOG_LEVEL=2",
                  "-v", f"{work}:/work", images.training, "bash", "-c", script,
                  timeout=TRAIN_TIMEOUT_S, check=False)
    seconds = time.monotonic() - started
    output = proc.stdout + proc.stderr
    print(f"2-worker training in the image: rc={proc.returncode} in {seconds:.0f} s\n{output[-3000:]}")
    assert proc.returncode == 0, f"training in {images.training} failed:\n{output[-4000:]}"
    return work, output, seconds


def test_two_worker_horovod_training_runs_in_the_training_image(training_run, images):
    work, output, _ = training_run
    assert "Traceback" not in output
    assert list((work / "checkpoints").glob("ckpt-1*")), sorted(p.name for p in work.rglob("*"))[:50]
    proc = podman("run", "--rm", "--network=none", "-v", f"{work}:/work", "--entrypoint", f"{VENV}/bin/python",
                  images.training, "-c", READ_TAGS, "/work/logs")
    tags = json.loads(proc.stdout.strip().splitlines()[-1])
    rates = tags.get(THROUGHPUT_TAG)
    assert rates, f"no {THROUGHPUT_TAG} in the event files under {work / 'logs'}; tags: {sorted(tags)}"
    assert all(0 < rate < 10_000 for rate in rates), rates


def test_hub_image_answers_its_rest_api(images):
    port = free_port()
    name = f"dsportal-hub-test-{uuid.uuid4().hex[:8]}"
    podman("run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8000", images.hub)
    try:
        deadline = time.monotonic() + HUB_START_TIMEOUT_S
        answer, last_error = None, "no answer yet"
        while time.monotonic() < deadline and answer is None:
            try:  # any transport error (refused, reset, a read timeout) or a body not JSON yet: ask again
                response = requests.get(f"http://127.0.0.1:{port}/hub/api/", timeout=5)
                if response.status_code == 200:
                    answer = response.json()
                else:  # the proxy answers 503 until the hub behind it does
                    last_error = f"HTTP {response.status_code}"
            except requests.RequestException as err:
                last_error = str(err)
            if answer is None:
                time.sleep(1)
        logs = podman("logs", name, check=False)
        assert answer is not None, (f"the hub did not answer /hub/api/ within {HUB_START_TIMEOUT_S} s ({last_error});"
                                    f" its log:\n{(logs.stdout + logs.stderr)[-4000:]}")
        assert answer.get("version") == "6.1.1", answer
    finally:
        podman("rm", "-f", name, check=False)
    assert podman("container", "exists", name, check=False).returncode != 0, f"{name} was not removed"


def test_training_image_carries_the_pinned_stack_and_the_notebooks(images):
    found = run_python(images.training, VERSIONS)
    assert found["python"] == "3.11" and found["prefix"] == VENV, found
    versions = found["versions"]
    assert versions.get("tensorflow-cpu", versions.get("tensorflow")) == "2.15.1", versions
    assert versions.get("horovod") == "0.28.1", versions
    for name in ("jupyterlab", "jupyter-server-proxy", "tensorboard", "dsportal"):
        assert name in versions, f"{name} is not installed in {images.training}: {versions}"
    assert found["editable"] is False, "dsportal must be installed from a copy, not as an editable install"
    expected = sorted(path.name for path in (REPO / "notebooks").glob("*.ipynb"))
    assert expected and found["notebooks"] == expected, found["notebooks"]
    # JupyterLab's setting defaults (no news prompt), from setup.py's data_files.
    assert found["lab_overrides"] == (REPO / "deploy" / "jupyterlab" / "dsportal.json").read_text()


def test_training_image_carries_the_pytorch_programs_own_stack(images):
    """The PyTorch program's venv beside TensorFlow's (the path its job scripts name): torch and torchvision of
    deploy/local/torch-requirements.txt, its own numpy, no TensorFlow, the same dsportal, its program importable."""
    code = "import chexnet_torch.train, programkit.sweep\n" + VERSIONS.replace(
        '"dsportal"]', '"dsportal", "torch", "torchvision", "numpy", "optuna"]')
    found = run_python(images.training, code, venv=TORCH_VENV)
    versions = found["versions"]
    assert found["prefix"] == TORCH_VENV and found["python"] == "3.11", found
    pinned = dict(line.split("==") for line in (REPO / "deploy" / "local" / "torch-requirements.txt").read_text()
                  .splitlines() if "==" in line and not line.startswith("#"))
    assert versions["torch"].partition("+")[0] == pinned["torch"] and versions["optuna"] == pinned["optuna"], versions
    assert versions["torchvision"] == "0.28.0" and versions["numpy"].startswith("2."), versions
    assert "tensorflow" not in versions and "tensorflow-cpu" not in versions and "horovod" not in versions, versions
    assert versions["dsportal"] == run_python(images.training, VERSIONS)["versions"]["dsportal"]


def test_hub_image_carries_the_hub_side(images):
    found = run_python(images.hub, VERSIONS)
    assert found["python"] == "3.11" and found["prefix"] == VENV, found
    versions = found["versions"]
    assert versions.get("jupyterhub") == "6.1.1", versions
    assert versions.get("jupyterhub-kubespawner") == "7.1.0", versions
    assert versions.get("kubernetes") == "37.0.2", versions
    assert "tensorflow" not in versions and "tensorflow-cpu" not in versions, versions
    assert found["editable"] is False


@pytest.mark.parametrize("image", ["training", "hub"])
def test_no_build_secret_is_left_in_the_image(images, image):
    # The CA bundle reaches pip only as a build secret: no PIP_CERT in the image's settings, no file left behind.
    config = json.loads(podman("image", "inspect", getattr(images, image)).stdout)[0]["Config"]
    assert not [env for env in config.get("Env", []) if env.startswith(("PIP_CERT=", "REQUESTS_CA_BUNDLE="))]
    proc = podman("run", "--rm", "--network=none", "--entrypoint", "/bin/sh", getattr(images, image), "-c",
                  "ls /run/secrets 2>/dev/null; ls /tmp")
    assert "ca-bundle" not in proc.stdout and "dsportal" not in proc.stdout, proc.stdout
