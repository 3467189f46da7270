"""Test session set-up for the Kubernetes path: a private kubebox (etcd, the control plane, 2 nodes with containerd
and a kubelet each, fake GPUs), its images imported from podman.

The binaries are built once per machine by deploy/kubernetes/build-kubernetes.sh (a no-op when cached; about
9.5 minutes the first time); `make test` runs it before any suite. The box gets its own state dir, ports, names
and addresses, apart from the Slurm test box (13389, 16636, 16817, 16818, 18000, 18001, 18081, 18090) and from a
user's `python -m deploy.kubernetes.kubebox up` (16443-16445, "kube", 198.19.0.0/20).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient

from deploy.kubernetes import kubebox
from deploy.kubernetes.kubeparts import gpus as gpus_part
from deploy.kubernetes.kubeparts.api import ready as api_ready
from deploy.supervise import start_service, stop_service
from portal.directory import search_password_file
from tests.conftest import (
    BUDGET_GROUP,
    BUDGET_HOURS,
    PORT_OFFSET,
    SITE_PROGRAMS,
    TEST_SETTINGS,
    TEST_STATE,
    TINY_MODEL,
    Hub,
    side_of,
    wait_for,
)
from tests.conftest import box as local_box

REPO = Path(__file__).resolve().parents[2]
# Two sessions at once need their own state dir and ports: set both variables (as for the Slurm test box).
KUBE_STATE = Path(os.environ.get("DSPORTAL_TEST_KUBE_STATE", "/var/tmp/dsportal-test-kube"))
KUBE_API_PORT = 26443 + int(os.environ.get("DSPORTAL_TEST_PORT_OFFSET", "0"))  # etcd: the next two ports
# Its bridge, nodes and cgroups are named by KUBE_NAME, and its addresses lie in KUBE_NETWORK (a `make up-k8s` box
# has "kube" and 198.19.0.0/20): a second session needs other values too.
KUBE_NAME = os.environ.get("DSPORTAL_TEST_KUBE_NAME", "kubet")
KUBE_NETWORK = os.environ.get("DSPORTAL_TEST_KUBE_NETWORK", "198.19.16.0/20")
# Each node's CPU weight (KubeBox.node_cpu_shares): half a session's, so that a job training on both nodes weighs
# one Slurm rank. This side ended about 6 minutes before the Slurm box's at 1024 (make test, 2026-12-05, at 1862309;
# docs/testing.md "How long it takes"), 4.5 minutes before it at 512 (6b79dbb), 4 at 256 (fc81c8b); with the
# Kubernetes tests added since, at 256 it became the longer side: 1,714 s against 1,566 (d4cb1ba), 2,112 against
# 1,867 in the newcomer's order (16b18c0).
NODE_CPU_SHARES = 512
# The hub in a pod watches idle GPUs as the Slurm test box does (tests/conftest.py: its one watched group, short),
# its nodes' readers as often (KubeBox.hub_settings); a group as the environment spells it: group=seconds.
GPU_WATCH = (("default_gpu_idle_s", str(TEST_SETTINGS["default_gpu_idle_s"])),
             ("gpu_idle_s", ",".join(f"{group}={s}" for group, s in TEST_SETTINGS["gpu_idle_s"].items())),
             ("gpu_idle_grace_s", str(TEST_SETTINGS["gpu_idle_grace_s"])),
             ("gpu_read_every_s", str(TEST_SETTINGS["gpu_read_every_s"])))
# The site's own program and launcher as the hub in a pod registers them (its directory and claim: the box's).
SITE_REGISTRATIONS = tuple((name, ",".join(TEST_SETTINGS[name])) for name in ("site_programs", "site_launchers"))
BUILD_TIMEOUT = 1800  # seconds; the first build takes about 9.5 minutes on 2 cores
# The hubs on Kubernetes log users in against a directory of this side's own (a slapd started with
# `python -m deploy.local.box`, as `make up-k8s` starts the Slurm box's): the Slurm test box, which the other side of
# `make test` runs beside this one and stops and restarts in its tests, is never needed here.
DIRECTORY_STATE = Path(os.environ.get("DSPORTAL_TEST_KUBE_DIRECTORY", "/var/tmp/dsportal-test-kube-ldap"))
DIRECTORY_PORTS = {"ldap_port": 23389 + PORT_OFFSET, "ldaps_port": 26636 + PORT_OFFSET}
# Two users as the notebook API names them, and the small job that both schedulers run (test_jobs_on_both_schedulers.py,
# test_mpijobs.py).
ALICE, BOB = ("alice", ["datascientists", "gpu-users"]), ("bob", ["datascientists"])
# The hub with scheduler: kubernetes that tests start on this machine (k8s_hub): its state and ports.
HUB_STATE = Path(os.environ.get("DSPORTAL_TEST_K8S_HUB_STATE", "/var/tmp/dsportal-test-k8s-hub"))
HUB_PORT = 18200 + PORT_OFFSET
START_TIMEOUT_S = 120  # a pod starts in seconds here (its image is on every node); JupyterLab takes longer
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
    box = kubebox.KubeBox(KUBE_STATE, api_port=KUBE_API_PORT, name=KUBE_NAME, network=KUBE_NETWORK,
                          node_cpu_shares=NODE_CPU_SHARES, hub_settings=GPU_WATCH + SITE_REGISTRATIONS,
                          site_python_path=str(SITE_PROGRAMS))  # the site's program: its pods' claim, the hub's mount
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


@pytest.fixture(autouse=True)
def api_server_back_after_each_test(request):
    """A test that stops the API server brings it back itself; when it fails before it does, it is brought back here
    (`kubebox up` starts what is stopped), so that the failure stays that test's own. On 2026-12-03 notebook 02's
    outage outlived its failed wait, and the eleven Kubernetes tests after it found no API server. Only for a test
    that had the box (its `kube` among its fixtures): the Slurm box's side never starts it."""
    yield
    kube = request.node.funcargs.get("kube")
    if kube is None or (why := api_ready(kube.admin.client)) is None:
        return
    print(f"\nthe API server did not answer after {request.node.name} ({why}): kubebox up")
    kubebox.up(kube.box, report=print)


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


