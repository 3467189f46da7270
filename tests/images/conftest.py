"""The images, built for real with podman by docker/build.sh (what `make images` runs; tests/images/build.py),
which `make test` has built before the suites (`make builds`): here the build finds podman's layer cache.

The first build on a machine takes minutes (Horovod compiles from source); podman caches the layers, so later
sessions rebuild only what changed (the project's code: the last layer, seconds). Everything runs through the
containers.conf that docker/podman-setup.sh writes (runc, capped ulimits), named by CONTAINERS_CONF.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

import pytest

from tests.images import build

REPO = build.REPO
TRAINING_IMAGE = "localhost/dsportal-training:latest"
HUB_IMAGE = "localhost/dsportal-hub:latest"
BUILD_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Images:
    training: str
    hub: str


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """One podman command with the project's containers.conf; a failure shows podman's own words."""
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "CONTAINERS_CONF": build.CONTAINERS_CONF})
    if check and proc.returncode != 0:
        pytest.fail(f"podman {' '.join(args[:3])}... exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return proc


@pytest.fixture(scope="session")
def images(artifacts) -> Images:
    """Both images, built (or found up to date in podman's layer cache) by docker/build.sh."""
    if shutil.which("podman") is None and os.geteuid() != 0:
        pytest.fail("podman is not installed, and docker/build.sh can install it only as root: "
                    "run docker/podman-setup.sh as root (Debian 12), then the tests again")
    status, took, waited = build.wait(BUILD_TIMEOUT_S)
    output = build.LOG.read_text()
    if status != 0:
        pytest.fail(f"docker/build.sh exited {status} (whole log: {build.LOG}):\n{output[-5000:]}")
    if shutil.which("podman") is None:  # build.sh installs it (root, apt); never go on quietly without it
        pytest.fail("podman is not installed: run docker/podman-setup.sh as root (Debian 12), then the tests again")
    print(f"\nimages ready {took:.0f} s after the build started in the background ({waited:.0f} s waited here):\n"
          + "\n".join(line for line in output.splitlines() if line.startswith("==>")))
    for image in (TRAINING_IMAGE, HUB_IMAGE):
        assert podman("image", "exists", image, check=False).returncode == 0, f"{image} is missing after the build"
    return Images(training=TRAINING_IMAGE, hub=HUB_IMAGE)
