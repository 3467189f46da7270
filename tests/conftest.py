"""Test session set-up: a private cluster in a box (own state dir and ports) for integration and browser tests.

The settings are written to a YAML file and named by DSPORTAL_CONFIG before any portal module loads them, so
the tests, the box and the hub all read the same values. A user's own `make up` box keeps running untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parent.parent
# Two test sessions at once (say, two checkouts) need their own state dir, ports and nodes: set the variables.
TEST_STATE = Path(os.environ.get("DSPORTAL_TEST_STATE", "/var/tmp/dsportal-test"))
PORT_OFFSET = int(os.environ.get("DSPORTAL_TEST_PORT_OFFSET", "0"))
# The test box's compute nodes (tnode1, tnode2) and their part of 198.18.0.0/24, apart from `make up`'s.
NODE_PREFIX = os.environ.get("DSPORTAL_TEST_NODE_PREFIX", "tnode")
BOX_SUBNET = os.environ.get("DSPORTAL_TEST_BOX_SUBNET", "198.18.0.32/27")
TEST_CONFIG = TEST_STATE.with_suffix(".yaml")
TEST_SETTINGS = {
    "state_dir": str(TEST_STATE),
    "hub_port": 18000 + PORT_OFFSET,
    "hub_api_port": 18081 + PORT_OFFSET,
    "proxy_api_port": 18001 + PORT_OFFSET,
    "ldap_port": 13389 + PORT_OFFSET,
    "ldaps_port": 16636 + PORT_OFFSET,
    "slurmctld_port": 16817 + PORT_OFFSET,
    "slurmd_port": 16818 + PORT_OFFSET,
    "slurmdbd_port": 16819 + PORT_OFFSET,
    "accounting_db_port": 16820 + PORT_OFFSET,
    "smtp_port": 12525 + PORT_OFFSET,
    "box_nodes": 2,
    "box_node_prefix": NODE_PREFIX,
    "box_subnet": BOX_SUBNET,
    "start_timeout": 120,
    # Every job's trainer without Grappler's graph passes: about 25 s less start-up per run on 2 CPU cores, the
    # same steps per second (docs/testing.md); the training tests' own runs pass the flag too (TRAINER_SPEEDUP).
    "jobs_trainer_args": ["--graph-optimizer", "off"],
}
TRAINER_SPEEDUP = ("--graph-optimizer", "off")
NODES = tuple(f"{NODE_PREFIX}{i}" for i in (1, 2))
# Waits are derived from what is waited for, never picked for an idle machine. A server: the hub itself gives a
# spawn start_timeout seconds, then a few more for its verdict to reach the REST API (it polls every second).
SERVER_START_S = TEST_SETTINGS["start_timeout"] + 15
# A job cannot outlive its time limit by more than Slurm's KillWait (30 s, the default) plus the dashboard's next
# look at squeue: a wait for a job to end is its own time limit plus this.
JOB_END_GRACE_S = 60
ARTIFACTS = REPO / "tests" / "artifacts"

TEST_CONFIG.write_text("".join(f"{k}: {v}\n" for k, v in TEST_SETTINGS.items()))
os.environ["DSPORTAL_CONFIG"] = str(TEST_CONFIG)
for name in list(os.environ):
    if name.startswith("DSPORTAL_") and name != "DSPORTAL_CONFIG" and not name.startswith("DSPORTAL_TEST_"):
        del os.environ[name]  # the YAML file is the one source for the test box

# Tornado's test cases (AsyncHTTPTestCase, gen_test) give each request and test 5 s by default: a bound for an
# idle machine, where these handlers answer in milliseconds. A busy one (the boxes and a browser beside) gets 30.
os.environ.setdefault("ASYNC_TEST_TIMEOUT", "30")

from bench.hub_client import HubClient, wait_for  # noqa: E402
from portal.config import load  # noqa: E402  (after DSPORTAL_CONFIG is set)
from portal.inputs import seconds_of  # noqa: E402
from portal.runas import RUNUSER  # noqa: E402

PASSWORDS = {"alice": "wonderland", "bob": "builder", "mallory": "mallory", "admin": "admin-demo"}


def box(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the cluster-in-a-box command line against the test state dir; with `check`, a failure shows its output."""
    result = subprocess.run([sys.executable, str(REPO / "deploy" / "local" / "box.py"), *args],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"box.py {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def slurm(*args: str) -> str:
    cfg = load()
    env = {**os.environ, "SLURM_CONF": str(cfg.slurm_conf_path)}
    return subprocess.run(list(args), env=env, capture_output=True, text=True, check=True, timeout=30).stdout


@contextlib.contextmanager
def old_job_dir_aside(user: str, job_id: str):
    """Slurm counts job ids from 1 again in each test box while the homes keep their old job directories: the
    user's directory with this id (an old job of theirs, not the one the test is about) is moved aside (not
    listed: not a job id) and put back afterwards."""
    mine = Path(pwd.getpwnam(user).pw_dir) / "jobs" / job_id
    aside = mine.with_name(f"{job_id}.aside-for-test")
    if mine.exists():
        mine.rename(aside)
    try:
        yield
    finally:
        if aside.exists():
            aside.rename(mine)


def job_wait_s(time_limit: str) -> float:
    """How long a job with this time limit ("HH:MM:SS") can take to end once it runs (see JOB_END_GRACE_S)."""
    return seconds_of(time_limit) + JOB_END_GRACE_S


def jobs_of(user: str) -> list[str]:
    """The user's Slurm jobs that are pending or running, as 'id state'."""
    return slurm("squeue", "-h", "-u", user, "-o", "%i %T").split("\n")[:-1]


class Hub:
    """The test box's hub, driven over HTTP as a browser or an API client would (bench.hub_client, one session each
    user): the methods take the user's session."""

    def __init__(self, url: str):
        self.url = url

    def client(self, session: requests.Session | None = None) -> HubClient:
        return HubClient(self.url, session)

    def login_form(self, session: requests.Session | None = None) -> tuple[requests.Session, str]:
        client = self.client(session)
        return client.session, client.login_xsrf()

    def post_login(self, username: str, password: str) -> tuple[requests.Session, requests.Response]:
        client = self.client()
        return client.session, client.post_login(username, password)

    def login(self, username: str) -> requests.Session:
        return self.client().login(username, PASSWORDS[username]).session

    def api(self, session: requests.Session, method: str, path: str, **kwargs) -> requests.Response:
        return self.client(session).api(method, path, **kwargs)

    def spawn_form(self, session: requests.Session, **fields) -> requests.Response:
        """Submit the spawn form as a browser does; returns the page the hub answers with."""
        client = self.client(session)
        action = client.spawn_form_action()
        assert action, f"no spawn form at {self.url}/hub/spawn"
        return client.post_spawn_form(action, fields)

    def server(self, session: requests.Session, user: str) -> dict | None:
        return self.client(session).server(user)

    def wait_ready(self, session: requests.Session, user: str, timeout: float = SERVER_START_S) -> dict:
        def ready():
            server = self.server(session, user)
            if server is None:
                raise AssertionError(f"{user}'s server is gone: the spawn failed (see {TEST_STATE}/log/hub.log)")
            return server if server.get("ready") else None
        return wait_for(ready, timeout, what=f"{user}'s server to be ready")

    def stop(self, session: requests.Session, user: str) -> None:
        self.client(session).stop(user)


def pytest_collection_modifyitems(session, config, items):
    """The images tests run last, and their build is checked now in the background (tests/images/build.py):
    `make test` built the images before the session, so podman's layer cache answers in seconds."""
    images = [item for item in items if "tests/images/" in item.nodeid]
    if images:
        items[:] = [item for item in items if item not in images] + images
        if not config.option.collectonly:
            from tests.images import build
            build.start()


# The demo users' homes are the machine's, shared with a `make up` box: the test box's jobs land in ~/jobs beside
# theirs. What a session adds there (a few GB of checkpoints per run) is removed when it ends, or, when it was
# killed, by the next session: without that, every `make test` left its jobs behind and the disk filled.
DEMO_HOMES = tuple(Path("/home") / user for user in ("alice", "bob", "mallory", "admin"))
HOMES_SNAPSHOT = "homes-before.json"  # in TEST_STATE: each ~/jobs entry's (name, inode) before the session


def jobs_entries() -> dict[str, list[list]]:
    found = {}
    for home in DEMO_HOMES:
        try:
            with os.scandir(home / "jobs") as entries:
                found[str(home)] = [[entry.name, entry.inode()] for entry in entries]
        except FileNotFoundError:
            found[str(home)] = []
    return found


def remove_jobs_made_since(snapshot: dict[str, list[list]]) -> list[str]:
    """Every ~/jobs entry of a demo user that is not in `snapshot`, by inode: a directory the test box renamed
    out of its way (`<id>.replaced-<time>`, the same inode) was there before, and stays."""
    removed = []
    for home, before in snapshot.items():
        kept = {inode for _, inode in before}
        jobs = Path(home) / "jobs"
        for name, inode in jobs_entries().get(home, []):
            if inode in kept:
                continue
            path = jobs / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(str(path))
    return removed


@pytest.fixture(scope="session")
def cluster():
    """Start the test box from nothing; stop it after the session, and remove the jobs it made in the homes."""
    box("down", check=False)
    snapshot_file = TEST_STATE / HOMES_SNAPSHOT
    if snapshot_file.exists():  # a session killed before its end
        remove_jobs_made_since(json.loads(snapshot_file.read_text()))
    shutil.rmtree(TEST_STATE, ignore_errors=True)
    before = jobs_entries()
    TEST_STATE.mkdir(parents=True)
    snapshot_file.write_text(json.dumps(before))
    started = time.monotonic()
    result = box("up", check=False)
    if result.returncode != 0:
        pytest.fail(f"the cluster in a box did not start:\n{result.stdout}\n{result.stderr}")
    print(f"\ncluster in a box up in {time.monotonic() - started:.1f} s")
    yield load()
    box("down", check=False)
    removed = remove_jobs_made_since(before)
    snapshot_file.unlink(missing_ok=True)
    print(f"\njob directories the session made in the demo users' homes, removed: {len(removed)}")


@pytest.fixture(scope="session")
def hub(cluster) -> Hub:
    return Hub(cluster.hub_url)


@pytest.fixture(scope="session")
def admin(hub) -> requests.Session:
    """An admin's logged-in session, for the REST API."""
    return hub.login("admin")


@pytest.fixture
def alice(hub, admin) -> requests.Session:
    """alice, logged in; her server is stopped again after the test."""
    session = hub.login("alice")
    yield session
    if hub.server(admin, "alice") is not None:
        hub.stop(admin, "alice")


@pytest.fixture(scope="module")
def demo_data(cluster):
    """The demo data set (portal.jobs.demo_data), made once."""
    from portal.jobs.demo_data import ensure_demo_data

    return ensure_demo_data(cluster)


@pytest.fixture
def no_jobs_left(cluster):
    """Every job of the demo users is cancelled after the test, whatever it left."""
    yield
    slurm("scancel", "-u", "alice")
    slurm("scancel", "-u", "bob")
    wait_for(lambda: not jobs_of("alice") and not jobs_of("bob"), 60, what="the test's jobs to end")


@contextlib.contextmanager
def every_node_held_by_a_job(seconds: int = 300):
    """Another job holds every node whole, so the next job (a server's or a training job's) waits in the queue.
    Yields the holder's job id: cancelling it frees the nodes."""
    holder = slurm("sbatch", "--parsable", f"--nodes={len(NODES)}", "--exclusive", "--mem=1G",
                   f"--wrap=sleep {seconds}", "-o", "/dev/null").strip()
    try:
        # Every node must be free: an earlier test's server or job may still be ending (JOB_END_GRACE_S).
        wait_for(lambda: "RUNNING" in slurm("squeue", "-h", "-j", holder, "-o", "%T"), JOB_END_GRACE_S,
                 what="the holder job")
        yield holder
    finally:
        slurm("scancel", holder)


@pytest.fixture
def every_node_held(cluster):
    """every_node_held_by_a_job, for one test."""
    with every_node_held_by_a_job() as holder:
        yield holder


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def tensorboard_steps(logdir: Path, user: str | None = "alice") -> dict[str, list[int]]:
    """Every step written per tag, repeats included, over all of a job's event files, with TensorBoard's own reader;
    read as `user` (the Slurm box's homes), or as root where the files are a pod's (the Kubernetes box's volumes)."""
    script = ("import json, pathlib, sys\n"
              "from tensorboard.backend.event_processing.event_file_loader import EventFileLoader\n"
              "steps = {}\n"
              "for path in sorted(pathlib.Path(sys.argv[1]).rglob('*tfevents*')):\n"
              "    for event in EventFileLoader(str(path)).Load():\n"
              "        for value in event.summary.value:\n"
              "            steps.setdefault(value.tag, []).append(event.step)\n"
              "print(json.dumps({tag: sorted(found) for tag, found in steps.items()}))\n")
    as_user = [RUNUSER, "-u", user, "--"] if user else []
    out = subprocess.run([*as_user, "/opt/dsportal/venv/bin/python", "-c", script, str(logdir)],
                         capture_output=True, text=True, check=True, cwd="/tmp").stdout
    return json.loads(out)


class Mailbox:
    """A user's local mailbox (/var/mail/<user>, where the box's exim4 delivers), read from where it ended when
    made: the homes and mailboxes are shared with every box, and Slurm's job ids start again in each."""

    def __init__(self, user: str):
        self.path = Path("/var/mail") / user
        self.start = self.path.stat().st_size if self.path.exists() else 0

    def messages(self) -> list:
        from email import policy
        from email.parser import BytesParser

        data = self.path.read_bytes() if self.path.exists() else b""
        data = data[self.start:] if len(data) >= self.start else data  # emptied by its user: all of it is new
        chunks = re.split(rb"^From \S+ [^\n]*\n", data, flags=re.M)
        return [BytesParser(policy=policy.default).parsebytes(chunk) for chunk in chunks if chunk.strip()]

    def about(self, job_id: str) -> list:
        """The messages whose subject names this job ("Job 42 COMPLETED: ...")."""
        return [m for m in self.messages() if str(m["Subject"] or "").startswith(f"Job {job_id} ")]


def user_settings_cleared(user: str) -> None:
    """Remove the user's portal settings (~/.config/dsportal/settings.json): every test starts from the defaults."""
    from portal.settings import SETTINGS_FILE

    (Path(pwd.getpwnam(user).pw_dir) / SETTINGS_FILE).unlink(missing_ok=True)
