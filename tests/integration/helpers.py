"""What more than one suite module uses against the test boxes, in one place: the dashboard behind a hub, Slurm
as a user types it, a spawn followed as its page follows it, the users' processes on the nodes, and training runs
under horovodrun. tests/kubernetes uses the dashboard's helpers too.

A suite module imports its helpers from here, from a conftest.py or from the suites' own modules at tests/
(answers.py, cards.py, special_files.py, ...), never from another test module (tests/unit/test_layers.py keeps
that). A helper one module alone uses stays in that module.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import requests

from deploy.local.parts.hub import MARKER
from portal.notebook import TENSORBOARD_START_TIMEOUT_S
from portal.runas import RUNUSER
from tests.children import Child
from tests.conftest import NODES, REPO, SERVER_START_S, TEST_CONFIG, TEST_STATE, TINY_MODEL, TRAINER_SPEEDUP, wait_for

if TYPE_CHECKING:
    from tensorboard.backend.event_processing import event_accumulator


# --- The dashboard behind a hub: its API as a user, the user's browser, Slurm as the user types it ------------------

PORTAL = "/services/portal/"


def token_session(hub, user: str) -> requests.Session:
    """A plain API client for the dashboard with a hub API token of the user (made with their login session)."""
    return hub.client(hub.login(user)).token_session(user, "dashboard test")


def api_caller(hub) -> Callable[..., requests.Response]:
    """call(client, method, path): the dashboard's JSON API behind this hub, as that client."""
    def call(client: requests.Session, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 60)
        return client.request(method, f"{hub.url}{PORTAL}api/{path}", **kwargs)
    return call


def browser(hub, user: str, timeout: float = 30) -> requests.Session:
    """The user's browser: logged in to the hub, then through the service's OAuth (no confirmation page), which
    ends on the user's jobs page: `timeout` bounds that page's read of all of the user's records."""
    session = hub.login(user)
    page = session.get(f"{hub.url}{PORTAL}", timeout=timeout)
    assert page.status_code == 200 and page.url == f"{hub.url}{PORTAL}jobs", (page.status_code, page.url)
    return session


TINY = {"template": "chexnet", "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 4,
        "model": TINY_MODEL}
JOB_TIMEOUT_S = 900


def as_user_in_terminal(cluster, user: str, *argv: str, check: bool = False) -> subprocess.CompletedProcess:
    """A command as `user` from their home, as typed in a JupyterLab terminal."""
    return subprocess.run([RUNUSER, "-u", user, "--", "env", f"SLURM_CONF={cluster.slurm_conf_path}", *argv],
                          capture_output=True, text=True, timeout=60, cwd="/tmp", check=check)


def portal_client(hub, user: str) -> requests.Session:
    """The dashboard's JSON API as `user` (a hub API token), its base URL in `client.base`."""
    client = hub.client(hub.login(user)).token_session(user, "cluster test")  # trusting an https hub's CA
    client.base = f"{hub.url}{PORTAL}api/"  # type: ignore[attr-defined]
    return client


# --- The directory and the accounts, as an admin changes them -------------------------------------------------------

def ldap_modify(cluster, ldif: str) -> None:
    rootpw = (cluster.directory_dir / "ldap" / "rootpw").read_text()  # the directory's own place
    subprocess.run(["ldapmodify", "-x", "-ZZ", "-H", f"ldap://localhost:{cluster.ldap_port}",
                    "-D", f"cn=admin,{cluster.ldap_base_dn}", "-w", rootpw], input=ldif, text=True, check=True,
                   capture_output=True, env={"LDAPTLS_CACERT": str(cluster.ca_file), "PATH": "/usr/bin:/bin"})


@contextmanager
def in_group(directory, group: str, users: Sequence[str], gid: int = 0) -> Iterator[None]:
    """`users` in the directory's `group` while it lasts: a new group made with `gid` (and deleted after), or added
    to one that exists (and taken out after). `directory`: the test box's or a side's own (its settings)."""
    dn = f"cn={group},{directory.ldap_group_search_base}"
    members = "".join(f"memberUid: {user}\n" for user in users)
    if gid:
        ldap_modify(directory, f"dn: {dn}\nchangetype: add\nobjectClass: posixGroup\ncn: {group}\n"
                               f"gidNumber: {gid}\n{members}")
    else:
        ldap_modify(directory, f"dn: {dn}\nchangetype: modify\nadd: memberUid\n{members}")
    try:
        yield
    finally:
        ldap_modify(directory, f"dn: {dn}\nchangetype: delete\n" if gid else
                    f"dn: {dn}\nchangetype: modify\ndelete: memberUid\n{members}")


