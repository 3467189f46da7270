"""The image build the images tests wait for: docker/build.sh, started by their first test (in the background, at
the lowest CPU priority). `make test` builds the images before any suite (deploy/build-for-tests.sh), so here it
finds podman's layer cache and takes seconds. A plain `pytest tests` on a machine that never built them
would build them beside the suites, which time servers and training runs on the same 2 cores: run `make builds`
first.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "docker" / "build.sh"
LOG = REPO / "tests" / "artifacts" / "images-build.log"
CONTAINERS_CONF = os.environ.get("DSPORTAL_CONTAINERS_CONF", "/etc/dsportal/containers.conf")

_build: tuple[subprocess.Popen, float] | None = None


def start() -> None:
    """Start docker/build.sh in the background, once per session; its output goes to LOG."""
    global _build
    if _build is not None:
        return
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with LOG.open("w") as out:
        # Lowest CPU priority: the suites that run meanwhile time their own work; the build mostly waits anyway.
        proc = subprocess.Popen(["nice", "-n", "19", str(BUILD)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "DSPORTAL_CONTAINERS_CONF": CONTAINERS_CONF})
    _build = (proc, time.monotonic())


def wait(timeout: float) -> tuple[int, float, float]:
    """(exit status, seconds since the build started, seconds waited here for it)."""
    start()
    proc, started = _build
    waited_from = time.monotonic()
    try:
        status = proc.wait(timeout=max(1.0, timeout - (waited_from - started)))
    except subprocess.TimeoutExpired:
        proc.kill()
        status = proc.wait()
    return status, time.monotonic() - started, time.monotonic() - waited_from
