"""A hostile user's home against the real dashboard (root, behind the test box's hub): broken job records, a
forged `portal` package and sitecustomize files beside the metrics helper, another user's Slurm job named by id,
and logs and event files that are no files (FIFOs, links to endless devices). Nothing breaks a page (the admin's
included), nothing is attributed to another user, another user's job answers exactly as a job that does not
exist, and hostile files cost their owner a bounded read and nobody else anything."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from portal.runas import RUNUSER
from tests.answers import masked
from tests.conftest import as_user, end_job, job_dir_of, jobs_of, slurm, wait_for
from tests.integration.helpers import PORTAL, browser, readers_of, token_session
from tests.special_files import device_link, fifo

pytestmark = pytest.mark.integration
# The hostile home is bob's: the files planted in it (a `portal` package and sitecustomize.py beside where a
# Python started in the home looks, usercustomize.py in his user site) reach every Python he starts while the
# test runs, so they go in the home of the demo user with nothing of his own running beside the tests (alice's
# server, jobs and sweeps of a user's box run on untouched). A file of his own at any of those places is never
# overwritten: the test then fails, naming it. Everything planted is removed again, and only that.
HOSTILE, OTHER = "bob", "alice"
LOCAL_ID = "local-20261122T101010-abcdef"  # a job of the local scheduler: its state is its exit_status file
FORGED = '{"images_per_sec": 1e9, "best_mean_auroc": 1.0, "epochs_done": 999}'
SITE = Path(".local") / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
PLANTED = {Path("portal") / "__init__.py": "", Path("portal") / "metrics.py": f"print({FORGED!r})\n",
           Path("sitecustomize.py"): f"print({FORGED!r}); raise SystemExit(0)\n",
           SITE / "sitecustomize.py": f"print({FORGED!r}); raise SystemExit(0)\n",
           SITE / "usercustomize.py": f"print({FORGED!r}); raise SystemExit(0)\n"}


def write_events(logdir: Path, images_per_sec: float) -> None:
    """A TensorBoard event file with the throughput tag, as the training's rank 0 writes it."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(logdir))
    value = summary_pb2.Summary.Value(tag="throughput/images_per_sec", simple_value=images_per_sec)
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=1, summary=summary_pb2.Summary(value=[value])))
    writer.close()


def job_dir(job_id: str, record: str | dict) -> Path:
    """A job directory of the hostile user's in the test box's own ~/jobs/<cluster>/ (a mark of the test box)."""
    path = job_dir_of(HOSTILE, job_id)
    path.mkdir(parents=True, exist_ok=True)
    (path / "job.json").write_text(record if isinstance(record, str) else json.dumps(record))
    (path / "exit_status").write_text("0\n")
    return path


@pytest.fixture(scope="module")
def hostile_home(cluster):
    """bob's home as a hostile bob leaves it; what was planted is removed afterwards (only that)."""
    home = Path(pwd.getpwnam(HOSTILE).pw_dir)  # not at import: on a new machine the box makes bob
    found = [str(home / path) for path in (*PLANTED, Path("portal")) if os.path.lexists(home / path)]
    assert not found, f"{HOSTILE}'s own files are where this test plants its own; they are left alone: {found}"
    made_dirs = [home / parent for path in PLANTED for parent in reversed(path.parents)
                 if str(parent) != "." and not (home / parent).exists()]
    for path, text in PLANTED.items():
        as_user(HOSTILE, "mkdir", "-p", "--", str((home / path).parent))
        subprocess.run([RUNUSER, "-u", HOSTILE, "--", "/bin/sh", "-c", 'cat > "$1"', "sh", str(home / path)],
                       input=text, text=True, check=True, cwd="/")
    as_user(HOSTILE, "mkdir", "-p", "-m", "700", "--", str(job_dir_of(HOSTILE, "")))  # the test box's, as his
    good = {"id": LOCAL_ID, "scheduler": "local", "user": HOSTILE, "spec": {"epochs": 1, "data_dir": "/data"},
            "submitted_at": "2026-11-22T10:10:10+00:00", "job_dir": str(job_dir_of(HOSTILE, LOCAL_ID))}
    write_events(job_dir(LOCAL_ID, good) / "tensorboard", 12.5)
    job_dir("7001", "[1, 2]")
    job_dir("7002", {**good, "id": "7002", "scheduler": "slurm", "user": OTHER,
                     "job_dir": str(job_dir_of(HOSTILE, "7002"))})
    job_dir("0002", {**good, "id": "0002", "scheduler": "slurm", "job_dir": str(job_dir_of(HOSTILE, "0002"))})
    subprocess.run(["chown", "-R", "-h", f"{HOSTILE}:users", str(job_dir_of(HOSTILE, ""))], check=True)
    try:
        yield home
    finally:
        for path in PLANTED:
            (home / path).unlink(missing_ok=True)
        for parent in sorted({*made_dirs, home / "portal"}, key=lambda p: -len(p.parts)):
            if parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()
        for job_id in ("7001", "7002", "0002", LOCAL_ID):
            shutil.rmtree(job_dir_of(HOSTILE, job_id), ignore_errors=True)


