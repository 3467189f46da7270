"""Nothing of alice's work answers bob (docs/security.md, "The cluster's network is shared"). While alice's server
(TensorBoard started through its proxy, a kernel running), a 2-node job of each program and a sweep of each program
run on the Slurm box, every TCP socket her processes listen on, on either node, is listed and named by the inventory
below; bob's own process on each node then connects to each one, sends a request and garbage, and gets nothing of
hers: no byte back, or the server's answer that he must log in to the hub. A listener the inventory does not name
fails the test (a new one needs its entry, and its line in docs/security.md). Her jobs and sweeps then train on
past the probes (two more epochs each, their ranks still exchanging gradients), with every epoch recorded once, and
are cancelled: that they run to their end proves nothing more about bob.
"""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.sweep import GOOD_LR
from portal import jobs
from portal.runas import RUNUSER
from tests.conftest import NODES, PROGRAMS, epochs_recorded, recorded_epochs, wait_for
from tests.integration.helpers import JOB_TIMEOUT_S, TINY, open_tensorboard_and_a_kernel, portal_client
from tests.listeners import tcp_listeners

# More epochs than any job reaches before it is cancelled: every job still trains when the probes reach it (at 30,
# on a loaded CI-order run (f7f6436), the PyTorch job had ended before the probes of the jobs before it were done,
# its gloo transport never seen), and none trains longer than the test needs (2026-12-02: a run to the 60th epoch
# made this the Slurm side's longest test).
EPOCHS = 1000
# Epochs each job must record after the last probe: one whole epoch trained after bob's garbage, not one that was
# ending as the probes came.
AFTER_PROBES = 2
# A sweep's trial runs its program's own job script (one node, one process): one trial of the learning rate that
# learns, CPU only (her 4 GPUs are the jobs'), long enough to be probed while it trains.
SWEEP = {"trials": 1, "parallel": 1, "sampler": "random", "pruner": "none", "space": {"lr": [GOOD_LR]}}
# What bob's process does at each port: connect, say an HTTP request and then garbage, read what comes back.
PROBE = r"""
import json, socket, sys, threading
found = {}
def probe(host, port):
    key = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            s.sendall(b"GET /user/alice/api/contents HTTP/1.0\r\nHost: x\r\n\r\n" + bytes(range(256)) * 16)
            s.settimeout(3)
            reply = b""
            try:
                while len(reply) < 2000:
                    chunk = s.recv(2000)
                    if not chunk:
                        break
                    reply += chunk
            except OSError:
                pass
            found[key] = {"connected": True, "reply": reply.decode("latin-1")[:400]}
    except OSError as err:
        found[key] = {"connected": False, "reply": type(err).__name__}
threads = [threading.Thread(target=probe, args=(h, p)) for h, p in json.loads(sys.argv[1])]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps(found))
"""


@dataclass(frozen=True)
class Listener:
    node: str
    pid: int
    comm: str
    command: str
    address: str
    port: int


def nothing_back(reply: str) -> bool:
    return reply == ""


def a_zmq_greeting_only(reply: str) -> bool:
    """ZeroMQ's greeting (ZMTP: a signature 0xFF ... 0x7F, its version and mechanism, 64 bytes at most), which
    every ZeroMQ socket sends first, and nothing after it."""
    return reply == "" or (len(reply) <= 64 and reply[0] == "\xff" and (len(reply) < 10 or reply[9] == "\x7f"))


def only_the_hubs_login(reply: str) -> bool:
    """The server answers an unauthenticated request with a redirect to the hub's login, or 401/403: nothing of
    alice's files."""
    status = reply.split("\r\n", 1)[0]
    return status.startswith("HTTP/") and status.split()[1] in ("302", "401", "403")


# The inventory: every kind of listener alice's work may open, how it is recognised, and what bob may get from it.
# docs/security.md has the same list with what protects each one.
INVENTORY: tuple[tuple[str, Callable[[Listener], bool], Callable[[str], bool]], ...] = (
    # By the program first: a launcher's command line names what it launches.
    ("srun's step I/O and messages (Slurm's munge credentials)", lambda it: it.comm == "srun", nothing_back),
    ("Open MPI's daemons' out-of-band channel (mpirun, orted)", lambda it: it.comm in ("mpirun", "orted", "prted"),
     nothing_back),
    ("her JupyterLab server (the hub's OAuth)", lambda it: "singleuser" in it.command, only_the_hubs_login),
    # Her kernels' channels and her TensorBoard listen on Unix sockets in her own directories: no entry, so a TCP
    # port of either fails the test. This one stays on loopback (ipykernel binds it to tcp://127.0.0.1 whatever the
    # transport): the output of processes a kernel forks; each message must carry the kernel's random 16 bytes.
    ("her kernel's pipe for its subprocesses' output (a random key in each message)",
     lambda it: "ipykernel_launcher" in it.command, a_zmq_greeting_only),
    ("a Horovod rank's MPI TCP transport", lambda it: "-m chexnet.train" in it.command, nothing_back),
    ("a PyTorch rank's gloo transport", lambda it: "chexnet_torch.train" in it.command and it.comm != "torchrun",
     nothing_back),
)


def kind_of(listener: Listener) -> tuple[str, Callable[[str], bool]] | None:
    for name, matches, allowed in INVENTORY:
        if matches(listener):
            return name, allowed
    return None


