"""What a newcomer does in their own boxes before running `make test` beside them (issue 38's order), as alice:

    python -m tests.newcomer slurm        # after `make up`: her JupyterLab, and a job and a sweep of each program
                                          # (a 2-node job and a 4-trial sweep of the TensorFlow one, a 1-node job
                                          # and a 2-trial sweep of the PyTorch one), submitted through the
                                          # dashboard's API; the first two running when this returns
    python -m tests.newcomer kubernetes   # after `make up-k8s`: her JupyterLab as a pod, through the NodePort
    python -m tests.newcomer status       # her servers, jobs and sweep in both boxes, as their hubs tell them

`make fresh-test FRESH_ARGS=--user-work` runs the first (and with a Kubernetes box, the second) before `make test`;
tests/users/test_users_boxes.py then checks that the suites left all of it as it was. Nothing here is a test: it is
the user's side of the check, driven as a browser would (the hub's login form, its spawn form, the dashboard's API).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bench.hub_client import HubClient, wait_for

USER, PASSWORD = "alice", "wonderland"
SLURM_HUB = "http://127.0.0.1:8000"  # `make up`'s
SERVER_S = 300
# The submit form's defaults (DenseNet-121 at 224 px, 5 epochs), on 2 nodes: about 45 s an epoch here, so it still
# trains when a cached `make up-k8s` (about 2 minutes beside her work) and her server there are done and `make test`
# starts. Not more: on 2 cores her trainings share the CPUs with the suites, and at 20 epochs (and the sweep's 10)
# they trained beside the whole run (the job still after 53 minutes; in the first minutes her jobs took 72 of the 97
# CPU-s used in a minute) and the suites' timed waits ran out (2026-12-06, docs/testing.md). When `make up-k8s`
# built for minutes (ca276f3: 540 s) most of that training was done before `make test` began.
JOB: dict[str, Any] = {"template": "chexnet", "nodes": 2, "epochs": 5}
# The form's sweep, 4 trials of the form's 5 epochs (the default pruner needs 3), each in 4 GB: the box's nodes
# (8 CPUs, 24 GB each) then hold it beside her server and the 2-node job (16 GB a node), so that all three run at
# once (each trial one of her 4 GPUs: one at a time).
SWEEP: dict[str, Any] = {"template": "chexnet", "memory_gb": 4, "epochs": 5, "sweep": {"trials": 4}}
# The PyTorch program's job and sweep, on CPUs (her GPU quota of 4 is held by the three above): small enough to
# fit beside them on the second node, and queued behind them where they do not (a queued job is hers too). At
# 64 px and a few epochs they end during the tests (COMPLETED is as good as running to the check): on 2 cores the
# machine's CPUs are what the suites and her work share, and at 224 px the 30-epoch job trained for the whole run
# (2026-12-04: 4 epochs in an hour).
TORCH_JOB: dict[str, Any] = {"template": "chexnet-torch", "nodes": 1, "gpus_per_node": 0, "cpus_per_task": 2,
                             "memory_gb": 3, "epochs": 3, "image_size": 64}
# Two epochs are too few for the default pruner (it needs 3): this sweep prunes nothing.
TORCH_SWEEP: dict[str, Any] = {"template": "chexnet-torch", "gpus_per_node": 0, "cpus_per_task": 1, "memory_gb": 2,
                               "epochs": 2, "image_size": 64, "sweep": {"trials": 2, "pruner": "none"}}
SUBMITTED = (JOB, SWEEP, TORCH_JOB, TORCH_SWEEP)  # in this order
ENDED_BADLY = {"FAILED", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def spawned(client: HubClient, fields: dict) -> dict:
    """Her server through the spawn form (when the hub offers one), ready."""
    action = client.spawn_form_action()
    if action is not None:
        answer = client.post_spawn_form(action, fields)
        if answer.status_code not in (200, 302):
            raise SystemExit(f"{client.url}: the spawn form answered {answer.status_code}: {answer.text[-500:]}")
    else:
        client.api("POST", f"users/{USER}/server", json=fields)

    def ready():
        server = client.server(USER)
        return server if server and server.get("ready") else None
    return wait_for(ready, SERVER_S, interval=2, what=f"{USER}'s server at {client.url}")


def slurm() -> None:
    client = HubClient(SLURM_HUB).login(USER, PASSWORD)
    server = spawned(client, {"gpus": 1})
    print(f"her server: {SLURM_HUB}{server['url']}")
    api = client.token_session(USER, "newcomer")
    submitted = []
    for request in SUBMITTED:
        answer = api.post(f"{SLURM_HUB}/services/portal/api/jobs", json=request, timeout=60)
        if answer.status_code != 201:
            raise SystemExit(f"the dashboard refused {request}: {answer.status_code} {answer.text[-500:]}")
        submitted.append(answer.json()["id"])
        print(f"submitted {json.dumps(request)}: job {submitted[-1]} ({answer.json().get('warning') or 'no wait'})")

    def running():
        states = {job: api.get(f"{SLURM_HUB}/services/portal/api/jobs/{job}", timeout=60).json()["state"]
                  for job in submitted}
        if failed := {job: state for job, state in states.items() if state in ENDED_BADLY}:
            raise SystemExit(f"her work ended before the tests began: {failed}")
        tensorflow = [states[job] for job in submitted[:2]]
        return states if all(state == "RUNNING" for state in tensorflow) else None
    print(f"running: {wait_for(running, SERVER_S, interval=3, what='her job and sweep to run')}")


def kubernetes() -> None:
    from deploy.kubernetes import kubebox  # noqa: PLC0415  (the Kubernetes box's clients: only for this one)

    box = kubebox.KubeBox()
    url = kubebox.box_hub.url(box)
    client = HubClient(url, ca=str(box.ca_file)).login(USER, PASSWORD)
    server = spawned(client, {"partition": "t4", "gpus": "1", "cpus": "1", "memory_gb": "2", "runtime": "01:00:00"})
    print(f"her server on Kubernetes: {url}{server['url']}")


def status() -> None:
    client = HubClient(SLURM_HUB).login(USER, PASSWORD)
    api = client.token_session(USER, "newcomer status")
    jobs = api.get(f"{SLURM_HUB}/services/portal/api/jobs", timeout=60).json()["jobs"]
    print(f"her server: {'ready' if (client.server(USER) or {}).get('ready') else 'none'}")
    for job in jobs:
        print(f"job {job['id']}: {job['state']}" + (" (a sweep)" if job.get("sweep") else ""))


def main(argv: list[str]) -> int:
    commands = {"slurm": slurm, "kubernetes": kubernetes, "status": status}
    if argv[1:] and argv[1] in commands:
        started = time.monotonic()
        commands[argv[1]]()
        print(f"newcomer {argv[1]}: done in {time.monotonic() - started:.0f} s")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