# The modules that use the hub in a pod (pod_hub), run one after the other at the end of this side: the hub is made
# once for all of them and removed after the last. When each module made and removed its own, their setups and
# teardowns took 223 s of a1642d5's `make test` (the first make 59 s, each removal 11 to 52 s). Nothing else runs
# beside it: no other test counts on a pod of the hub's taking a node's CPU, nor on its `up` (a lost node's
# `kubebox.up` would bring the hub in line again).
POD_HUB_MODULES = ("test_dashboard_journeys.py", "test_directory_from_a_pod.py", "test_gpu_watch_on_kubernetes.py",
                   "test_hub_in_a_pod.py", "test_network_policy.py")


def needs_pod_hub(item: pytest.Item) -> bool:
    """A test of this side in one of POD_HUB_MODULES (the dashboard journeys' "[slurm]" ones are the other side's)."""
    path = item.nodeid.split("::", 1)[0]
    return path.rsplit("/", 1)[-1] in POD_HUB_MODULES and path.startswith("tests/kubernetes/") and \
        side_of(item.nodeid) == "kube"


def pytest_collection_modifyitems(session, config, items):
    """This side's tests of the hub in a pod (POD_HUB_MODULES) after its other tests of tests/kubernetes/, each
    module's order kept. They take the places this side's tests held, so the rest of the order (tests/conftest.py's:
    the images last, the other sides) stays as it is, whichever of the two hooks runs first."""
    places = [i for i, item in enumerate(items)
              if item.nodeid.startswith("tests/kubernetes/") and side_of(item.nodeid) == "kube"]
    side = [items[i] for i in places]
    ordered = [t for t in side if not needs_pod_hub(t)] + [t for t in side if needs_pod_hub(t)]
    for i, item in zip(places, ordered, strict=True):
        items[i] = item


_pod_hub: dict[str, Hub] = {}  # "hub": the hub in a pod, while it runs
_next_test: dict[str, bool] = {"needs_pod_hub": False}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """Before a test's fixtures are torn down: whether the next test uses the hub in a pod (pod_hub keeps it then)."""
    _next_test["needs_pod_hub"] = nextitem is not None and needs_pod_hub(nextitem)


@pytest.fixture(scope="module")
def pod_hub(directory, kube):
    """`kubebox up` with the hub (deploy/kubernetes/kubeparts/hub.py): its image imported, its objects made, its pod
    ready; made by the first module that uses it and kept while the next test uses it too (POD_HUB_MODULES run one
    after the other), then removed."""
    if "hub" not in _pod_hub:
        _pod_hub["hub"] = _pod_hub_up(directory, kube)
    try:
        yield _pod_hub["hub"]
    finally:
        if not _next_test["needs_pod_hub"]:
            del _pod_hub["hub"]
            print("\n".join(kubebox.remove_hub(kube.box)))


