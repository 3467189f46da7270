"""The box on the other Slurm releases the portal supports (docs/admin-guide.md, "Slurm versions"): a test box per
release, beside the Slurm test box (22.05, Debian 12's packages) and the Kubernetes one, each with Slurm built from
Debian's source archive (deploy/slurm/build-slurm.sh; `make test` builds it first, `make builds`).

DSPORTAL_TEST_SLURM_RELEASES (default "24.11") names the releases; 26.05 needs its build, which Debian's archive
cannot give on every machine (docs/testing.md). Each box has its own state dir, ports, nodes, subnet and cluster
name (<the test cluster>_slurm<release>, whose marks in the users' homes its cleanup removes, as the Slurm test
box's are), and settings of its own in a file that the box, its hub, its dashboard and its jobs read.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from portal.config import PortalConfig, load
from tests.conftest import (
    ARTIFACTS,
    CLUSTER,
    PORT_OFFSET,
    TEST_STATE,
    Hub,
    box,
    box_settings,
    homes_marked,
    remove_session_dirs,
)
from tests.users_boxes import release_ledger, release_state

RELEASES = tuple(os.environ.get("DSPORTAL_TEST_SLURM_RELEASES", "24.11").replace(",", " ").split())
# Per release: its ports' offset beside the test box's, its nodes' prefix and its part of 198.18.0.0/24.
PLACES = {"24.11": (300, "snode", "198.18.0.64/27"), "26.05": (400, "unode", "198.18.0.96/27")}
BUILD_WAIT_S = 3600  # a release's build beside the suites: about 250 CPU-s, at the lowest priority


@dataclass(frozen=True)
class ReleaseBox:
    release: str
    settings: Path  # its settings file (DSPORTAL_CONFIG)
    cfg: PortalConfig
    hub: Hub

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.cfg.box_node_names()

    def slurm_env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.cfg.slurm_conf_path)}

    def box(self, *args: str, check: bool = True):
        return box(*args, check=check, settings=self.settings)


def release_settings(release: str) -> tuple[Path, dict[str, object]]:
    offset, prefix, subnet = PLACES[release]
    state = release_state(TEST_STATE, release)
    cluster = f"{CLUSTER}_slurm{release.replace('.', '')}"
    settings = box_settings(cluster, state, PORT_OFFSET + offset, prefix, subnet)
    settings["slurm_bin_dir"] = f"/opt/dsportal/slurm/{release}/bin"
    settings["mlflow_url"] = ""  # MLflow is the same on every release: the main test box's journeys test it
    settings["prometheus_url"] = ""  # so is Prometheus
    return state, settings


def wait_for_build(release: str, built: Path) -> None:
    """`make test` builds the other releases beside the suites (deploy/build-for-tests.sh --install): wait for the
    build of `release` while it runs (its pid file), up to BUILD_WAIT_S; fail naming its log if it failed, or
    saying how to build it when none ran."""
    log, status, pid = (ARTIFACTS / f"build-slurm-{release}.{end}" for end in ("log", "status", "pid"))
    started = time.monotonic()
    while not built.exists() and not status.exists() and build_running(pid):
        if time.monotonic() - started > BUILD_WAIT_S:
            pytest.fail(f"Slurm {release}'s build still runs after {BUILD_WAIT_S} s (log: {log})", pytrace=False)
        time.sleep(5)
    if time.monotonic() - started > 5:
        print(f"\nwaited {time.monotonic() - started:.0f} s for Slurm {release}'s build beside the suites")
    if built.exists():
        return
    exit_status = status.read_text().strip() if status.exists() else "0"
    if exit_status != "0":
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
        pytest.fail(f"Slurm {release}'s build failed (exit {exit_status}; {log}):\n{tail}", pytrace=False)
    pytest.fail(f"Slurm {release} is not built ({built} is missing): `make builds` or "
                f"`make slurm-build SLURM={release}` builds it", pytrace=False)


def build_running(pid_file: Path) -> bool:
    """The process in the pid file is alive and is build-for-tests.sh's (its subshell): never a reused pid."""
    try:
        cmdline = Path(f"/proc/{int(pid_file.read_text())}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return b"build-for-tests.sh" in cmdline


@pytest.fixture(scope="module", params=RELEASES)
def release_box(request) -> ReleaseBox:
    """The box on `release`, from nothing; down afterwards, its marks in the homes removed."""
    release = request.param
    if release not in PLACES:
        pytest.fail(f"DSPORTAL_TEST_SLURM_RELEASES names {release}: the releases with a test box are {sorted(PLACES)}")
    state, settings = release_settings(release)
    wait_for_build(release, Path(str(settings["slurm_bin_dir"])).parent / ".built")
    settings_file = state.with_name(f"{state.name}.{os.getpid()}.yaml")
    settings_file.write_text("".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items()))
    os.chmod(settings_file, 0o644)  # its jobs read it as their users
    atexit.register(settings_file.unlink, missing_ok=True)
    box("down", check=False, settings=settings_file)
    with homes_marked(state, str(settings["cluster_name"]), release_ledger(state)):
        started = time.monotonic()
        up = box("up", check=False, settings=settings_file)
        if up.returncode != 0:
            pytest.fail(f"the box on Slurm {release} did not start:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
        print(f"\nthe box on Slurm {release} up in {time.monotonic() - started:.1f} s")
        cfg = load({"DSPORTAL_CONFIG": str(settings_file)})
        yield ReleaseBox(release, settings_file, cfg, Hub(cfg.hub_url))
        box("down", check=False, settings=settings_file)
        remove_session_dirs(str(settings["box_node_prefix"]))
    settings_file.unlink(missing_ok=True)