def listeners_of(user: str) -> list[Listener]:
    """Every TCP socket in LISTEN that a process of `user` holds, on each node of the box."""
    uid, found = pwd.getpwnam(user).pw_uid, []
    for node in NODES:
        pids = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True).stdout.split()
        for pid in map(int, pids):
            try:
                if os.stat(f"/proc/{pid}").st_uid != uid:
                    continue
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue  # gone meanwhile
            found += [Listener(node, pid, comm, command, address, port) for address, port in tcp_listeners(pid)]
    return found


def node_address(node: str) -> str:
    shown = subprocess.run(["ip", "-n", node, "-4", "-o", "addr", "show", "scope", "global"], capture_output=True,
                           text=True, check=True).stdout
    return shown.split()[3].split("/")[0]


def targets_from(node: str, listener: Listener) -> list[tuple[str, int]]:
    """Where bob's process on `node` reaches `listener`: its loopback only from its own node."""
    if ipaddress.ip_address(listener.address).is_loopback:
        return [(listener.address, listener.port)] if node == listener.node else []
    if node == listener.node and ipaddress.ip_address(listener.address).is_unspecified:
        return [("127.0.0.1", listener.port), (node_address(listener.node), listener.port)]
    return [(node_address(listener.node), listener.port)]


def bob_probes(node: str, targets: list[tuple[str, int]]) -> dict[str, dict]:
    """bob's own process on `node` tries each target (as his job there would)."""
    if not targets:
        return {}
    done = subprocess.run(["ip", "netns", "exec", node, RUNUSER, "-u", "bob", "--", sys.executable, "-I", "-c",
                           PROBE, json.dumps(targets)], capture_output=True, text=True, timeout=120, cwd="/tmp")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def probe_everything(seen: dict[tuple[str, int, int], str]) -> None:
    """List alice's listeners now, check each against the inventory, and have bob try each from both nodes."""
    listeners = listeners_of("alice")
    unnamed = [it for it in listeners if kind_of(it) is None]
    assert not unnamed, f"listeners of alice's that the inventory does not name: {unnamed}"
    for node in NODES:
        targets = {target: it for it in listeners for target in targets_from(node, it)}
        answers = bob_probes(node, list(targets))
        for (host, port), it in targets.items():
            name, allowed = kind_of(it)
            answer = answers[f"{host}:{port}"]
            assert not answer["connected"] or allowed(answer["reply"]), (
                f"bob on {node} got an answer from {name} at {host}:{port} ({it.comm}): {answer['reply'][:200]!r}")
            seen[(it.node, it.port, it.pid)] = name


@pytest.fixture
def alice_server(hub, admin, alice):
    assert hub.spawn_form(alice, partition="gpu", gpus=0, cpus=1, memory_gb=4, runtime="01:00:00").status_code == 302
    hub.wait_ready(admin, "alice")
    open_tensorboard_and_a_kernel(hub, alice, "alice")
    yield
    hub.stop(admin, "alice")


def test_nothing_of_alices_server_jobs_and_sweeps_answers_bob_and_her_work_goes_on(cluster, hub, demo_data,
                                                                                    no_jobs_left, alice_server,
                                                                                    artifacts):
    client = portal_client(hub, "alice")
    asks = [{"template": program, "nodes": 2, "gpus_per_node": 1} for program in PROGRAMS] + \
           [{"template": program, "gpus_per_node": 0, "sweep": SWEEP} for program in PROGRAMS]
    running = []  # (job, the checkpoints its epochs are recorded in: a sweep's one trial's)
    for request in asks:
        submitted = client.post(f"{client.base}jobs", json={**TINY, **request, "epochs": EPOCHS}, timeout=60)
        assert submitted.status_code == 201, submitted.text
        job = jobs.get(submitted.json()["id"], user="alice")
        running.append((job, Path(job.job_dir, *(("trials", "0") if "sweep" in request else ()), "checkpoints")))
    seen: dict[tuple[str, int, int], str] = {}
    for job, checkpoints in running:  # each one's listeners once its ranks train (they have met, and listen)
        wait_for(lambda where=checkpoints: epochs_recorded(where) >= 1, JOB_TIMEOUT_S, interval=0.5,
                 what=f"job {job.id}'s first epoch")
        probe_everything(seen)
    kinds = set(seen.values())
    (artifacts / "listeners-slurm.txt").write_text(  # what was found and tried, for the record (docs/security.md)
        "".join(f"{node} port {port} pid {pid}: {kind}\n" for (node, port, pid), kind in sorted(seen.items())))
    assert "her JupyterLab server (the hub's OAuth)" in kinds and "a PyTorch rank's gloo transport" in kinds, seen
    assert "a Horovod rank's MPI TCP transport" in kinds, seen
    probed = {job.id: epochs_recorded(checkpoints) for job, checkpoints in running}
    for job, checkpoints in running:
        wanted = probed[job.id] + AFTER_PROBES
        wait_for(lambda where=checkpoints, job=job, wanted=wanted: epochs_recorded(where) >= wanted
                 or job.state not in ("PENDING", "RUNNING"), JOB_TIMEOUT_S, interval=0.5,
                 what=f"job {job.id} to train on after the probes")
        assert job.state == "RUNNING", (job.state, job.logs(tail=60))
    for job, _ in running:
        job.cancel()
    for job, checkpoints in running:
        assert job.wait(timeout=JOB_TIMEOUT_S, poll=2) == "CANCELLED", job.logs(tail=60)
        recorded = recorded_epochs(checkpoints)
        assert recorded == list(range(1, len(recorded) + 1)) and len(recorded) >= probed[job.id] + AFTER_PROBES, \
            (job.id, recorded)