def accounts(cluster, *args: str) -> subprocess.CompletedProcess:
    """`python -m portal.accounts ...` as an admin types it, with the test box's settings."""
    return subprocess.run([str(cluster.venv / "bin" / "python"), "-m", "portal.accounts", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO,
                          env={"DSPORTAL_CONFIG": str(TEST_CONFIG), "PATH": "/usr/bin:/bin"})


# --- Spawning through the hub's REST API, followed as the spawn page follows it ---------------------------------------

def read_progress(hub, session, user, events: list, done: threading.Event):
    with session.get(f"{hub.url}/hub/api/users/{user}/server/progress", stream=True, timeout=SERVER_START_S) as stream:
        for line in stream.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                events.append((time.monotonic(), json.loads(line[5:])))
                if events[-1][1].get("failed") or events[-1][1].get("ready"):
                    break
    done.set()


def start_in_background(hub, admin, user: str, options: dict) -> tuple[list, threading.Event]:
    """Ask for a server through the REST API (which answers only once the spawn is done or slow) and follow its
    progress events as the spawn page does."""
    threading.Thread(target=hub.api, args=(admin, "POST", f"users/{user}/server"),
                     kwargs={"data": json.dumps(options)}, daemon=True).start()
    wait_for(lambda: (hub.server(admin, user) or {}).get("pending") == "spawn", 10, interval=0.05,
             what=f"{user}'s spawn to begin")
    events, done = [], threading.Event()
    threading.Thread(target=read_progress, args=(hub, admin, user, events, done), daemon=True).start()
    return events, done


def open_tensorboard_and_a_kernel(hub, session: requests.Session, user: str) -> None:
    """What a user's first minutes in her running server start, through the hub: TensorBoard (on its first visit
    through the server's proxy) and a kernel (as a notebook opened in her lab starts one), with its channels open."""
    from tests.listeners import pids_matching, socket_inodes

    base = f"{hub.url}/user/{user}"
    board = wait_for(lambda: (r := session.get(f"{base}/tensorboard/data/runs", timeout=60)).ok and r,
                     TENSORBOARD_START_TIMEOUT_S + 30, interval=2, what=f"{user}'s TensorBoard through her server")
    assert board.headers["Content-Type"].startswith("application/json")
    assert session.get(f"{base}/lab", timeout=60).status_code == 200
    xsrf = {"X-XSRFToken": session.cookies.get("_xsrf", path=f"/user/{user}/")}
    kernel = session.post(f"{base}/api/kernels", json={"name": "python3"}, headers=xsrf, timeout=60)
    assert kernel.status_code == 201, kernel.text
    wait_for(lambda: any(len(socket_inodes(pid)) >= 5 for pid in pids_matching(["ipykernel", kernel.json()["id"]])),
             120, interval=1, what=f"{user}'s kernel to open its five channels")


# --- Processes of a user: the dashboard's readers, and what runs on each node -----------------------------------------

def readers_of(user: str) -> list[str]:
    """The processes of `user` that read files for the Slurm test box's dashboard (a tail, dd, head or the metrics
    helper), or that outlived whoever started them. Not every such process of the user's: the Kubernetes test
    box's hub beside it, and the users' own boxes, read the same users' files."""
    found = subprocess.run(["pgrep", "-a", "-u", user, "-f", r"portal\.metrics|(^|/)(tail|dd|head) "],
                           capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if not below_another_hub(int(line.split()[0]))]


def below_another_hub(pid: int) -> bool:
    """Whether the nearest hub above the process is not the Slurm test box's. A hub, its proxy and its services
    are root's and carry their box's state dir (deploy/local/parts/hub.py's CLUSTER_IN_A_BOX) or, for the
    Kubernetes side's hub, its config (DSPORTAL_CONFIG) in their environment. An orphan (its parent gone, the
    process reparented) has no hub above it: a leftover, whoever's."""
    ours = f"{MARKER}={TEST_STATE}".encode()
    try:
        while (pid := int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])) > 1:  # its parent
            if os.stat(f"/proc/{pid}").st_uid == 0:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                if ours in environ:
                    return False
                if any(entry.startswith((f"{MARKER}=".encode(), b"DSPORTAL_CONFIG=")) for entry in environ):
                    return True
    except (OSError, ValueError, IndexError):
        pass  # gone meanwhile: counted, as before, until the next look
    return False


