"""Nothing of alice's work answers bob's pod on the Kubernetes box (docs/security.md, "The cluster's network is
shared"). While her server runs (spawned through a hub on Kubernetes, TensorBoard and a kernel started through it),
with a 2-node job of one program, then a sweep's trial of it, then the same of the other program (her server and a
2-node job take the box's 4 CPUs), every TCP socket that a process in one of her pods listens on is listed from
inside the pod and must be named by the inventory below (a new one fails the test); bob's own pod, in his namespace,
connects to each at her pod's address and is refused or gets no connection (the NetworkPolicies, which the box's
nodes enforce); her jobs and sweeps train on past the probes (two more epochs each) with every epoch recorded once,
and are then cancelled: that they run to their end proves nothing more about bob. The rendezvous of the PyTorch job
is a file: no pod of hers has a port for it; her TensorBoard and her kernels' channels are Unix sockets in her
server's pod."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.stream import stream

from bench.sweep import GOOD_LR
from portal import jobs
from tests.conftest import PROGRAMS, epochs_recorded, page_error, recorded_epochs, wait_for
from tests.integration.helpers import open_tensorboard_and_a_kernel
from tests.kubernetes.conftest import ALICE, START_TIMEOUT_S

pytestmark = pytest.mark.integration
ALICE_NS, BOB_NS = "dsportal-u-alice", "dsportal-u-bob"
BUSYBOX = "localhost/dsportal-busybox:latest"
# More epochs than any job reaches before it is cancelled: each still trains when the probes reach it, and none
# trains longer than the test needs (2026-12-02: 60 epochs run to their end made this test 122 s).
EPOCHS = 1000
AFTER_PROBES = 2  # epochs each job records after the last probe: one whole epoch trained after bob's attempts
JOB_WAIT_S = 900
TWO_NODES = {"nodes": 2, "gpus_per_node": 1, "epochs": EPOCHS, "batch_size": 8, "image_size": 64,
             "cpus_per_task": 1, "memory_gb": 3, "time_limit": "00:15:00", "model": "tinycnn"}
# A sweep's one trial pod (the learning rate that learns, CPU only), beside the job.
ONE_TRIAL = {**TWO_NODES, "nodes": 1, "gpus_per_node": 0,
             "sweep": {"trials": 1, "parallel": 1, "sampler": "random", "pruner": "none", "space": {"lr": [GOOD_LR]}}}
# Run inside a pod of hers: every TCP socket in LISTEN and the command line of the process that holds it.
LIST = r"""
import json, os
held = {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                held[target[8:-1]] = pid
    except OSError:
        pass
found = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in held:
            pid = held[fields[9]]
            command = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            comm = open(f"/proc/{pid}/comm").read().strip()
            found.append({"port": int(fields[1].split(":")[1], 16), "comm": comm, "command": command})
print(json.dumps(found))
"""
# The inventory: each kind of listener her pods may hold, how it is recognised.
INVENTORY = (
    ("her JupyterLab server (only the hub's pods reach it)", lambda it: "singleuser" in it["command"]),
    # On the pod's own loopback, which no other pod shares; each message needs the kernel's random key.
    ("her kernel's pipe for its subprocesses' output", lambda it: "ipykernel_launcher" in it["command"]),
    ("a Horovod worker's sshd (the job's own key only)", lambda it: it["comm"] == "sshd"),
    ("Open MPI's daemons' out-of-band channel (mpirun, orted)", lambda it: it["comm"] in ("mpirun", "orted")),
    ("a Horovod rank's MPI TCP transport", lambda it: "-m chexnet.train" in it["command"]),
    ("a PyTorch rank's gloo transport", lambda it: "chexnet_torch.train" in it["command"]
     and it["comm"] != "torchrun"),
)


def kind_of(listener: dict) -> str | None:
    return next((name for name, matches in INVENTORY if matches(listener)), None)


def in_pod(core: k8s.CoreV1Api, name: str, namespace: str, command: list[str]) -> str:
    return stream(core.connect_get_namespaced_pod_exec, name, namespace, command=command, stderr=True, stdin=False,
                  stdout=True, tty=False)


@pytest.fixture
def bobs_pod(core):
    name = "bob-probe"
    core.create_namespaced_pod(BOB_NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": BOB_NS},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                 "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                                 "command": ["sh", "-c", "sleep 3600"]}]}})
    try:
        wait_for(lambda: core.read_namespaced_pod(name, BOB_NS).status.phase == "Running", 90,
                 what="bob's pod to run")
        yield name
    finally:
        core.delete_namespaced_pod(name, BOB_NS, grace_period_seconds=0)


def bob_tries(core: k8s.CoreV1Api, pod: str, targets: list[tuple[str, int]]) -> dict[str, str]:
    """From bob's pod, at once: each target "open" or why not."""
    script = " ".join(f"(printf 'GET / HTTP/1.0\\r\\n\\r\\ngarbage' | timeout 8 nc -w 5 {ip} {port} >/dev/null 2>&1;"
                      f" echo \"{ip}:{port} $?\") &" for ip, port in targets) + " wait"
    said = in_pod(core, pod, BOB_NS, ["sh", "-c", script])
    return {line.split()[0]: "open" if line.split()[1] == "0" else "not open" for line in said.splitlines()
            if line.strip() and ":" in line.split()[0]}


@pytest.fixture
def alices_server(k8s_hub, core):
    """alice's JupyterLab in her pod (one CPU, no GPU), spawned through the hub, TensorBoard and a kernel started."""
    alice = k8s_hub.login("alice")
    form = k8s_hub.spawn_form(alice, partition="t4", gpus="0", cpus="1", memory_gb="2", runtime="01:00:00")
    assert form.status_code in (200, 302), page_error(form)
    try:
        events = k8s_hub.client(alice).progress_events("alice", START_TIMEOUT_S + 15)
        assert events[-1].get("ready"), events
        open_tensorboard_and_a_kernel(k8s_hub, alice, "alice")
        yield
    finally:
        k8s_hub.api(k8s_hub.login("admin"), "DELETE", "users/alice/server")
        wait_for(lambda: not core.list_namespaced_pod(ALICE_NS, field_selector="metadata.name=jupyter-alice").items,
                 60, what="alice's server pod to be deleted")


def probe_her_pods(core: k8s.CoreV1Api, bobs_pod: str, seen: dict[str, set[str]]) -> None:
    """Every listener in each of alice's running pods now, named by the inventory, and bob's pod tries each."""
    targets = []
    for pod in core.list_namespaced_pod(ALICE_NS).items:
        if pod.status.phase != "Running":
            continue
        listeners = json.loads(in_pod(core, pod.metadata.name, ALICE_NS, ["python3", "-c", LIST]))
        unnamed = [it for it in listeners if kind_of(it) is None]
        assert not unnamed, f"listeners in {pod.metadata.name} the inventory does not name: {unnamed}"
        for it in listeners:
            seen.setdefault(kind_of(it), set()).add(pod.metadata.name)
            targets.append((pod.status.pod_ip, it["port"]))
    answers = bob_tries(core, bobs_pod, sorted(set(targets)))
    assert answers and set(answers) == {f"{ip}:{port}" for ip, port in targets}, answers
    opened = [target for target, answer in answers.items() if answer == "open"]
    assert not opened, f"bob's pod reached {opened} of alice's"


def test_nothing_of_alices_server_jobs_and_sweeps_answers_bobs_pod_and_her_work_goes_on(kube, cfg, core, bobs_pod,
                                                                                         alices_server, artifacts):
    home = kube.box.path("volumes", "home", "alice", "jobs", cfg.cluster_name)
    seen: dict[str, set[str]] = {}
    for program in PROGRAMS:
        running = []  # (job, the checkpoints its epochs are recorded in: the sweep's one trial's)
        try:
            for request, parts in ((TWO_NODES, ()), (ONE_TRIAL, ("trials", "0"))):
                job = jobs.submit({**request, "template": program}, user=ALICE[0], groups=ALICE[1], cfg=cfg)
                running.append((job, home / job.id / Path(*parts) / "checkpoints"))
            # One at a time: her server and a 2-node job take the box's 4 CPUs, so the trial starts once the job
            # before it is cancelled. Each one's listeners are probed once its ranks train (they have met, and
            # listen); it must then train two more epochs, every epoch once, and is cancelled.
            for job, checkpoints in running:
                wait_for(lambda where=checkpoints: epochs_recorded(where) >= 1, JOB_WAIT_S, interval=0.5,
                         what=f"job {job.id}'s first epoch")
                probe_her_pods(core, bobs_pod, seen)
                wanted = epochs_recorded(checkpoints) + AFTER_PROBES
                wait_for(lambda where=checkpoints, job=job, wanted=wanted: epochs_recorded(where) >= wanted
                         or job.state not in ("PENDING", "RUNNING"), JOB_WAIT_S, interval=0.5,
                         what=f"job {job.id} to train on after the probes")
                assert job.state == "RUNNING", (job.state, job.logs(tail=60))
                recorded = recorded_epochs(checkpoints)
                assert recorded == list(range(1, len(recorded) + 1)) and len(recorded) >= wanted, (job.id, recorded)
                job.cancel()
        finally:
            for job, _ in running:
                if not job.done:
                    job.cancel()
    (artifacts / "listeners-kubernetes.txt").write_text(  # what was found and tried, for the record
        "".join(f"{kind}: {', '.join(sorted(pods))}\n" for kind, pods in sorted(seen.items())))
    assert {"her JupyterLab server (only the hub's pods reach it)", "a PyTorch rank's gloo transport",
            "a Horovod worker's sshd (the job's own key only)"} <= set(seen), seen
