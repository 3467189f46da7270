"""Training jobs on this machine (portal.scheduler.local): alice's tiny job of each program runs to COMPLETED under
its launcher (horovodrun, torchrun) and bob cannot get it; a cancel ends its whole process group.

No box: the local scheduler needs the demo accounts, the shared venv and a data set, nothing of Slurm's. Its jobs
live under a cluster name and a state dir of their own (LOCAL_CLUSTER), so that their directories in alice's home
are this module's marks, removed after it, and never the Slurm test box's. (Until 2026-12-05 these ran on the Slurm
box's side, 38 to 58 s of its time, which is the session's.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from portal import jobs
from portal.config import PortalConfig, load
from portal.jobs.demo_data import ensure_demo_data
from portal.scheduler.local import session_alive
from tests.conftest import (
    BOX_SUBNET,
    CLUSTER,
    NODE_PREFIX,
    PORT_OFFSET,
    PROGRAMS,
    TEST_STATE,
    TINY_MODEL,
    box_settings,
    homes_marked,
    job_wait_s,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("demo_accounts")]  # alice and bob, and no box
LOCAL_CLUSTER = f"{CLUSTER}_local"
LOCAL_STATE = TEST_STATE.parent / f"{TEST_STATE.name}-local"
TINY = {"template": "chexnet", "epochs": 1, "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 4,
        "time_limit": "00:15:00", "model": TINY_MODEL, "gpus_per_node": 0}
JOB_WAIT_S = job_wait_s(TINY["time_limit"])  # submit to ended


@pytest.fixture(scope="module")
def local_cfg() -> Iterator[PortalConfig]:
    """A test box's settings with a state dir (the demo data set, made there) and a cluster name of their own; what
    an earlier, killed run left of them is removed first, what this one made after it."""
    with homes_marked(LOCAL_STATE, LOCAL_CLUSTER):
        os.chmod(LOCAL_STATE, 0o755)  # the jobs read the data set in it as alice
        # What its jobs write in a home (KERAS_HOME, ...) is under this cluster's marks. Nothing listens at its
        # ports: the local scheduler asks none. No MLflow server: the programs' tracking is tested in tests/programs.
        settings = {**box_settings(LOCAL_CLUSTER, LOCAL_STATE, PORT_OFFSET, NODE_PREFIX, BOX_SUBNET),
                    "mlflow_url": ""}
        (LOCAL_STATE / "settings.yaml").write_text(yaml.safe_dump(settings))
        cfg = load({"DSPORTAL_CONFIG": str(LOCAL_STATE / "settings.yaml")})
        ensure_demo_data(cfg)
        yield cfg
    shutil.rmtree(LOCAL_STATE, ignore_errors=True)  # after the marks: its ledger is in it until they are gone


@pytest.mark.parametrize("program", PROGRAMS)
def test_the_local_scheduler_runs_a_tiny_job_to_completed(local_cfg, program):
    started = time.monotonic()
    job = jobs.submit({**TINY, "template": program}, scheduler="local", user="alice", cfg=local_cfg)
    assert job.id.startswith("local-") and job.scheduler.name == "local"
    state = job.wait(timeout=JOB_WAIT_S, poll=2)
    print(f"\nlocal 1-worker job: submit to {state} in {time.monotonic() - started:.1f} s")
    assert state == "COMPLETED", job.logs(tail=40)
    assert "local job on" in job.logs() and job.metrics().images_per_sec
    assert Path(job.job_dir).parent.name == LOCAL_CLUSTER
    assert job.id in [j.id for j in jobs.jobs(user="alice", cfg=local_cfg)]
    with pytest.raises(jobs.JobNotFound):
        jobs.get(job.id, user="bob", cfg=local_cfg)


def test_a_local_job_is_cancelled_with_its_whole_process_group(local_cfg):
    job = jobs.submit({**TINY, "epochs": 50}, scheduler="local", user="alice", cfg=local_cfg)
    try:
        wait_for(lambda: job.state == "RUNNING", 30, what="the local job to run")
        pid = int(Path(job.job_dir, "pid").read_text())
        wait_for(lambda: "chexnet.train" in subprocess.run(["ps", "-o", "args=", "--sid", str(pid)],
                                                           capture_output=True, text=True).stdout,
                 60, what="horovodrun to start the worker")
    except BaseException:  # its 50 epochs would train on through the rest of the suites (make test, 2026-12-03)
        job.cancel()
        raise
    # This job's processes anywhere, even outside its session: the trainer's arguments name its directory.
    # Alice's other processes are other tests' and her boxes' (a CI run saw another job's trainer here).
    def its_processes() -> list[str]:
        listed = subprocess.run(["ps", "-ww", "-u", "alice", "-o", "stat=,args="], capture_output=True, text=True)
        return [line for line in listed.stdout.splitlines()
                if str(job.job_dir) in line and not line.lstrip().startswith("Z")]

    assert any("chexnet.train" in line for line in its_processes())
    job.cancel()
    assert job.state == "CANCELLED"
    assert not session_alive(pid)
    assert its_processes() == []