# Slurm's KillWait (30 s): a signalled job's processes get that long before SIGKILL; then the epilog runs.
KILL_WAIT_S = 45


def user_processes(user: str, nodes: tuple[str, ...] = NODES) -> dict[str, list[str]]:
    """The user's processes on each node of the box (the Slurm test box's, or `nodes`), as "pid command"."""
    uid, found = pwd.getpwnam(user).pw_uid, {}
    for node in nodes:
        pids = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True).stdout.split()
        found[node] = []
        for pid in pids:
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    found[node].append(f"{pid} {command[:100]}")
            except OSError:
                pass  # gone meanwhile
    return found


# --- Training runs: `python -m chexnet.train` under horovodrun --------------------------------------------------------

PYTHON = sys.executable
HOROVODRUN = str(Path(PYTHON).with_name("horovodrun"))
WORKERS = 2
IMAGE_SIZE = 64
BATCH = 16
LR = "1e-3"


@pytest.fixture(autouse=True)
def horovodrun_installed():
    """Horovod is part of what `make test` installs: missing, every test here fails saying so, never skips."""
    assert Path(HOROVODRUN).exists(), f"{HOROVODRUN} is missing: Horovod is not installed in this venv (make install)"


@dataclass
class Run:
    """A training run that has ended."""

    proc: subprocess.CompletedProcess
    logdir: Path
    checkpoints: Path
    digests: Path
    seconds: float

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr


@dataclass
class Started:
    """A training run under way."""

    child: Child
    logdir: Path
    checkpoints: Path
    digests: Path
    flags: tuple[str, ...]

    def kill(self) -> None:
        self.child.kill()


def start(tmp: Path, *flags: str, workers: int = WORKERS, env: dict | None = None,
          checkpoints: Path | None = None, data: Path | None = None, model: str = TINY_MODEL) -> Started:
    """Start one `python -m chexnet.train` run (with the tests' hooks: tests/chexnet_hooks.py), under `horovodrun -np
    workers` when workers > 1. The model is the tiny one unless a test is about the model: the mechanics (resume,
    kills, NaN, corrupt data, parity) are the same for every model, and DenseNet-121 takes about 6 times as long
    (2 workers, 2 epochs: 85 s against 15 s)."""
    logdir, digests = tmp / "logs", tmp / "digests"
    checkpoints = checkpoints or tmp / "checkpoints"
    command = [PYTHON, "-m", "tests.chexnet_hooks", "--data-dir", str(data), "--logdir", str(logdir),
               "--checkpoint-dir", str(checkpoints), "--batch-size", str(BATCH), "--image-size", str(IMAGE_SIZE),
               "--model", model, "--pipeline", "parallel", "--lr", LR, "--weights-digest-dir", str(digests),
               *TRAINER_SPEEDUP, *flags]
    if workers > 1:
        command = [HOROVODRUN, "-np", str(workers), "-H", f"localhost:{workers}", *command]
    # A session of its own (tests.children), so that a run that hangs is ended with every process it started.
    child = Child(command, cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})})
    return Started(child, logdir, checkpoints, digests, flags)


def finish(run: Started) -> Run:
    """The run once it has ended; the test fails if it hangs (tests.children: STALL_S, LIMIT_S)."""
    proc = run.child.end()
    done = Run(proc, run.logdir, run.checkpoints, run.digests, time.monotonic() - run.child.started)
    print(f"{' '.join(proc.args[:4])}... {run.flags}: rc={proc.returncode} in {done.seconds:.0f} s\n"
          f"{done.output[-6000:]}")
    return done


def train(tmp: Path, *flags: str, workers: int = WORKERS, env: dict | None = None,
          checkpoints: Path | None = None, data: Path | None = None, model: str = TINY_MODEL) -> Run:
    """One `python -m chexnet.train` run (see start)."""
    return finish(start(tmp, *flags, workers=workers, env=env, checkpoints=checkpoints, data=data, model=model))


def accumulator(logdir: Path) -> event_accumulator.EventAccumulator:
    """Every event file under logdir, all events kept; TF2 summaries (tf.summary.scalar too) are tensors."""
    from tensorboard.backend.event_processing import event_accumulator  # here: the other suites need no TensorBoard

    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    return acc


def scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of the training scalars."""
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util

    acc = accumulator(logdir)
    return {tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
            for tag in acc.Tags()[event_accumulator.TENSORS] if not tag.startswith(("_hparams_", "custom_scalars"))}
