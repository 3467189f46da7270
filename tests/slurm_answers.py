"""Slurm's answers for unit tests, built from real ones: `tests/unit/data/squeue-22.05.json` and `sacct-22.05.json`
are what Slurm 22.05.8 answered `squeue --json` and `sacct --json -a -X` on the box (a 2-node GPU job, a per-job
GPU request, an array, and a job whose name holds a forged squeue line); `tests/unit/data/slurm-24.11/` what 24.11.5
answered in each of its data_parser versions, `slurm-26.05/` what 26.05.3 answered and `slurm-22.05/` what
22.05.8 answered about the same jobs (tests/capture_slurm_answers.py). `squeue_json` and `sacct_json` make answers
of one version's shape (22.05's unless `version` says) with the jobs a test needs."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "unit" / "data"
REAL_SQUEUE = DATA / "squeue-22.05.json"
REAL_SACCT = REAL_SQUEUE.with_name("sacct-22.05.json")
SLURM_22_05 = DATA / "slurm-22.05"  # the same jobs as 24.11's and 26.05's (the files above are an older capture's)
SLURM_24_11 = DATA / "slurm-24.11"
SLURM_26_05 = DATA / "slurm-26.05"
# Every data_parser version the portal reads, each with a real answer of Slurm's.
VERSIONS = ("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
STARTED = 1_795_587_000  # a start_time in the real answer's week


def real_answer(command: str, version: str = "v0.0.38") -> dict[str, Any]:
    """Slurm's real `squeue --json` or `sacct --json` answer of that data_parser version (24.11's where it has
    the version, else 26.05's)."""
    if version == "v0.0.38":
        return json.loads((DATA / f"{command}-22.05.json").read_text())
    release = SLURM_24_11 if (SLURM_24_11 / f"{command}-{version}.json").exists() else SLURM_26_05
    return json.loads((release / f"{command}-{version}.json").read_text())


def real_squeue(version: str = "v0.0.38") -> dict[str, Any]:
    return real_answer("squeue", version)


def number(version: str, value: int | None) -> Any:
    """A count or time as that version writes it: a number (v0.0.38) or {set, infinite, number}; None unset."""
    if version == "v0.0.38":
        return value
    return {"set": value is not None, "infinite": False, "number": value or 0}


def state(version: str, word: str) -> Any:
    """A state as that version writes it: one word (v0.0.38) or a list of words."""
    return word if version == "v0.0.38" else [word]


def exit_status(version: str, status: int) -> Any:
    """A wait status (768 for `exit 3`) as that version writes a job's exit code."""
    if version == "v0.0.38":
        return status
    return {"status": ["SUCCESS" if status == 0 else "ERROR"], "return_code": number(version, status >> 8),
            "signal": {"id": number(version, (status & 0x7F) or None), "name": ""}}


def squeue_job(job_id: int, user: str, job_state: str = "RUNNING", *, gpus_per_node: int = 0, nodes: int = 1,
               name: str = "chexnet", reason: str = "None", node_list: str = "localhost", uid: int = 10001,
               started: int = STARTED, version: str = "v0.0.38", **fields: Any) -> dict[str, Any]:
    """One job as squeue's JSON of `version` holds it: the real 2-node GPU job's record with these values in
    place, in that version's types; `fields` go in as they are given."""
    job = copy.deepcopy(next(j for j in real_squeue(version)["jobs"] if j["name"] == "gpujob"))
    gres = f"gres:gpu:{gpus_per_node}" if gpus_per_node else ""
    job.update(job_id=job_id, user_name=user, user_id=uid, job_state=state(version, job_state), name=name,
               state_reason=reason, node_count=number(version, nodes), tres_per_node=gres, tres_per_job="",
               tres_req_str=f"cpu={nodes},mem=1000M,node={nodes},billing={nodes}"
                            + (f",gres/gpu={gpus_per_node * nodes}" if gpus_per_node else ""),
               nodes="" if job_state == "PENDING" else node_list,
               start_time=number(version, 0 if job_state == "PENDING" else started), end_time=number(version, 0),
               exit_code=exit_status(version, 0), restart_cnt=0)
    job.update(fields)
    return job


def squeue_json(*jobs: dict[str, Any], version: str = "v0.0.38") -> str:
    """A whole `squeue --json` answer of `version` holding `jobs` (see squeue_job)."""
    answer = real_squeue(version)
    answer["jobs"] = list(jobs)
    return json.dumps(answer)


def sacct_run(job_id: int, user: str, run_state: str, start: datetime | None, end: datetime | None, *,
              gpus: int = 0, name: str = "chexnet", nodes: str = "node1", version: str = "v0.0.38",
              **fields: Any) -> dict[str, Any]:
    """One run as `sacct --json` of `version` holds it: the real 2-node GPU job's record with these values in
    place."""
    run = copy.deepcopy(next(j for j in real_answer("sacct", version)["jobs"] if j["name"] == "gpujob"))
    allocated = [t for t in run["tres"]["allocated"] if t["type"] != "gres"]
    if gpus:
        allocated.append({"type": "gres", "name": "gpu", "id": 1001, "count": gpus})
    run.update(job_id=job_id, user=user, name=name, nodes=nodes,
               state={"current": state(version, run_state), "reason": "None"},
               tres={**run["tres"], "allocated": allocated})
    run["time"] = {**run["time"], "start": int(start.timestamp()) if start else None,
                   "end": int(end.timestamp()) if end else 0}
    run.update(fields)
    return run


def sacct_json(*runs: dict[str, Any], version: str = "v0.0.38") -> str:
    """A whole `sacct --json` answer of `version` holding `runs` (see sacct_run)."""
    answer = real_answer("sacct", version)
    answer["jobs"] = list(runs)
    return json.dumps(answer)
