"""Slurm's answers for unit tests, built from real ones: `tests/unit/data/squeue-22.05.json` and `sacct-22.05.json`
are what Slurm 22.05.8 answered `squeue --json` and `sacct --json -a -X` on the box (a 2-node GPU job, a per-job
GPU request, an array, and a job whose name holds a forged squeue line). `squeue_json` and
`sacct_json` make answers of the same shape with the jobs a test needs."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

REAL_SQUEUE = Path(__file__).parent / "unit" / "data" / "squeue-22.05.json"
REAL_SACCT = REAL_SQUEUE.with_name("sacct-22.05.json")
STARTED = 1_795_587_000  # a start_time in the real answer's week


def real_squeue() -> dict[str, Any]:
    return json.loads(REAL_SQUEUE.read_text())


def squeue_job(job_id: int, user: str, state: str = "RUNNING", *, gpus_per_node: int = 0, nodes: int = 1,
               name: str = "chexnet", reason: str = "None", node_list: str = "localhost", uid: int = 10001,
               started: int = STARTED, **fields: Any) -> dict[str, Any]:
    """One job as squeue's JSON holds it: the real 2-node GPU job's record with these values in place."""
    job = copy.deepcopy(next(j for j in real_squeue()["jobs"] if j["name"] == "gpujob"))
    gres = f"gres:gpu:{gpus_per_node}" if gpus_per_node else ""
    job.update(job_id=job_id, user_name=user, user_id=uid, job_state=state, name=name, state_reason=reason,
               node_count=nodes, tres_per_node=gres, tres_per_job="",
               tres_req_str=f"cpu={nodes},mem=1000M,node={nodes},billing={nodes}"
                            + (f",gres/gpu={gpus_per_node * nodes}" if gpus_per_node else ""),
               nodes="" if state == "PENDING" else node_list, start_time=0 if state == "PENDING" else started,
               end_time=0, exit_code=0, restart_cnt=0)
    job.update(fields)
    return job


def squeue_json(*jobs: dict[str, Any]) -> str:
    """A whole `squeue --json` answer holding `jobs` (see squeue_job)."""
    answer = real_squeue()
    answer["jobs"] = list(jobs)
    return json.dumps(answer)


def sacct_run(job_id: int, user: str, state: str, start: datetime | None, end: datetime | None, *, gpus: int = 0,
              name: str = "chexnet", nodes: str = "node1", **fields: Any) -> dict[str, Any]:
    """One run as `sacct --json` holds it: the real 2-node GPU job's record with these values in place."""
    run = copy.deepcopy(next(j for j in json.loads(REAL_SACCT.read_text())["jobs"] if j["name"] == "gpujob"))
    allocated = [t for t in run["tres"]["allocated"] if t["type"] != "gres"]
    if gpus:
        allocated.append({"type": "gres", "name": "gpu", "id": 1001, "count": gpus})
    run.update(job_id=job_id, user=user, name=name, nodes=nodes, state={"current": state, "reason": "None"},
               tres={**run["tres"], "allocated": allocated})
    run["time"] = {**run["time"], "start": int(start.timestamp()) if start else None,
                   "end": int(end.timestamp()) if end else 0}
    run.update(fields)
    return run


def sacct_json(*runs: dict[str, Any]) -> str:
    """A whole `sacct --json` answer holding `runs` (see sacct_run)."""
    answer = json.loads(REAL_SACCT.read_text())
    answer["jobs"] = list(runs)
    return json.dumps(answer)