def _pod_hub_up(directory, kube) -> Hub:
    lines: list[str] = []
    started = time.monotonic()
    try:
        kubebox.up(kube.box, report=lines.append, hub_directory=directory)
    except kubebox.KubeBoxError as err:
        print("\n".join(kubebox.remove_hub(kube.box)))
        pytest.fail(f"the hub's pod did not start: {err}\n" + "\n".join(lines[-20:]), pytrace=False)
    print(f"\nthe hub in a pod, up in {time.monotonic() - started:.1f} s:\n" + "\n".join(lines[-8:]))
    gpu_readers_stopped(kube.box)
    return Hub(kubebox.box_hub.url(kube.box), str(kube.box.ca_file))


# The nodes' GPU readers, which `up` starts with the hub as a site runs them, run only for the test of the GPU
# watch (gpu_readers): without their readings directory the hub's watch passes over nothing (GpuWatcher.once), so
# the other tests of the hub in a pod share the box with no reader listing its pods and no watch asking for a
# snapshot every 5 s (TEST_SETTINGS' gpu_read_every_s). At 10a7f6b they ran beside all of them.
def gpu_readers_stopped(box: kubebox.KubeBox) -> None:
    """The readers stopped and their directory gone, for as long as one watch pass takes: a pass under way when it
    went writes its state there again (Watch._save)."""
    for svc in gpus_part.services(box):
        stop_service(svc, box)
    folder, every_s = gpus_part.readings_dir(box), float(gpus_part.every_s(box))

    def gone() -> bool:
        shutil.rmtree(folder, ignore_errors=True)
        time.sleep(every_s + 1)
        return not folder.exists()
    wait_for(gone, 10 * every_s, interval=0, what=f"{folder} to stay gone")


@contextlib.contextmanager
def gpu_readers(box: kubebox.KubeBox) -> Iterator[None]:
    """The nodes' GPU readers running, each with its first reading written; stopped and their readings gone
    after."""
    try:
        for svc in gpus_part.services(box):
            start_service(svc, box)
        yield
    finally:
        gpu_readers_stopped(box)


@pytest.fixture(scope="module")
def k8s_hub(directory, kube):
    """A hub with scheduler: kubernetes (its own ports and state), logging users in against this side's directory."""
    shutil.rmtree(HUB_STATE, ignore_errors=True)
    (HUB_STATE / "hub").mkdir(parents=True)
    settings = {
        "state_dir": HUB_STATE, "hub_port": HUB_PORT, "hub_api_port": HUB_PORT + 81,
        "proxy_api_port": HUB_PORT + 1, "dashboard_port": HUB_PORT + 90, "cull_idle_timeout": 0,
        "ldap_port": directory.ldap_port, "ldaps_port": directory.ldaps_port, "ldap_ca_file": directory.ca_file,
        "ldap_search_password_file": search_password_file(directory),  # the directory's portal identity's
        "scheduler": "kubernetes", "k8s_kubeconfig": kube.kubeconfigs["hub"], "start_timeout": START_TIMEOUT_S,
        "slurm_conf": TEST_STATE / "slurm" / "slurm.conf",
        # the pods reach the hub's API on the Kubernetes box's bridge; the box's nodes have 4 fake t4 GPUs each
        "hub_api_ip": kube.box.api_address, "k8s_node_gpus": kube.box.gpus_per_node, "k8s_node_cpus": 2,
        "k8s_node_memory_gb": 8, "gpu_hours_budget": {BUDGET_GROUP: BUDGET_HOURS},  # as the Slurm test box's
    }
    config = HUB_STATE / "portal.yaml"
    config.write_text("".join(f"{k}: {v}\n" for k, v in settings.items()))
    log = (HUB_STATE / "hub.log").open("w")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DSPORTAL_")}, "DSPORTAL_CONFIG": str(config)}
    proc = subprocess.Popen([str(Path(sys.executable).with_name("jupyterhub")), "-f",
                             str(REPO / "jupyterhub_config.py")], cwd=HUB_STATE, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{HUB_PORT}"

    def up():
        if proc.poll() is not None:
            raise AssertionError(f"the Kubernetes hub exited ({proc.returncode}): {HUB_STATE}/hub.log")
        try:
            return requests.get(f"{url}/hub/api/", timeout=2).ok
        except requests.RequestException:  # not listening yet, or too busy starting to answer in time
            return False
    try:
        wait_for(up, 60, what="the Kubernetes hub to answer")
        yield Hub(url)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the hub stops the proxy and the services it started
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
