"""Nothing of alice's jobs answers bob's pod on the Kubernetes box (docs/security.md, "The cluster's network is
shared"). While a 2-node job of each program runs, every TCP socket that a process in one of her job's pods listens
on is listed from inside the pod and must be named by the inventory below (a new one fails the test); bob's own pod,
in his namespace, connects to each at her pod's address and is refused or gets no connection (the job's
NetworkPolicy, which the box's nodes enforce); her jobs complete with every epoch recorded once. The rendezvous of
the PyTorch job is a file: no pod of hers has a port for it. Her server's pod: test_network_policy.py (only the hub's
pods reach it) and tests/integration/test_listeners.py (its TensorBoard and kernels on Unix sockets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.stream import stream

from portal import jobs
from portal.scheduler.kubernetes.manifests import LABEL_JOB
from tests.conftest import ARTIFACTS, epochs_recorded, wait_for
from tests.kubernetes.conftest import ALICE

pytestmark = pytest.mark.integration
ALICE_NS, BOB_NS = "dsportal-u-alice", "dsportal-u-bob"
BUSYBOX = "localhost/dsportal-busybox:latest"
EPOCHS = 60
JOB_WAIT_S = 900
TWO_NODES = {"nodes": 2, "gpus_per_node": 1, "epochs": EPOCHS, "batch_size": 8, "image_size": 64,
             "cpus_per_task": 1, "memory_gb": 3, "time_limit": "00:15:00", "model": "tinycnn"}
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
# The inventory: each kind of listener her job's pods may hold, how it is recognised.
INVENTORY = (
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


def test_nothing_of_alices_jobs_answers_bobs_pod_and_her_jobs_complete(kube, cfg, core, bobs_pod):
    home = kube.box.path("volumes", "home", "alice", "jobs", cfg.cluster_name)
    running = [jobs.submit({**TWO_NODES, "template": program}, user=ALICE[0], groups=ALICE[1], cfg=cfg)
               for program in ("chexnet-torch", "chexnet")]
    seen: dict[str, set[str]] = {}
    try:
        for job in running:
            wait_for(lambda job=job: epochs_recorded(home / job.id / "checkpoints") >= 1, JOB_WAIT_S, interval=0.5,
                     what=f"job {job.id}'s first epoch")
            targets = []
            for pod in core.list_namespaced_pod(ALICE_NS, label_selector=f"{LABEL_JOB}={job.id}").items:
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
            assert not opened, f"bob's pod reached {opened} of job {job.id}"
        assert "a PyTorch rank's gloo transport" in seen and "a Horovod worker's sshd (the job's own key only)" in seen
        (ARTIFACTS / "listeners-kubernetes.txt").write_text(  # what was found and tried, for the record
            "".join(f"{kind}: {', '.join(sorted(pods))}\n" for kind, pods in sorted(seen.items())))
        for job in running:
            assert job.wait(timeout=JOB_WAIT_S, poll=5) == "COMPLETED", job.logs(tail=60)
            lines = (Path(home) / job.id / "checkpoints" / "epochs.jsonl").read_text().splitlines()
            assert [json.loads(line)["epoch"] for line in lines] == list(range(1, EPOCHS + 1)), job.id
    finally:
        for job in running:
            if not job.done:
                job.cancel()