@pytest.fixture(scope="module")
def bobs_job(cluster):
    """A Slurm job of bob's, submitted from his terminal."""
    job_id = subprocess.run(["runuser", "-u", "bob", "--", "env", f"SLURM_CONF={cluster.slurm_conf_path}", "sbatch",
                             "--parsable", "--mem=100M", "-o", "/dev/null", "--wrap=sleep 300"],
                            capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    yield job_id
    end_job(job_id)


def test_a_hostile_home_breaks_nothing_and_shows_only_its_own_real_metrics(hub, hostile_home):
    hostile, other, admin = (token_session(hub, user) for user in (HOSTILE, OTHER, "admin"))
    api = f"{hub.url}{PORTAL}api/"
    detail = hostile.get(f"{api}jobs/{LOCAL_ID}", timeout=60)
    assert detail.status_code == 200, detail.text
    job = detail.json()
    assert (job["state"], job["images_per_sec"], job["epochs_done"]) == ("COMPLETED", 12.5, 0), job

    def listed() -> dict | None:  # the board rescans a home in the background: up to a refresh period late
        rows = {row["id"]: row for row in hostile.get(f"{api}jobs", timeout=60).json()["jobs"]}
        return rows if "7001" in rows and "7002" in rows else None
    rows = wait_for(listed, 30, interval=1, what=f"{HOSTILE}'s job list to show the records made for the test")
    assert rows["7001"]["state"] == "UNREADABLE" and "not an object" in rows["7001"]["unreadable"]
    assert rows["7002"]["user"] == HOSTILE and f"says '{OTHER}'" in rows["7002"]["unreadable"]
    assert "0002" not in rows  # not a job id at all
    assert hostile.delete(f"{api}jobs/7002", timeout=30).status_code == 409  # nothing is done on its word
    assert "7002" not in {row["id"] for row in other.get(f"{api}jobs", timeout=60).json()["jobs"]}
    assert other.get(f"{api}jobs/7002", timeout=30).status_code == 404

    pages = browser(hub, HOSTILE)
    for path, text in (("jobs", "unreadable record"), ("jobs/7001", "unreadable record: a JSON list"),
                       (f"jobs/{LOCAL_ID}", "12.5")):
        page = pages.get(f"{hub.url}{PORTAL}{path}", timeout=60)
        assert page.status_code == 200 and text in page.text, (path, page.status_code, page.text[-1500:])
    everyone = browser(hub, "admin")
    page = everyone.get(f"{hub.url}{PORTAL}jobs", timeout=60)
    assert page.status_code == 200 and "All jobs" in page.text and "7001" in page.text
    assert admin.get(f"{api}jobs", timeout=60).status_code == 200
    assert everyone.get(f"{hub.url}{PORTAL}jobs/7002", timeout=60).status_code == 200


def test_another_users_job_answers_exactly_as_a_job_that_does_not_exist(hub, bobs_job):
    alice = token_session(hub, "alice")
    missing = "999999"
    assert missing not in slurm("squeue", "-h", "-a", "-o", "%i").split()
    for method, path in (("GET", "api/jobs/{}"), ("DELETE", "api/jobs/{}"), ("GET", "jobs/{}"),
                         ("GET", "jobs/{}/log"), ("POST", "jobs/{}/cancel")):
        answers = [alice.request(method, f"{hub.url}{PORTAL}{path.format(job_id)}", timeout=60,
                                 allow_redirects=False) for job_id in (bobs_job, missing)]
        assert [a.status_code for a in answers] == [404, 404], (method, path, [a.text[-300:] for a in answers])
        said = [masked(a.content.replace(f"job {job_id}:".encode(), b"job ID:"))
                for a, job_id in zip(answers, (bobs_job, missing), strict=True)]
        assert said[0] == said[1] and b"job ID: not found among alice" in said[0], (method, path, said)
        leading_zero = alice.request(method, f"{hub.url}{PORTAL}{path.format('0' + bobs_job)}", timeout=60)
        assert leading_zero.status_code == 404, (method, path)
    wait_for(lambda: any(line.startswith(f"{bobs_job} ") for line in jobs_of("bob")), 5, what="bob's job, intact")


HOSTILE_JOBS = {  # bob's local-scheduler jobs, whose output and event files are no files the portal may read
    "local-20261125T010101-f1f0f1": ("fifo", "fifo"),
    "local-20261125T010102-d0d0d0": ("/dev/zero", "/dev/urandom"),
    "local-20261125T010103-d1d1d1": ("/dev/urandom", "/dev/zero"),
}


def special(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    fifo(path) if kind == "fifo" else device_link(path, kind)


@pytest.fixture
def bobs_hostile_files(cluster):
    """bob's jobs whose output.log and event files are FIFOs and links to endless devices (issue 25: they held
    the dashboard's workers for minutes, left a `tail` that grew to 22.5 GB, and a 408 MB metrics helper)."""
    as_user("bob", "mkdir", "-p", "-m", "700", "--", str(job_dir_of("bob", "")))  # the test box's, as his
    made = []
    for job_id, (output, events) in HOSTILE_JOBS.items():
        path = job_dir_of("bob", job_id)
        path.mkdir(parents=True, exist_ok=True)
        made.append(path)
        record = {"id": job_id, "scheduler": "local", "user": "bob", "spec": {"epochs": 1, "data_dir": "/data"},
                  "submitted_at": "2026-11-25T01:01:01+00:00", "job_dir": str(path)}
        (path / "job.json").write_text(json.dumps(record))
        (path / "exit_status").write_text("0\n")
        (path / "tensorboard").mkdir(exist_ok=True)
        special(path / "output.log", output)
        special(path / "tensorboard" / "events.out.tfevents.1.tnode1", events)
    subprocess.run(["chown", "-R", "-h", "bob:users", *map(str, made)], check=True)
    yield list(HOSTILE_JOBS)
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def test_hostile_files_cost_their_owner_a_bounded_read_and_nobody_else_anything(hub, bobs_hostile_files):
    alice, bob = token_session(hub, "alice"), token_session(hub, "bob")
    bobs_pages = browser(hub, "bob")
    api = f"{hub.url}{PORTAL}api/"
    assert alice.get(f"{api}jobs", timeout=60).status_code == 200  # her list read once: what follows is a refresh
    answers: list[tuple[str, int, float]] = []

    def ask(url: str, session) -> None:
        started = time.monotonic()
        answers.append((url, session.get(url, timeout=120).status_code, time.monotonic() - started))

    urls = [f"{hub.url}{PORTAL}jobs/{job_id}/log" for job_id in bobs_hostile_files] * 3
    urls += [f"{api}jobs/{job_id}" for job_id in bobs_hostile_files]
    threads = [threading.Thread(target=ask, args=(url, bobs_pages if "/api/" not in url else bob)) for url in urls]
    for thread in threads:
        thread.start()
    alices = []
    while any(thread.is_alive() for thread in threads) or len(alices) < 5:
        started = time.monotonic()
        assert alice.get(f"{api}jobs", timeout=60).status_code == 200
        alices.append(time.monotonic() - started)
        time.sleep(0.2)  # a page refreshes every few seconds: within her own rate (dashboard_api_rate)
    for thread in threads:
        thread.join(120)
    print(f"\nalice's list while bob's files were read: {len(alices)} requests, slowest {max(alices):.3f} s; "
          f"bob's {len(answers)} requests: slowest {max(a[2] for a in answers):.2f} s")
    assert max(alices) < 1.0, alices
    assert all(code == 200 for _, code, _ in answers), answers
    assert max(took for _, _, took in answers) < 30, answers  # each read gave up at once or within its bound
    detail = bob.get(f"{api}jobs/{bobs_hostile_files[0]}", timeout=60).json()
    assert "is not a regular file: not read" in detail["metrics_unreadable"], detail
    wait_for(lambda: not readers_of("bob"), 15, what="no reader of bob's files left running")
