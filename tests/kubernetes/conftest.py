"""Test session set-up for the Kubernetes path: a private kubebox (etcd, the control plane, 2 nodes with containerd
and a kubelet each, fake GPUs), its images imported from podman.

The binaries are built once per machine by deploy/kubernetes/build-kubernetes.sh (a no-op when cached; about
9.5 minutes the first time); `make test` runs it before any suite. The box gets its own state dir, ports, names
and addresses, apart from the Slurm test box (13389, 16636, 16817, 16818, 18000, 18001, 18081, 18090) and from a
user's `python -m deploy.kubernetes.kubebox up` (16443-16445, "kube", 198.19.0.0/20).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient

from deploy.kubernetes import kubebox
from tests.conftest import PORT_OFFSET, TEST_SETTINGS, TINY_MODEL, Hub
from tests.conftest import box as local_box

REPO = Path(__file__).resolve().parents[2]
# Two sessions at once need their own state dir and ports: set both variables (as for the Slurm test box).
KUBE_STATE = Path(os.environ.get("DSPORTAL_TEST_KUBE_STATE", "/var/tmp/dsportal-test-kube"))
KUBE_API_PORT = 26443 + int(os.environ.get("DSPORTAL_TEST_PORT_OFFSET", "0"))  # etcd: the next two ports
# Its bridge, nodes and cgroups are named by KUBE_NAME, and its addresses lie in KUBE_NETWORK (a `make up-k8s` box
# has "kube" and 198.19.0.0/20): a second session needs other values too.
KUBE_NAME = os.environ.get("DSPORTAL_TEST_KUBE_NAME", "kubet")
KUBE_NETWORK = os.environ.get("DSPORTAL_TEST_KUBE_NETWORK", "198.19.16.0/20")
BUILD_TIMEOUT = 1800  # seconds; the first build takes about 9.5 minutes on 2 cores
# The hubs on Kubernetes log users in against a directory of this side's own (a slapd started with
# `python -m deploy.local.box`, as `make up-k8s` starts the Slurm box's): the Slurm test box, which the other side of
# `make test` runs beside this one and stops and restarts in its tests, is never needed here.
DIRECTORY_STATE = Path(os.environ.get("DSPORTAL_TEST_KUBE_DIRECTORY", "/var/tmp/dsportal-test-kube-ldap"))
DIRECTORY_PORTS = {"ldap_port": 23389 + PORT_OFFSET, "ldaps_port": 26636 + PORT_OFFSET}
# Two users as the notebook API names them, and the small job that both schedulers run (test_jobs_on_both_schedulers.py,
# test_mpijobs.py).
ALICE, BOB = ("alice", ["datascientists", "gpu-users"]), ("bob", ["datascientists"])
TINY = {"epochs": 1, "batch_size": 8, "image_size": 64, "gpus_per_node": 1, "cpus_per_task": 1, "memory_gb": 4,
        "time_limit": "00:10:00", "model": TINY_MODEL}


@dataclass(frozen=True)
class Kube:
    """The running test box: where it lives, and a client (the `kubernetes` DynamicClient) per identity."""

    box: kubebox.KubeBox
    cluster: kubebox.Cluster
    admin: DynamicClient
    hub: DynamicClient  # ServiceAccount dsportal/dsportal-hub
    alice: DynamicClient  # her own static token (as `kubectl --kubeconfig alice.kubeconfig` would be)
    bob: DynamicClient
    kubeconfigs: dict[str, Path]

    def read(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict:
        """One object as the admin reads it (the client raises NotFoundError, status 404, when it is not there)."""
        return kubebox.resource(self.admin, api_version, kind).get(name=name, namespace=namespace).to_dict()


def build_binaries() -> None:
    """Build (or find cached) the Kubernetes servers; fail the session, never skip."""
    script = REPO / "deploy" / "kubernetes" / "build-kubernetes.sh"
    try:
        result = subprocess.run([str(script)], capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{script} did not finish within {BUILD_TIMEOUT} s", pytrace=False)
    if result.returncode != 0:
        pytest.fail(f"{script} failed (it needs root, apt and a Debian bookworm mirror):\n"
                    f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}", pytrace=False)
    print(result.stdout.strip())


@pytest.fixture(scope="session")
def kube():
    """Build if needed, start a kubebox from nothing (it gives alice and bob their namespaces and volumes); stop
    it afterwards."""
    build_binaries()
    box = kubebox.KubeBox(KUBE_STATE, api_port=KUBE_API_PORT, name=KUBE_NAME, network=KUBE_NETWORK)
    if KUBE_STATE.exists():
        kubebox.down(box)  # a box left by an interrupted session
    shutil.rmtree(KUBE_STATE, ignore_errors=True)
    lines: list[str] = []
    started = time.monotonic()
    try:
        cluster = kubebox.up(box, report=lines.append)
    except kubebox.KubeBoxError as err:  # its message names the log to read, with its last lines
        kubebox.down(box)
        pytest.fail(f"the kubebox did not start: {err}\n" + "\n".join(lines), pytrace=False)
    print(f"\nkubebox up in {time.monotonic() - started:.1f} s at {cluster.api_url}")
    clients = {name: kubebox.from_kubeconfig(path) for name, path in cluster.kubeconfigs.items()}
    yield Kube(box, cluster, clients["admin"], clients["hub"], clients["alice"], clients["bob"], cluster.kubeconfigs)
    # What it stopped and what it left ("left /var/lib/cni: holds networks/podman, not the box's"); KubeBoxError
    # when something of the box's own is left.
    print("\nkubebox down:\n" + "\n".join(kubebox.down(box)))


@pytest.fixture(scope="session")
def directory():
    """This side's own LDAP directory (the demo users, TLS with its own CA): the settings to reach it."""
    from portal.config import load

    settings = DIRECTORY_STATE.with_suffix(".yaml")
    local_box("down", check=False, settings=settings) if settings.exists() else None  # one a killed session left
    shutil.rmtree(DIRECTORY_STATE, ignore_errors=True)
    settings.write_text("".join(f"{k}: {v}\n" for k, v in {**TEST_SETTINGS, "state_dir": str(DIRECTORY_STATE),
                                                            "directory_dir": str(DIRECTORY_STATE / "directory"),
                                                            **DIRECTORY_PORTS}.items()))
    started = local_box("start", "slapd", check=False, settings=settings)
    if started.returncode != 0:
        pytest.fail(f"this side's directory did not start:\n{started.stdout}\n{started.stderr}", pytrace=False)
    try:
        yield load({"DSPORTAL_CONFIG": str(settings)})
    finally:
        local_box("down", check=False, settings=settings)
        shutil.rmtree(DIRECTORY_STATE, ignore_errors=True)
        settings.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def cfg(kube):
    """The portal's settings for plain Kubernetes jobs on the test box, acting as the hub's ServiceAccount."""
    from portal.config import load

    return dataclasses.replace(load(), scheduler="kubernetes", k8s_kubeconfig=str(kube.kubeconfigs["hub"]),
                               k8s_jobs="plain")


@pytest.fixture(scope="module")
def core(kube):
    """The box's core API as its admin."""
    return k8s.CoreV1Api(kubebox.api_client(kube.box, kubebox.read_tokens(kube.box)["admin"]))


@pytest.fixture(scope="module")
def pod_hub(directory, kube):
    """`kubebox up` with the hub (deploy/kubernetes/kubeparts/hub.py): its image imported, its objects made, its pod
    ready; removed after the module (test_hub_in_a_pod, the dashboard journeys). About 40 s."""
    lines: list[str] = []
    started = time.monotonic()
    try:
        kubebox.up(kube.box, report=lines.append, hub_directory=directory)
    except kubebox.KubeBoxError as err:
        print("\n".join(kubebox.remove_hub(kube.box)))
        pytest.fail(f"the hub's pod did not start: {err}\n" + "\n".join(lines[-20:]), pytrace=False)
    print(f"\nthe hub in a pod, up in {time.monotonic() - started:.1f} s:\n" + "\n".join(lines[-8:]))
    try:
        yield Hub(kubebox.box_hub.url(kube.box), str(kube.box.ca_file))
    finally:
        print("\n".join(kubebox.remove_hub(kube.box)))
