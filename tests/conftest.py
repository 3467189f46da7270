"""Test session set-up: a private cluster in a box (own state dir and ports) for integration and browser tests.

The settings are written to a YAML file and named by DSPORTAL_CONFIG before any portal module loads them, so
the tests, the box and the hub all read the same values. A user's own `make up` box keeps running untouched.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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
# The test box is a second cluster beside a user's `make up` box, sharing the users' homes as a site's second
# cluster would: what it writes there is in places named after it (MARKS), and nothing else is its to touch.
CLUSTER = os.environ.get("DSPORTAL_TEST_CLUSTER", "dsportal_test")
# This session's own copy of the settings: a session of another checkout (say, unit tests run beside a full run)
# must never rewrite the file that a running test box's hub, dashboard and jobs read. Removed when the session
# ends; one left by a killed session is removed by the next (stale_configs_removed).
TEST_CONFIG = TEST_STATE.parent / f"{TEST_STATE.name}.{os.getpid()}.yaml"
WATCHED_GROUP = "gpu-idle-watched"  # the test box's only group whose idle GPUs are given back (test_gpu_watch.py)
# The test boxes' only group with a weekly GPU-hours budget (docs/gpus.md), its tests' own: a job of 1 GPU for the
# partition's 7 days (168 GPU-hours) costs more than it, whatever its members used this week.
BUDGET_GROUP, BUDGET_HOURS = "gpu-budget-test", 100


def box_settings(cluster: str, state: Path, port_offset: int, node_prefix: str, subnet: str) -> dict[str, object]:
    """The settings of a test box: the Slurm test box's (below), or a box on another Slurm release
    (tests/slurm_versions) with its own cluster name, state dir, ports, nodes and subnet."""
    return {
        "state_dir": str(state),
        "directory_dir": str(state / "directory"),  # its own directory (slapd, CA), never the users' boxes' one
        "hub_port": 18000 + port_offset,
        "hub_api_port": 18081 + port_offset,
        "proxy_api_port": 18001 + port_offset,
        "ldap_port": 13389 + port_offset,
        "ldaps_port": 16636 + port_offset,
        "slurmctld_port": 16817 + port_offset,
        "slurmd_port": 16818 + port_offset,
        "slurmdbd_port": 16819 + port_offset,
        "accounting_db_port": 16820 + port_offset,
        "smtp_port": 12525 + port_offset,
        "box_mail_dir": str(state / "mail"),  # its own mailboxes, never the users' /var/mail
        "cluster_name": cluster,  # its jobs in ~/jobs/<cluster>/, its servers' output in .cache/dsportal/servers/<...>
        "jobs_old_layout": False,  # ~/jobs/<id> are the user's box's older jobs, not this cluster's
        "user_settings_file": f".config/{cluster}/settings.json",  # its own settings, never the users'
        # Its servers' template copies and Jupyter's own per-user files (config, JupyterLab's workspaces and
        # settings, runtime files, notebook signatures) and IPython's (its kernels' history) in its scratch mark: a
        # user's own ~/.jupyter and ~/.ipython are read by their box alone.
        "user_notebooks_dir": f".cache/{cluster}/notebooks",
        "server_environment": [f"JUPYTER_CONFIG_DIR={{home}}/.cache/{cluster}/jupyter/config",
                               f"JUPYTER_DATA_DIR={{home}}/.cache/{cluster}/jupyter/data",
                               f"IPYTHONDIR={{home}}/.cache/{cluster}/ipython",
                               f"KERAS_HOME={{home}}/.cache/{cluster}/keras"],  # its TensorBoard's TensorFlow
        "jobs_environment": [f"KERAS_HOME={{home}}/.cache/{cluster}/keras"],  # TensorFlow's import writes keras.json
        "box_nodes": 2,
        "box_node_prefix": node_prefix,
        "box_subnet": subnet,
        "start_timeout": 120,
        # Every job's trainer without Grappler's graph passes: about 25 s less start-up per run on 2 CPU cores, the
        # same steps per second (docs/testing.md); the training tests' own runs pass the flag too (TRAINER_SPEEDUP).
        "jobs_trainer_args": ["--graph-optimizer", "off"],
        # The GPU watch (docs/gpus.md) warns and stops only the servers of the group that its own test puts users in,
        # and quickly: every other test's idle server keeps its GPUs however long it waits.
        "default_gpu_idle_s": 0,
        "gpu_idle_s": {WATCHED_GROUP: 10},
        "gpu_idle_grace_s": 10,
        "gpu_read_every_s": 5,
        "gpu_hours_budget": {BUDGET_GROUP: BUDGET_HOURS},
    }


TEST_SETTINGS = box_settings(CLUSTER, TEST_STATE, PORT_OFFSET, NODE_PREFIX, BOX_SUBNET)
# The token a site's Prometheus reads the hub's and the portal's metrics with (docs/operations.md), this session's own:
# the test box's hub registers it (tests/integration/test_metrics.py reads with it).
METRICS_TOKEN = TEST_STATE.parent / f"{TEST_STATE.name}.{os.getpid()}.metrics-token"
TEST_SETTINGS["metrics_token_file"] = str(METRICS_TOKEN)
TRAINER_SPEEDUP = ("--graph-optimizer", "off")
# The model of every job that tests the portal, the schedulers and the boxes rather than the model: three
# convolutions (chexnet.model.tiny_cnn), an epoch of the demo set in well under a second, learning its marks in a few
# epochs. DenseNet-121 keeps its own tests (tests/integration/test_training.py).
TINY_MODEL = "tinycnn"
# Every registered training program (portal.records.programs): the journeys run each with the same test functions.
PROGRAMS = ("chexnet", "chexnet-torch")
NODES = tuple(f"{NODE_PREFIX}{i}" for i in (1, 2))
# Waits are derived from what is waited for, never picked for an idle machine. A server: the hub itself gives a
# spawn start_timeout seconds, then a few more for its verdict to reach the REST API (it polls every second).
SERVER_START_S = TEST_SETTINGS["start_timeout"] + 15
# A job cannot outlive its time limit by more than Slurm's KillWait (30 s, the default) plus the dashboard's next
# look at squeue: a wait for a job to end is its own time limit plus this.
JOB_END_GRACE_S = 60
ARTIFACTS = REPO / "tests" / "artifacts"

_token = os.open(METRICS_TOKEN, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.write(_token, secrets.token_hex(20).encode() + b"\n")
os.close(_token)
os.chmod(METRICS_TOKEN, 0o600)  # whatever the file was
atexit.register(METRICS_TOKEN.unlink, missing_ok=True)
# The test boxes are a site with a program of its own (docs/admin-guide.md, "A site's own training program"): the
# toy program and its launcher (tests/toyprogram), copied where every user's jobs can read them (the checkout may be
# in root's 700 home), registered by the settings alone. This session's own copy, removed when it ends
# (stale_configs_removed).
SITE_PROGRAMS = TEST_STATE.parent / f"{TEST_STATE.name}.{os.getpid()}.site"
shutil.rmtree(SITE_PROGRAMS, ignore_errors=True)
shutil.copytree(REPO / "tests" / "toyprogram", SITE_PROGRAMS / "toyprogram",
                ignore=shutil.ignore_patterns("__pycache__"))
for _place, _dirs, _files in os.walk(SITE_PROGRAMS):
    os.chmod(_place, 0o755)
    for _name in _files:
        os.chmod(os.path.join(_place, _name), 0o644)
atexit.register(shutil.rmtree, SITE_PROGRAMS, ignore_errors=True)
TEST_SETTINGS.update(site_programs=["toyprogram.program"], site_launchers=["toyprogram.launcher"],
                     site_python_path=str(SITE_PROGRAMS),
                     k8s_site_programs_claim="site-programs")  # on Kubernetes: the claim the test kubebox makes of it
TOY = "toy-linear"  # its NAME
TEST_CONFIG.write_text("".join(f"{k}: {v}\n" for k, v in TEST_SETTINGS.items()))
os.chmod(TEST_CONFIG, 0o644)  # the test box's jobs read it as their users
atexit.register(TEST_CONFIG.unlink, missing_ok=True)
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
from spawners.slurm_script import server_log_dir  # noqa: E402
from tests.users_boxes import HOMES_LEDGER, pid_file_alive  # noqa: E402

PASSWORDS = {"alice": "wonderland", "bob": "builder", "mallory": "mallory", "admin": "admin-demo"}


def box(*args: str, check: bool = True, settings: Path | None = None) -> subprocess.CompletedProcess:
    """Run the cluster-in-a-box command line against the test state dir (or the box that `settings`, a settings
    file, describes); with `check`, a failure shows its output."""
    env = {**os.environ, "DSPORTAL_CONFIG": str(settings)} if settings is not None else None
    if args[:1] == ("up",):  # the users' jobs run the venv's copy of dsportal: this checkout's, up to date
        installed = subprocess.run([REPO / "deploy/local/install-package.sh"], capture_output=True, text=True,
                                   timeout=600)
        if installed.returncode != 0:
            raise AssertionError(f"deploy/local/install-package.sh exited {installed.returncode}:\n"
                                 f"{installed.stdout}\n{installed.stderr}")
    result = subprocess.run([sys.executable, "-m", "deploy.local.box", *args],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"box.py {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def slurm(*args: str) -> str:
    cfg = load()
    env = {**os.environ, "SLURM_CONF": str(cfg.slurm_conf_path)}
    return subprocess.run(list(args), env=env, capture_output=True, text=True, check=True, timeout=30).stdout


def node_taken_back(node: str, states: tuple[str, ...] = ("idle",), timeout: float = 60,
                    run: Callable[..., str] | None = None) -> None:
    """After a crashed node's start: Slurm calls it `states` again, and slurmctld has no RPC left to send (sdiag's
    agent queue, its retry list, and its agents). Slurm holds a requeued job for 120 s before it may start again;
    a test that lets it go sooner (`scontrol update starttime=now`, as an admin who brought the node back may) waits
    for this first: the terminate request for the killed run, retried until the node answers, would otherwise reach
    the node after the new run of the same job id has started there, and kill it (seen: WTERMSIG 15 at once; on
    the other releases' box, mpirun's "ORTE daemon has unexpectedly failed after launch"). `run`: how the box's
    Slurm commands are run, their output (default: the test box's)."""
    ask = run or slurm
    wait_for(lambda: ask("sinfo", "-h", "-n", node, "-o", "%t").strip() in states, timeout, interval=1,
             what=f"Slurm to take {node} back ({'/'.join(states)})")

    def agents_idle() -> bool:
        answer = ask("sdiag")
        counts = [re.search(rf"^{label}:\s+(\d+)", answer, re.M) for label in ("Agent queue size", "Agent count")]
        return all(found and found.group(1) == "0" for found in counts)
    wait_for(agents_idle, timeout, interval=1, what="slurmctld's RPCs to the nodes to be delivered (sdiag)")


def job_dir_of(user: str, job_id: str) -> Path:
    """Where the test box keeps a job of `user`'s: ~/jobs/<CLUSTER>/<id> (portal.records.record.cluster_jobs_dir)."""
    return Path(pwd.getpwnam(user).pw_dir) / "jobs" / CLUSTER / job_id


def job_wait_s(time_limit: str) -> float:
    """How long a job with this time limit ("HH:MM:SS") can take to end once it runs (see JOB_END_GRACE_S)."""
    return seconds_of(time_limit) + JOB_END_GRACE_S


def end_job(job_id: str) -> None:
    """Cancel a job the test made (if it is still queued) and wait until Slurm has let go of it: a holder still
    COMPLETING keeps its memory on the nodes, which the next test reads as someone else's (CI at b738a1a: "has 19
    of 24 GB free" beside a cancelled 1 GB holder)."""
    env = {**os.environ, "SLURM_CONF": str(load().slurm_conf_path)}

    def queued(*command: str) -> str:  # a job gone from slurmctld's memory is refused ("Invalid job id"): gone
        return subprocess.run(list(command), env=env, capture_output=True, text=True, timeout=30).stdout.strip()
    queued("scancel", job_id)
    wait_for(lambda: not queued("squeue", "-h", "-j", job_id, "-o", "%T"), JOB_END_GRACE_S,
             what=f"job {job_id} to leave the queue")


def jobs_of(user: str) -> list[str]:
    """The user's Slurm jobs that are pending or running, as 'id state'."""
    return slurm("squeue", "-h", "-u", user, "-o", "%i %T").split("\n")[:-1]


def page_error(page: requests.Response) -> str:
    """What a hub's page says went wrong, for an assertion's message: the spawn page's error (JupyterHub's
    spawn-error-msg, where a failed start's reason is), else the page's end."""
    found = re.search(r'class="spawn-error-msg[^"]*">(.*?)</p>', page.text, re.S)
    said = " ".join(re.sub(r"<[^>]+>", " ", found.group(1)).split()) if found else page.text[-2000:]
    return f"{page.status_code} from {page.url}: {said}"


class Hub:
    """The test box's hub, driven over HTTP as a browser or an API client would (bench.hub_client, one session each
    user): the methods take the user's session."""

    def __init__(self, url: str, ca: str | None = None):
        """`ca`: the CA that signs an https hub's certificate (the Kubernetes box's hub in a pod)."""
        self.url, self.ca = url, ca

    def client(self, session: requests.Session | None = None) -> HubClient:
        return HubClient(self.url, session, self.ca)

    def get(self, path: str, **kwargs) -> requests.Response:
        """A request without a session (an anonymous browser), trusting the hub's CA."""
        kwargs.setdefault("timeout", 30)
        return requests.get(f"{self.url}{path}", verify=self.ca or True, **kwargs)  # a call's verify wins

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


# The suites run on two boxes that share nothing but the machine: the Slurm test box (integration, browser,
# notebooks) and the Kubernetes test box (kubernetes, images). `make test` runs the two sides side by side, each
# whole on a worker of its own, in order (pytest-xdist, `--dist loadgroup`, with the scheduler below), so a test of
# one box never waits for the other's trainings and restarts. A test is on one side only: by its path, or for a
# test parametrized over both boxes, by its parameter ("slurm" or "kubernetes" in its id).
KUBE_PATHS = ("tests/kubernetes/", "tests/images/")
# The training programs' own tests, which need no box: two sides of their own (the TensorFlow program's long
# module, and the rest), after the boxes' sides, each started by whichever worker is done first. With them on the
# Slurm side, it was the longer by about 9 minutes (2026-11-28: 2,174 s against the Kubernetes side's 1,401 s).
TRAINING_TF = "tests/integration/test_training.py"
UNIT_PATH = "tests/unit/"
PROGRAM_PATHS = (TRAINING_TF, "tests/integration/test_corrupt_data.py", "tests/integration/test_torch_program.py",
                 "tests/programs/")
# The suites' modules that need no box (real services or installs of their own, the demo accounts at most): a side
# of their own after the boxes'. A clone of the checkout installed and run as alice (57 s of 8b61e8c's Slurm side),
# the real proxy before a plain backend, the notebook helpers; and, moved off the Slurm side on 2026-12-05 (about 85 s
# of 256ee42's), the local scheduler's jobs, the directory's starts with slapds of their own, portal.js against
# answers its test makes up (and the lab's idle-GPU notice likewise).
NO_BOX_PATHS = ("tests/integration/test_checkout_anywhere.py", "tests/integration/test_proxy_hsts.py",
                "tests/notebooks/test_helpers.py", "tests/integration/test_local_jobs.py",
                "tests/integration/test_directory_starts.py", "tests/browser/test_portal_js.py",
                "tests/browser/test_gpu_notice.py")


def side_of(nodeid: str) -> str:
    """"slurm" or "kube": the test box a test (by its node id) runs against; "training-tf" and "programs" for the
    training programs' tests, which need no box; "releases" for the boxes on other
    Slurm releases (tests/slurm_versions), a side that starts on whichever worker is done first (the
    Kubernetes side's, about 10 minutes before the Slurm side's); "unit" for the unit tests; "no-box" for the
    suites' modules that need none (NO_BOX_PATHS)."""
    if nodeid.startswith(UNIT_PATH):
        return "unit"
    if nodeid.startswith(NO_BOX_PATHS):
        return "no-box"
    if nodeid.startswith("tests/slurm_versions/"):
        return "releases"
    if nodeid.startswith(TRAINING_TF):
        return "training-tf"
    if nodeid.startswith(PROGRAM_PATHS):
        return "programs"
    params = nodeid.partition("[")[2].rstrip("]").split("-")
    if "slurm" in params:
        return "slurm"
    if "kubernetes" in params:
        return "kube"
    return "kube" if nodeid.startswith(KUBE_PATHS) else "slurm"


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: a run without pytest-xdist has no such hook
def pytest_xdist_make_scheduler(config, log):
    """With `--dist loadgroup` (every run of the Makefile's): each work unit's tests (work_unit_of: a side, a
    program's contract, a unit test module) to one worker, in order. (pytest-xdist's own loadgroup reads xdist_group
    marks into the node ids, which pytest 9.2's node ids no longer let it change.) Other modes are left to
    pytest-xdist."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class BySide(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit_of(nodeid)
    return BySide(config, log)


PROGRAM_CONTRACT = "tests/programs/test_program_contract.py"


def work_unit_of(nodeid: str) -> str:
    """What one worker takes whole under `--dist loadgroup`: a side (side_of); within the programs' side, each
    program's part of the program contract, whose runs are module-scoped fixtures made once per worker that asks
    (`make check`, `--dist load`, made the completed trial's run on three workers and the requeue's on two: about 80
    CPU-s of its 250 s); and each unit test module whole, so that its module-scoped fixtures too are made once
    (`make check`)."""
    side = side_of(nodeid)
    if side == "unit":
        return nodeid.partition("::")[0]
    if nodeid.startswith(PROGRAM_CONTRACT):
        return f"{side}[{nodeid.partition('[')[2].rstrip(']')}]"
    return side


# The sides that need no box (the unit tests, the training programs'): with a worker of their own (SUITE_WORKERS=3),
# they run beside both boxes' sides and take what CPU those leave, at a lower priority (nice), so that the boxes'
# timed waits (a node's heartbeat, a pod's start) see the load they saw with two workers. Children (the training
# runs) inherit it.
BOX_FREE_SIDES = ("unit", "training-tf", "programs", "no-box")
BOX_FREE_NICENESS = 5


def pytest_runtest_setup(item):
    """Each test at its side's priority (BOX_FREE_NICENESS for the sides that need no box, else the worker's own):
    a worker that goes on to a box's side after a box-free one runs it at full priority again. Only in a pool of
    pytest-xdist workers beside a box's side (never in a plain run, nor in `make check`, whose program contract is
    its longest part)."""
    if not hasattr(item.config, "workerinput"):
        return
    started = getattr(item.config, "_dsportal_niceness", None)
    if started is None:
        started = item.config._dsportal_niceness = os.getpriority(os.PRIO_PROCESS, 0)
        item.config._dsportal_boxes = any(side_of(other.nodeid) in ("slurm", "kube") for other in item.session.items)
    box_free = item.config._dsportal_boxes and side_of(item.nodeid) in BOX_FREE_SIDES
    wanted = started + (BOX_FREE_NICENESS if box_free else 0)
    if os.getpriority(os.PRIO_PROCESS, 0) != wanted:
        os.setpriority(os.PRIO_PROCESS, 0, wanted)  # lowering it again needs root, as the suites run


def pytest_collection_modifyitems(session, config, items):
    """The images tests last on their side: they wait for the image build, which `make builds` did before the
    session (podman's layer cache answers in seconds). The programs' side last of all: the boxes' sides start
    first, one on each worker; the sides that follow go, in this order, to the worker done first: the unit tests
    (`make test` runs them in the suites' session, each module a unit of work, while the Slurm side, the longest,
    runs from the start), the TensorFlow program's tests, the other Slurm releases, the suites' modules that need
    no box, the other programs' tests."""
    def last(chosen: Callable[[str], bool]) -> None:
        picked = [item for item in items if chosen(item.nodeid)]
        items[:] = [item for item in items if not chosen(item.nodeid)] + picked
    last(lambda nodeid: nodeid.startswith(UNIT_PATH))
    last(lambda nodeid: nodeid.startswith(TRAINING_TF))
    last(lambda nodeid: nodeid.startswith("tests/slurm_versions/"))
    last(lambda nodeid: "tests/images/" in nodeid)
    last(lambda nodeid: nodeid.startswith(NO_BOX_PATHS))
    last(lambda nodeid: nodeid.startswith(PROGRAM_PATHS) and not nodeid.startswith(TRAINING_TF))


DEMO_USERS = ("alice", "bob", "mallory", "admin")


def marks_in(home: Path, cluster: str = CLUSTER) -> tuple[Path, ...]:
    """What a test box writes in a user's home, each a place named after its cluster: its jobs, its settings, its
    servers' output, and the tests' own scratch (scratch_dir). Its cleanup removes these and nothing else (and only
    the parents it made for them)."""
    return (home / "jobs" / cluster, home / ".config" / cluster, Path(server_log_dir(str(home), cluster)),
            home / ".cache" / cluster)


def scratch_dir(user: str) -> Path:
    """A directory of the tests' own in the user's home (a mark), made as the user: what a test makes there is
    removed with the marks."""
    path = Path(pwd.getpwnam(user).pw_dir) / ".cache" / CLUSTER
    as_user(user, "mkdir", "-p", "-m", "700", "--", str(path))
    return path


def homes_ledger(cluster: str = CLUSTER) -> dict[str, list[str]]:
    """Per demo user, the directories on the way to the marks that do not exist yet: the session will have made
    them, and removes them again once empty. Kept in <state>/homes-ledger.json until the session's end."""
    made: dict[str, list[str]] = {}
    for user in DEMO_USERS:
        try:
            home = Path(pwd.getpwnam(user).pw_dir)
        except KeyError:
            continue  # not a user yet: the test box makes the account, its home is the test box's to clean
        for mark in marks_in(home, cluster):
            made.setdefault(user, []).extend(
                str(parent) for parent in reversed(mark.relative_to(home).parents)
                if str(parent) != "." and not (home / parent).exists())
    return {user: sorted(set(paths), key=lambda p: -p.count("/")) for user, paths in made.items()}


def remove_marks(ledger: dict[str, list[str]], cluster: str = CLUSTER) -> list[str]:
    """Remove the test box's marks from every demo user's home, as that user (root never follows a path a user
    controls), then the parents the session made for them when empty; what was removed."""
    removed = []
    for user in DEMO_USERS:
        try:
            home = Path(pwd.getpwnam(user).pw_dir)
        except KeyError:
            continue
        for mark in marks_in(home, cluster):
            if os.path.lexists(mark):
                as_user(user, "rm", "-rf", "--", str(mark))
                removed.append(str(mark))
        for parent in ledger.get(user, []):
            # rmdir: a parent that the user's own box has meanwhile put something in stays.
            if as_user(user, "rmdir", "--", str(home / parent), check=False) == 0:
                removed.append(str(home / parent))
    return removed


@contextlib.contextmanager
def homes_marked(state: Path, cluster: str = CLUSTER, ledger_file: Path | None = None) -> Iterator[list[str]]:
    """A test box's state dir, made anew, and its marks in the demo users' homes removed after the block, with the
    parents it made for them (its ledger, kept in the state dir unless `ledger_file` says where). What a killed run
    left is removed first, by the ledger it left. Yields the list of what was removed, filled at the end."""
    ledger_file = ledger_file or state / HOMES_LEDGER
    remove_marks(json.loads(ledger_file.read_text()) if ledger_file.exists() else {}, cluster)
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    ledger = homes_ledger(cluster)
    ledger_file.write_text(json.dumps(ledger))
    removed: list[str] = []
    try:
        yield removed
    finally:
        removed.extend(remove_marks(ledger, cluster))
        ledger_file.unlink(missing_ok=True)


def remove_session_dirs(node_prefix: str) -> list[str]:
    """Open MPI's session directories of a test box's jobs, /tmp/ompi.<node>.<uid>: named after its nodes, so its
    marks. mpirun removes its own when it ends, but a job that is killed (a lost node, a time limit, the epilog's
    KILL) leaves about 8 MB on each node: the runs of one day left 1.4 GB. Removed as their owner; what was."""
    removed = []
    for path in Path("/tmp").glob(f"ompi.{node_prefix}[0-9]*.[0-9]*"):
        info = path.lstat()
        owner = pwd.getpwuid(info.st_uid).pw_name if stat.S_ISDIR(info.st_mode) else ""
        if owner in DEMO_USERS and as_user(owner, "rm", "-rf", "--", str(path), check=False) == 0:
            removed.append(str(path))
    return removed


def as_user(user: str, *argv: str, check: bool = True) -> int:
    """argv as `user`; its exit status (with `check`, a failure raises, showing what the command said)."""
    return subprocess.run([RUNUSER, "-u", user, "--", *argv], cwd="/", check=check, capture_output=True,
                          timeout=120).returncode


def stale_configs_removed() -> None:
    """The settings files and site programs of sessions that were killed (their process is gone)."""
    for path in (*TEST_STATE.parent.glob(f"{TEST_STATE.name}.*.yaml"),
                 *TEST_STATE.parent.glob(f"{TEST_STATE.name}.*.site")):
        pid = path.suffixes[-2].lstrip(".") if len(path.suffixes) >= 2 else ""
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            if path.suffix == ".site":
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def cluster():
    """Start the test box from nothing; stop it after the session, and remove what it wrote in the homes (its
    marks). A session that was killed left its ledger: its marks are removed first."""
    box("down", check=False)
    stale_configs_removed()
    with homes_marked(TEST_STATE) as removed:
        started = time.monotonic()
        result = box("up", check=False)
        if result.returncode != 0:
            pytest.fail(f"the cluster in a box did not start:\n{result.stdout}\n{result.stderr}")
        print(f"\ncluster in a box up in {time.monotonic() - started:.1f} s")
        yield load()
        box("down", check=False)
        remove_session_dirs(NODE_PREFIX)
    print(f"\nwhat the test box wrote in the demo users' homes, removed: {len(removed)} places")


BOX_SERVICES = ("slapd", "munged", "exim4", "mariadb", "slurmdbd", "slurmctld", *NODES, "hub")


def box_parts_down() -> list[str]:
    """The test box's services whose recorded process is gone, read from its pid files: nothing is run."""
    down = []
    for name in BOX_SERVICES:
        run = TEST_STATE / "directory" / "run" if name == "slapd" else TEST_STATE / "run"  # the directory's own
        if not pid_file_alive(run / f"{name}.pid"):
            down.append(name)
    return down


class BoxRestarts:
    """What the box_up fixture did: a restart that failed is not tried again (its failure stays one failure)."""

    failed = ""


@pytest.fixture(scope="session")
def demo_accounts() -> None:
    """alice, bob, ... as Unix accounts, with the uids and groups of the demo directory (deploy/local/parts/slapd.py),
    as `make up` or a test box makes them from the directory (users.sync_unix_users, which then finds them as they
    must be). On a new machine the unit tests run before any box has: without this, every test that acts as alice
    failed there ("user 'alice' does not exist on this machine"). Nothing is made where they exist. For the unit tests
    (all of them) and the suites' tests that need the accounts and no box."""
    if os.geteuid() != 0:
        return
    from deploy.local.parts import slapd, users

    with users.accounts_locked():  # the workers (pytest-xdist) and a starting box one at a time
        for name, gid, _ in slapd.DEMO_GROUPS:
            users.ensure_group(name, gid)
        for uid, _, number, given, surname in slapd.DEMO_USERS:
            users.ensure_user(uid, number, slapd.DEMO_PRIMARY_GID, f"/home/{uid}", "/bin/bash", f"{given} {surname}")
        for name, _, members in slapd.DEMO_GROUPS:
            for member in members:
                users.ensure_member(member, name)


@pytest.fixture(autouse=True)
def box_up(request):
    """Before each test of the test box: a box found down (an earlier test stopped it and could not bring it back)
    is said so and started again, once; one that does not start fails this test, and later ones at once."""
    if "cluster" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("cluster")
    down = box_parts_down()
    if down:
        if BoxRestarts.failed:
            pytest.fail(f"the test box is down ({', '.join(down)}) and did not start again earlier: "
                        f"{BoxRestarts.failed}", pytrace=False)
        print(f"\nthe test box was found down before {request.node.nodeid} ({', '.join(down)}): starting it again")
        result = box("up", check=False)
        if result.returncode != 0:
            BoxRestarts.failed = f"box.py up exited {result.returncode}: {result.stdout[-1500:]}{result.stderr[-1500:]}"
            pytest.fail(f"the test box was down ({', '.join(down)}) and did not start again: {BoxRestarts.failed}",
                        pytrace=False)
    yield


@pytest.fixture
def box_brought_back(cluster):
    """For a test that stops the shared test box: it is started again afterwards, even when the test failed."""
    yield
    if box_parts_down():
        box("up")


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
        end_job(holder)


@pytest.fixture
def every_node_held(cluster):
    """every_node_held_by_a_job, for one test."""
    with every_node_held_by_a_job() as holder:
        yield holder


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def recorded_epochs(checkpoints: Path) -> list[int]:
    """The epochs of a training's per-epoch record (checkpoints/epochs.jsonl, any program's; programkit.tblog), in
    its order; whole lines only (one being written, or cut by a kill, is not one yet); [] before the first."""
    try:
        lines = (checkpoints / "epochs.jsonl").read_text().splitlines()
    except OSError:
        return []
    return [entry["epoch"] for line in lines if line.startswith("{") and line.endswith("}")
            for entry in [json.loads(line)] if isinstance(entry.get("epoch"), int)]


def epochs_recorded(checkpoints: Path) -> int:
    """The last epoch in a training's per-epoch record, 0 before its first. A line is written just before its
    epoch's checkpoint."""
    return max(recorded_epochs(checkpoints), default=0)


def last_checkpoint(checkpoints: Path) -> int:
    """The epoch of a training's last saved checkpoint, as TensorFlow's `checkpoint` state file names it
    ("ckpt-<epoch>"); 0 before its first save. Waits read this, never a ckpt-1 file: the trainer keeps its last 3
    checkpoints, so ckpt-1 is gone 3 epochs after it was written (under a second of tinycnn on an idle machine, when
    a 1 s poll missed it and waited 900 s for it)."""
    try:
        found = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', (checkpoints / "checkpoint").read_text(), re.M)
    except OSError:
        return 0
    return int(found.group(1)) if found else 0


def tensorboard_steps(logdir: Path, user: str | None = "alice") -> dict[str, list[int]]:
    """Every step written per tag, repeats included, over all of a job's event files, with TensorBoard's own reader;
    read as `user` (the Slurm box's homes), or as root where the files are a pod's (the Kubernetes box's volumes).
    It reads on TensorBoard's stub of TensorFlow, as the dashboard's helper does: TensorFlow's import would write
    ~/.keras/keras.json into the user's home, which is not the tests' to touch."""
    script = ("import json, pathlib, sys\n"
              "from portal.metrics import without_tensorflow\n"
              "without_tensorflow()\n"
              "from tensorboard.backend.event_processing.event_file_loader import EventFileLoader\n"
              "steps = {}\n"
              "for path in sorted(pathlib.Path(sys.argv[1]).rglob('*tfevents*')):\n"
              "    for event in EventFileLoader(str(path)).Load():\n"
              "        for value in event.summary.value:\n"
              "            steps.setdefault(value.tag, []).append(event.step)\n"
              "print(json.dumps({tag: sorted(found) for tag, found in steps.items()}))\n"
              "assert 'tensorflow' not in sys.modules\n")
    as_user = [RUNUSER, "-u", user, "--"] if user else []
    out = subprocess.run([*as_user, "/opt/dsportal/venv/bin/python", "-c", script, str(logdir)],
                         capture_output=True, text=True, check=True, cwd="/tmp").stdout
    return json.loads(out)


def every_epoch_once_up_to(steps: dict[str, list[int]], tags: tuple[str, ...], at_least: int) -> None:
    """A run stopped early (a job cancelled once what the test checks is recorded) has written each of `tags` for
    every epoch once, from 1 through at least `at_least`. A tag may be one epoch ahead of another (the cancel fell
    between two writes), never missing an epoch or writing one twice."""
    for tag in tags:
        written = steps.get(tag, [])
        assert written == list(range(1, len(written) + 1)), (tag, written)  # each epoch once, none skipped
        assert len(written) >= at_least, (tag, at_least, written)


class Mailbox:
    """A user's mailbox where the test box's exim4 delivers: box_mail_dir/<user>, in the test state dir, so the users'
    own /var/mail is never touched. Read from where it ended when made: a test sees only the messages after that."""

    def __init__(self, user: str):
        self.path = load().box_mail_dir / user
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


def logged_since(log: Path, start: int, line: str) -> str | None:
    """What MailProg's log (the box's jobmail.log) gained since byte `start` (a size from stat, so read as bytes),
    when it has `line`. MailProg logs "sent" after the MTA's answer to QUIT, which may come after exim has
    delivered: a test that has found the message waits for the line."""
    said = (log.read_bytes() if log.exists() else b"")[start:].decode(errors="replace")
    return said if line in said else None


def user_settings_cleared(user: str) -> None:
    """Remove the user's portal settings of the test box (its own user_settings_file, never the file of the user's
    box): every test starts from the defaults."""
    (Path(pwd.getpwnam(user).pw_dir) / load().user_settings_file).unlink(missing_ok=True)
