"""One reader per format version of Slurm's --json answers (its data_parser plugin), each turning a job record of
that version into the one shape `json_answers` reads: Slurm 22.05's (openapi v0.0.38).

An answer names its version: `meta.plugin.data_parser` ("data_parser/v0.0.42") from 23.02 on, `meta.plugin.type`
("openapi/v0.0.38", sacct's "openapi/dbv0.0.38") in 22.05. What changed, as Slurm's own answers show it
(tests/unit/data/slurm-<release>/, captured by tests/capture_slurm_answers.py):

- v0.0.38 (22.05): numbers are numbers; `job_state` and sacct's `state.current` are one word, a flag such as
  REQUEUED or COMPLETING standing in for the base state; `exit_code` is a wait status (768 for `exit 3`).
- v0.0.40 (23.11-25.11), v0.0.41 (24.05-26.05), v0.0.42 (24.11-26.11), v0.0.43 (25.05-27.05), v0.0.44 (from
  25.11), v0.0.45 (from 26.05): counts and times that may be unset are
  `{set, infinite, number}`; states are lists of words, the base state first and its flags after
  (["PENDING", "REQUEUED"]); `exit_code` is `{status, return_code, signal: {id, name}}`. The fields the portal reads
  kept their names. squeue lists only jobs that wait or run (22.05 listed ended ones too, for MinJobAge).

Each reader is strict the way `json_answers` is: a value of another type than its version writes reads as absent
(None), which leaves the job out where the field is one a job needs. Pure: a dict goes in, a new dict comes out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# The versions read, each with the releases that write it (SchedMD's RELEASE_NOTES and rest_clients page), each
# checked on real answers: 22.05.8's, 24.11.5's (v0.0.40-42) and 26.05.3's (v0.0.42-45).
DATA_PARSERS = {
    "v0.0.38": "Slurm 22.05",
    "v0.0.40": "Slurm 23.11 to 25.11",
    "v0.0.41": "Slurm 24.05 to 26.05",
    "v0.0.42": "Slurm 24.11 to 26.11",
    "v0.0.43": "Slurm 25.05 to 27.05",
    "v0.0.44": "Slurm 25.11 on",
    "v0.0.45": "Slurm 26.05 on",
}
# Slurm 22.05 printed a job's state as one word: the first of these flags the job has, else its base state
# (job_state_string in 22.05's slurm_protocol_defs.c). A list of the newer versions is read the same way, so a
# requeued job reads REQUEUED on every release, as it did on 22.05.
STATE_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
               "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING")
BASE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
               "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY")
# squeue's fields that became {set, infinite, number} (unset: absent; infinite: no number).
SQUEUE_NUMBERS = ("node_count", "start_time", "end_time", "submit_time", "array_job_id", "array_task_id",
                  "array_max_tasks", "time_limit")


def number(value: Any) -> int | None:
    """A count or time of v0.0.40 on ({set, infinite, number}), or a plain whole number; None when unset,
    infinite or not a whole number."""
    if isinstance(value, dict):
        if value.get("set") is not True or value.get("infinite") is not False:
            return None
        value = value.get("number")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def state_word(value: Any) -> str | None:
    """A state list (["PENDING", "REQUEUED"]) as 22.05's one word ("REQUEUED"); None when it is no list of words
    or names no base state."""
    if not isinstance(value, list) or not all(isinstance(word, str) for word in value):
        return None
    flag = next((f for f in STATE_FLAGS if f in value), None)
    base = next((word for word in value if word in BASE_STATES), None)
    return (flag or base) if base else None


def wait_status(value: Any) -> int | None:
    """v0.0.40's exit code ({return_code, signal: {id}}) as the wait status 22.05 wrote (`exit 3`: 768)."""
    if not isinstance(value, dict):
        return None
    code = number(value.get("return_code"))
    signal = value.get("signal")
    signal_id = number(signal.get("id")) if isinstance(signal, dict) else None
    if code is None:
        return None
    return ((code & 0xFF) << 8) | ((signal_id or 0) & 0x7F)


def _as_written(job: Mapping[str, Any]) -> dict[str, Any]:
    """v0.0.38's job, squeue's or sacct's: already the shape json_answers reads."""
    return dict(job)


def _squeue_v40(job: Mapping[str, Any]) -> dict[str, Any]:
    read = dict(job)
    for field in SQUEUE_NUMBERS:
        read[field] = number(job.get(field))
    read["job_state"] = state_word(job.get("job_state"))
    read["exit_code"] = wait_status(job.get("exit_code"))
    return read


def _sacct_v40(job: Mapping[str, Any]) -> dict[str, Any]:
    read = dict(job)
    state = job.get("state")
    if isinstance(state, dict):
        read["state"] = {**state, "current": state_word(state.get("current"))}
    times = job.get("time")
    if isinstance(times, dict):
        read["time"] = {**times, "start": number(times.get("start")), "end": number(times.get("end"))}
    return read


Reader = Callable[[Mapping[str, Any]], dict[str, Any]]
# v0.0.41 to v0.0.45 write the fields read here as v0.0.40 does (24.11's and 26.05's answers, side by side).
SQUEUE_READERS: dict[str, Reader] = {"v0.0.38": _as_written, **dict.fromkeys(list(DATA_PARSERS)[1:], _squeue_v40)}
SACCT_READERS: dict[str, Reader] = {"v0.0.38": _as_written, **dict.fromkeys(list(DATA_PARSERS)[1:], _sacct_v40)}
