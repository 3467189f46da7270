"""Kubernetes beside Slurm, on this machine's boxes: `make up` (Slurm, and the directory both hubs log in with) and
`make up-k8s` (the Kubernetes box, its nodes and images).

    python -m bench.kube [--runs 10] [--warmup 1] [--epochs 3] [--pairs 3] [--only spawn|training]

(a) spawn: form -> JupyterLab on the Kubernetes box, the portal's PortalKubeSpawner against stock KubeSpawner with
    the same image and the same server (1 t4 GPU, 1 CPU, 2 GB, alice's home claim), each on a hub of its own
    beside the box's (ports hub_port + 50.. and + 60..). Runs alternate, ours then stock; the clock starts at the
    request that starts the spawn (our form's POST; stock has no form: its GET /hub/spawn) and stops when
    GET /user/alice/lab answers 200. Medians of --runs each.
(b) training: the same 2-worker CheXNet job (2 nodes x 1 GPU, TRAINING below) submitted through portal.jobs on the
    Slurm box and on the Kubernetes box, one after the other, never at once, --pairs times, the box that goes
    first alternating: time to the first TensorBoard point, time per epoch (epochs after the first; the first
    holds TensorFlow's start), images/s (the median of the `throughput/images_per_sec` points); each ratio is
    the median of the pairs' ratios. Dell's bare metal vs Kubernetes comparison, on this machine's CPUs:
    both boxes share the same 2 cores and the GPUs are fake, so these are CPU figures, not GPU ones.

Targets (bench.kube_report, issue 43): spawn median ours / stock <= 0.7 and p90 <= 1.0; the job's first point
Kubernetes / Slurm <= 1.1 and images/s >= 0.95. Each part also times its stages (bench.kube_timeline: the server pod
watched; bench.timeline: the job's log watched), and a target not met names the stages that hold the seconds. The
figures (every run, stages, medians, ratios) are saved to docs/results/kube.json; exit 1 when a target is not met.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import kube_report, kube_timeline, timeline
from bench.hub_client import HubClient, HubError, wait_for
from bench.results import save
from bench.spawn import PHASE_JITTER_S, open_lab, start_spawn
from bench.stock_hub import HubProcess, _yaml_value
from portal import jobs
from portal.config import PortalConfig, load
from portal.directory import search_password_file
from portal.records.record import cluster_jobs_dir

REPO = Path(__file__).resolve().parents[1]
USER, PASSWORD, GROUPS = "alice", "wonderland", ["datascientists", "gpu-users"]
SPAWNERS = ("portal", "stock")
PORT_SHIFT = {"portal": 50, "stock": 60}  # public, + 1 proxy API, + 2 hub API, + 3 dashboard
STOCK_KUBE_CONFIG = Path(__file__).with_name("stock_kube_hub_config.py")
# The same server for both spawners: what the benchmark's form asks ours for, and the stock spawner's traits.
PARTITION, GPUS, CPUS, MEMORY_GB, RUNTIME = "t4", 1, 1, 2, "01:00:00"
TRAINING = {"nodes": 2, "gpus_per_node": 1, "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 3,
            "time_limit": "00:30:00"}
JOB_WAIT_S = 1800
SERVER_PODS = "component=singleuser-server"  # KubeSpawner's label on a server's pod (ours and stock alike)


def configure_stock_kube_spawner(c: Any, portal: PortalConfig) -> None:
    """Stock kubespawner.KubeSpawner, configured as Zero to JupyterHub would for this server: the image, a
    namespace per user, the user's existing home claim and the data claim, /dev/shm, the GPU as an extended
    resource on a node of its type, the CPUs and memory, the notebook user, the image's jupyterhub-singleuser
    (another on the image's PATH has no JupyterLab). Nothing of the portal's: no form,
    no quota check, no templates, no fast failure."""
    c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
    c.KubeSpawner.image = portal.k8s_image
    c.KubeSpawner.image_pull_policy = portal.k8s_image_pull_policy
    c.KubeSpawner.enable_user_namespaces = True
    c.KubeSpawner.user_namespace_template = portal.k8s_user_namespace_template
    c.KubeSpawner.storage_pvc_ensure = False
    c.KubeSpawner.volumes = [
        {"name": "home", "persistentVolumeClaim": {"claimName": portal.home_claim("{username}")}},
        {"name": "data", "persistentVolumeClaim": {"claimName": portal.k8s_data_claim, "readOnly": True}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{portal.k8s_shm_gb}Gi"}}]
    c.KubeSpawner.volume_mounts = [{"name": "home", "mountPath": portal.k8s_home_mount},
                                   {"name": "data", "mountPath": portal.k8s_data_mount, "readOnly": True},
                                   {"name": "dshm", "mountPath": "/dev/shm"}]
    c.KubeSpawner.working_dir = portal.k8s_home_mount
    c.KubeSpawner.cmd = [str(portal.venv / "bin" / "jupyterhub-singleuser")]  # the image's venv (z2jh: singleuser.cmd)
    c.KubeSpawner.uid, c.KubeSpawner.fs_gid = 1000, 100
    c.KubeSpawner.node_selector = {portal.k8s_gpu_node_label: PARTITION}
    c.KubeSpawner.extra_resource_limits = c.KubeSpawner.extra_resource_guarantees = {"nvidia.com/gpu": str(GPUS)}
    c.KubeSpawner.cpu_limit = c.KubeSpawner.cpu_guarantee = float(CPUS)
    c.KubeSpawner.mem_limit = c.KubeSpawner.mem_guarantee = f"{MEMORY_GB}G"
    c.KubeSpawner.start_timeout = portal.start_timeout


class KubeHub(HubProcess):
    """A hub with scheduler kubernetes on ports of its own: the portal's (jupyterhub_config.py) or stock
    KubeSpawner's (bench/stock_kube_hub_config.py)."""

    def __init__(self, cfg: PortalConfig, spawner: str, kube: Any):
        state_dir = cfg.state_dir / f"bench-kube-{spawner}"
        port = cfg.hub_port + PORT_SHIFT[spawner]
        settings = {f.name: _yaml_value(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
        settings.update(
            state_dir=str(state_dir), ldap_ca_file=str(cfg.ca_file), hub_port=port, proxy_api_port=port + 1,
            ldap_search_password_file=str(search_password_file(cfg)),  # the box's directory's portal identity
            hub_api_port=port + 2, dashboard_port=port + 3, cull_idle_timeout=0, scheduler="kubernetes",
            # the pods reach the hub's API on the Kubernetes box's bridge
            k8s_kubeconfig=str(kube.kubeconfig("hub")), hub_api_ip=kube.api_address,
            k8s_node_gpus=kube.gpus_per_node)
        hub_config = REPO / "jupyterhub_config.py" if spawner == "portal" else STOCK_KUBE_CONFIG
        super().__init__(cfg, state_dir, settings, hub_config, port)


# --- (a) spawn ---------------------------------------------------------------------------------------------

def spawn_once(spawner: str, client: HubClient, start_timeout: int, core: Any,
               namespace: str) -> tuple[float, dict[str, float | None]]:
    """Seconds from the request that starts the spawn to /user/alice/lab 200, and their stages (bench.kube_timeline:
    the pod watched meanwhile); the server is stopped after."""
    watcher = kube_timeline.PodWatcher(core, namespace, SERVER_PODS)
    try:
        started = start_spawn(client, spawner, {"partition": PARTITION, "gpus": GPUS, "cpus": CPUS,
                                                "memory_gb": MEMORY_GB, "runtime": RUNTIME})
        client.follow_progress(USER, start_timeout + 60)
        ready = time.time()
        open_lab(client)
        page = time.time()
        listening = watcher.listening()
    finally:
        seen = watcher.stop()
    client.stop(USER, timeout=90)
    return page - started, kube_timeline.stages(started, seen, listening, ready, page)


def spawn_benchmark(cfg: PortalConfig, kube: Any, runs: int, warmup: int,
                    report: Callable[[str], None]) -> dict[str, Any]:
    core = _core(kube)
    namespace = cfg.user_namespace(USER)
    took: dict[str, list[float]] = {name: [] for name in SPAWNERS}
    stages: dict[str, list[dict]] = {name: [] for name in SPAWNERS}
    with KubeHub(cfg, "portal", kube) as ours, KubeHub(cfg, "stock", kube) as stock:
        clients = {"portal": HubClient(ours.url), "stock": HubClient(stock.url)}
        for client in clients.values():
            client.login(USER, PASSWORD)
            if client.server(USER) is not None:
                client.stop(USER, timeout=90)
        for index in range(warmup + runs):
            for name in SPAWNERS:
                time.sleep(random.uniform(0, PHASE_JITTER_S))
                seconds, stage = spawn_once(name, clients[name], cfg.start_timeout, core, namespace)
                # the next spawn makes a pod of the same name: this one must be gone
                wait_for(lambda: not _server_pod(core, cfg), 90, what=f"{USER}'s pod to be deleted")
                counted = index >= warmup
                report(f"spawn {'run' if counted else 'warm-up'} {index - warmup + 1 if counted else index + 1} "
                       f"{name}: {seconds:.2f} s (" + ", ".join(
                           f"{k} {v:.2f}" for k, v in stage.items() if v is not None) + ")")
                if counted:
                    took[name].append(seconds)
                    stages[name].append(stage)
    return {"runs": took, "stages": stages}


def _core(kube: Any):
    from kubernetes import client

    kubebox = _kubebox()
    return client.CoreV1Api(kubebox.api_client(kube, kubebox.read_tokens(kube)["admin"]))


def _server_pod(core, cfg: PortalConfig) -> bool:
    pods = core.list_namespaced_pod(cfg.user_namespace(USER), label_selector=SERVER_PODS)
    return bool(pods.items)


# --- (b) training ------------------------------------------------------------------------------------------

def event_times(logdir: Path, tag: str) -> list[tuple[int, float, float]]:
    """(step, wall time, value) of every point of `tag` in the run's event files, by step."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    points = []
    for path in sorted(logdir.rglob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == tag:
                    number = value.simple_value if value.HasField("simple_value") else \
                        float(make_ndarray(value.tensor))
                    points.append((event.step, event.wall_time, number))
    return sorted(points)


def training_figures(submitted: float, points: list[tuple[int, float, float]],
                     loss_points: list[tuple[int, float, float]]) -> dict[str, Any]:
    """From a run's points: the first TensorBoard point's delay after submit, the time between epochs after the
    first, the median images/s (pure)."""
    walls = [wall for _, wall, _ in loss_points]
    epochs = [b - a for a, b in zip(walls, walls[1:], strict=False)]
    rates = [value for _, _, value in points]
    return {"first_point_s": walls[0] - submitted if walls else None,
            "epoch_s": statistics.median(epochs) if epochs else None, "epoch_s_all": epochs,
            "images_per_sec": statistics.median(rates) if rates else None, "images_per_sec_all": rates}


def train_once(cfg: PortalConfig, epochs: int, report: Callable[[str], None], home: Callable[[str], Path]) -> dict:
    submitted = time.time()
    job = jobs.submit({**TRAINING, "epochs": epochs}, user=USER, groups=GROUPS, cfg=cfg)
    report(f"training on {cfg.scheduler}: job {job.id} submitted")
    watcher = timeline.LogWatcher(job.logs)
    try:
        state = job.wait(timeout=JOB_WAIT_S, poll=3)
    finally:
        marks = watcher.stop()
    if state != "COMPLETED":
        raise HubError(f"job {job.id} on {cfg.scheduler} ended {state}: {job.logs(tail=40)}")
    logdir = home(job.id) / "tensorboard"
    rates = event_times(logdir, "throughput/images_per_sec")
    figures = training_figures(submitted, rates, event_times(logdir, "loss/train"))
    point = (rates[0][1], rates[0][0], rates[0][2]) if rates else None
    workers = TRAINING["nodes"] * TRAINING["gpus_per_node"]
    figures["stages"] = timeline.stages(submitted, marks, point, TRAINING["batch_size"] * workers)
    report(f"training on {cfg.scheduler}: job {job.id} {state}: first point after {figures['first_point_s']:.1f} s, "
           f"epoch {figures['epoch_s']:.1f} s, {figures['images_per_sec']:.1f} images/s")
    return {"job": job.id, **figures}


def training_benchmark(cfg: PortalConfig, kube: Any, epochs: int, report: Callable[[str], None],
                       pairs: int = 1) -> dict[str, Any]:
    """`pairs` times the same job on each box, the box that goes first alternating (Slurm first in the first
    pair): {"pairs": [{"first": box, "slurm": figures, "kubernetes": figures}, ...]} (bench.kube_report takes
    the median of the pairs' ratios)."""
    kube_cfg = dataclasses.replace(cfg, scheduler="kubernetes", k8s_kubeconfig=str(kube.kubeconfig("hub")),
                                   k8s_jobs="plain")
    runs = {"slurm": lambda: train_once(cfg, epochs, report, lambda job_id: Path(jobs.get(job_id, user=USER).job_dir)),
            "kubernetes": lambda: train_once(kube_cfg, epochs, report,
                                             lambda job_id: cluster_jobs_dir(kube.path("volumes", "home", USER),
                                                                             kube_cfg.cluster_name) / job_id)}
    done = []
    for index in range(pairs):
        order = ("slurm", "kubernetes") if index % 2 == 0 else ("kubernetes", "slurm")
        pair: dict[str, Any] = {"first": order[0]}
        for box in order:
            pair[box] = runs[box]()
        done.append(pair)
    return {"pairs": done}


# --- the run -----------------------------------------------------------------------------------------------

def _kubebox():
    from deploy.kubernetes import kubebox  # the box's clients, imported when a run needs them

    return kubebox


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Kubernetes beside Slurm: spawn time, and the same training job on each.")
    parser.add_argument("--runs", type=int, default=10, help="counted spawns of each spawner (default 10)")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted spawns of each first (default 1)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of the training job (default 3; 2 or more)")
    parser.add_argument("--pairs", type=int, default=3,
                        help="training jobs on each box, in pairs whose first box alternates (default 3)")
    parser.add_argument("--only", choices=["spawn", "training"], help="one part only")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0 or args.epochs < 2 or args.pairs < 1:
        parser.error("--runs must be 1 or more, --warmup 0 or more, --epochs 2 or more, --pairs 1 or more")
    if os.geteuid() != 0:
        print("bench.kube: run as root (it starts hubs and reads the boxes' volumes)", file=sys.stderr)
        return 2
    cfg, kubebox = load(), _kubebox()
    kube = kubebox.KubeBox(kubebox.DEFAULT_STATE)
    if not kubebox.status(kube).get("kube-apiserver"):
        print(f"bench.kube: the Kubernetes box ({kube.state_dir}) is not up: run `make up-k8s` (and `make up`)",
              file=sys.stderr)
        return 2
    command = f"python -m bench.kube --runs {args.runs} --warmup {args.warmup} --epochs {args.epochs} " \
        f"--pairs {args.pairs}" + \
        (f" --only {args.only}" if args.only else "")

    def report(line: str) -> None:
        print(line, flush=True)

    spawn = spawn_benchmark(cfg, kube, args.runs, args.warmup, report) if args.only != "training" else None
    training = training_benchmark(cfg, kube, args.epochs, report, args.pairs) if args.only != "spawn" else None
    print()
    data: dict[str, Any] = {"user": USER, "server": {"partition": PARTITION, "gpus": GPUS, "cpus": CPUS,
                                                     "memory_gb": MEMORY_GB}, "training_spec": TRAINING,
                            "cpu_figures": True, **kube_report.figures(spawn, training)}
    print(kube_report.table(data))
    targets = kube_report.targets(data)
    print("\n".join(kube_report.verdicts(targets)))
    print(f"results: {save('kube', command=command, targets=targets, data=data)}")
    return 0 if all(t.met for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
