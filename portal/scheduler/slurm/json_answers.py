"""Slurm's answers as data: `squeue --json` and `sacct --json` read into `QueuedJob`s and `AccountedRun`s, by the
format version each answer names (`data_parsers`: 22.05's v0.0.38, and v0.0.40 to v0.0.45 of 23.11 on).

A job's name, comment, working directory and output paths are its user's text. In squeue's and scontrol's line
formats a newline or a separator inside them starts a record or a field of the user's making: a job name once
forged a row of alice's holding 4 GPUs, and `scontrol show job -o` read as Key=Value pairs let a comment written
after the state override it (issue 25). In JSON they are strings inside one object, and nothing here reads them
for anything but what they are.

Read strictly: the answer is one JSON object whose "jobs" is a list (anything else is `SlurmAnswerError`, which
callers treat as Slurm not answering, never as a job state); a job is kept only when its id is a whole number, its
user a plain account name, its state one word of capitals and its counts whole numbers. squeue's jobs also need
Slurm's numeric uid and an id not seen before in the answer (one record per job id: a second is left out);
sacct's may repeat an id, once per run of a requeued job (`--duplicates`).

Slurm 22.05's `squeue --json` ignores `-u`, `-j` and `-t`: every job the controller remembers comes back, ended
ones too (for MinJobAge), and the caller picks by id, user and `queued` here (from 23.11 squeue lists only jobs that
wait or run; an ended job's state is sacct's on every release). `sacct --json` ignores `-u` (it
keeps `-j`, `-S` and `-E`): `read_sacct` takes the user to keep. Pure: text and the clock go in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from portal.errors import BadAnswer
from portal.quota import array_claim
from portal.records.states import ENDED_STATES, PENDING, RUNNING
from portal.scheduler.cluster import QueuedJob, duration_text, gpu_minutes_ahead
from portal.scheduler.slurm.answers import SERVER_JOB_NAME, gpu_count, held_reason, pending_reason
from portal.scheduler.slurm.data_parsers import DATA_PARSERS, SACCT_READERS, SQUEUE_READERS, Reader

MAX_ANSWER_BYTES = 256 * 1024 * 1024  # ~100,000 jobs of ~2.5 KB: beyond that it is no answer of Slurm's
MAX_PARTITION = 64  # characters of a partition's name kept (the site's, never a user's; a label of the metrics)
EMPTY_RESULT = 9003  # ESLURM_REST_EMPTY_RESULT (slurm_errno.h): a query that found nothing
ACCOUNT_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,31}\$?", re.IGNORECASE)  # POSIX-ish, as useradd and LDAP allow
JOB_STATE = re.compile(r"[A-Z_]{1,32}")
NOT_ASSIGNED = "None assigned"  # Slurm's node list for a job that has not run on any node


class SlurmAnswerError(BadAnswer, ValueError):
    """Slurm's answer is not what Slurm writes: read as Slurm not answering."""


def data_parser_of(data: Mapping[str, Any]) -> str:
    """The format version an answer names ("v0.0.38", "v0.0.42"), or "" when it names none."""
    meta = data.get("meta")
    plugin = meta.get("plugin") if isinstance(meta, dict) else None
    if not isinstance(plugin, dict):
        return ""
    for field, prefixes in (("data_parser", ("data_parser/",)), ("type", ("openapi/db", "openapi/"))):
        value = plugin.get(field)
        if isinstance(value, str) and value:
            found = next((value[len(p):] for p in prefixes if value.startswith(p)), "")
            if re.fullmatch(r"v[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}", found):
                return found
    return ""


def _release_of(data: Mapping[str, Any]) -> str:
    meta = data.get("meta")
    slurm = (meta.get("Slurm") or meta.get("slurm")) if isinstance(meta, dict) else None
    release = slurm.get("release") if isinstance(slurm, dict) else None
    return f"Slurm {release[:20]}" if isinstance(release, str) and release else "a Slurm that does not say its release"


def exit_code(status: int) -> str:
    """A wait status (what squeue's JSON holds: 768 for `exit 3`) as Slurm prints it, "exit status:signal"."""
    return f"{(status >> 8) & 0xFF}:{status & 0x7F}"


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _text(job: Mapping[str, Any], key: str) -> str:
    value = job.get(key)
    return value if isinstance(value, str) else ""


def _node_list(job: Mapping[str, Any]) -> str:
    """The job's hostlist; empty while (or when) it has not run on any node, where Slurm writes NOT_ASSIGNED."""
    nodes = _text(job, "nodes")
    return "" if nodes == NOT_ASSIGNED else nodes


def _queued_job(job: Any, now: float) -> QueuedJob | None:
    if not isinstance(job, dict):
        return None
    job_id, uid, node_count = _whole(job.get("job_id")), _whole(job.get("user_id")), _whole(job.get("node_count"))
    user, state = _text(job, "user_name"), _text(job, "job_state")
    if job_id is None or uid is None or not ACCOUNT_NAME.fullmatch(user) or not JOB_STATE.fullmatch(state):
        return None
    nodes = node_count or 0
    start = _whole(job.get("start_time")) or 0  # a pending job's is when Slurm expects it to start
    end = (_whole(job.get("end_time")) or 0) if state in ENDED_STATES else 0
    ran_s = 0.0 if state == "PENDING" or not start else (end or now) - start
    elapsed = duration_text(ran_s) if ran_s else "0:00"
    per_node = gpu_count(_text(job, "tres_per_node"))
    per_job = gpu_count(_text(job, "tres_per_job"))
    requested = gpu_count(_text(job, "tres_req_str")) or per_node * max(1, nodes) + per_job  # all nodes together
    status = _whole(job.get("exit_code"))
    reason, name, pending = _text(job, "state_reason"), _text(job, "name"), state == PENDING
    return QueuedJob(
        id=str(job_id), user=user, uid=uid, state=state, elapsed=elapsed, nodes=nodes, gpus_per_node=per_node,
        reason=reason, name=name, node_list=_node_list(job), gpus=requested,
        exit_code=exit_code(status) if end and status is not None else "", restarts=_whole(job.get("restart_cnt")) or 0,
        expected_start=start if pending else 0, server=name == SERVER_JOB_NAME,
        reason_words=pending_reason(reason) if pending else "", waits_for_resources=pending and held_reason(reason),
        submitted=_whole(job.get("submit_time")) or 0, partition=_text(job, "partition")[:MAX_PARTITION],
        gpu_minutes_ahead=gpu_minutes_ahead(requested, state, _whole(job.get("time_limit")), ran_s))


def _only_empty(errors: Any) -> bool:
    """Whether an answer's errors only say that nothing was found: sacct's for a time with no jobs of the user's
    (22.05 and later: "Nothing found with query", ESLURM_REST_EMPTY_RESULT), which is no error but no jobs."""
    return isinstance(errors, list) and all(isinstance(e, dict) and e.get("error_number") == EMPTY_RESULT
                                            for e in errors)


def _jobs_in(answer: str | bytes, command: str, readers: Mapping[str, Reader]) -> list[dict[str, Any]]:
    """The jobs in a --json answer of `command`, each read by its version's reader into 22.05's shape;
    SlurmAnswerError when it is not Slurm's JSON or of a version without a reader."""
    if len(answer) > MAX_ANSWER_BYTES:
        raise SlurmAnswerError(f"{command}'s answer is {len(answer)} bytes, more than the {MAX_ANSWER_BYTES} read")
    try:
        data = json.loads(answer)
    except (ValueError, RecursionError) as err:
        raise SlurmAnswerError(f"{command}'s answer is not JSON ({str(err)[:80]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise SlurmAnswerError(f"{command}'s answer has no list of jobs")
    version = data_parser_of(data)
    if version not in readers:
        readable = ", ".join(f"{v} ({release})" for v, release in DATA_PARSERS.items())
        raise SlurmAnswerError(f"{command}'s answer is of data_parser {version or '(none named)'}, from "
                               f"{_release_of(data)}; this portal reads {readable}")
    errors = data.get("errors")
    if errors and not _only_empty(errors):
        raise SlurmAnswerError(f"{command} reports errors: {str(errors)[:200]}")
    read = readers[version]
    return [read(job) if isinstance(job, dict) else {} for job in data["jobs"]]


def read_squeue(answer: str | bytes, now: float) -> dict[str, QueuedJob]:
    """Every job in a `squeue --json` answer, by id, in Slurm's order; `now` (time.time()) for the elapsed times.
    SlurmAnswerError when the answer is not Slurm's JSON.

    A job array's pending tasks are one entry (the array's own id, `array_task_string` "2-3%2": the tasks left and
    the throttle); its started tasks are entries of their own (`array_job_id` the array's). The pending entry's GPUs
    are what its tasks claim beside the running ones (portal.quota.array_claim), not one task's; its `trials_waiting`
    the tasks that may start beside them (a started task's entry has `trials_running` 1); its `gpu_minutes_ahead`
    every task's that is left."""
    jobs: dict[str, QueuedJob] = {}
    arrays: dict[str, tuple[int, int]] = {}  # a pending array entry's id: (tasks left, throttle)
    running: dict[str, int] = {}  # an array's id: its running tasks
    for entry in _jobs_in(answer, "squeue", SQUEUE_READERS):
        job = _queued_job(entry, now)
        if job is None or job.id in jobs:
            continue
        jobs[job.id] = job
        array_id, task = _whole(entry.get("array_job_id")), entry.get("array_task_id")
        if array_id and task is None and job.state == PENDING:
            left = _task_count(_text(entry, "array_task_string"))
            if left:  # else one task's, as Slurm's entry says
                arrays[job.id] = (left, _whole(entry.get("array_max_tasks")) or 0)
            else:
                jobs[job.id] = replace(job, trials_waiting=1)
        elif array_id and job.state == RUNNING:
            running[str(array_id)] = running.get(str(array_id), 0) + 1
            jobs[job.id] = replace(job, trials_running=1)
        elif array_id and job.state == PENDING:  # one task of its own (a requeued one)
            jobs[job.id] = replace(job, trials_waiting=1)
    for job_id, (left, throttle) in arrays.items():
        job, beside = jobs[job_id], running.get(job_id, 0)
        jobs[job_id] = replace(job, gpus=array_claim(job.gpus, left, beside, throttle),
                               trials_waiting=array_claim(1, left, beside, throttle),
                               gpu_minutes_ahead=job.gpu_minutes_ahead * left)  # every task left, as it may run
    return jobs


def _task_count(text: str) -> int:
    """The tasks an array string names: "2-3%2" 2, "0-15:4" 4, "1,3,5-6" 4; 0 for anything else."""
    count = 0
    for part in text.partition("%")[0].split(","):
        found = re.fullmatch(r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7}))?)?", part)
        if not found:
            return 0
        low, high, step = int(found[1]), int(found[2] or found[1]), int(found[3] or 1)
        count += len(range(low, high + 1, max(1, step)))
    return count


@dataclass(frozen=True)
class AccountedRun:
    """One run of a job in Slurm's accounting (with `--duplicates` each run of a requeued job is its own)."""

    job_id: str
    user: str
    name: str
    state: str
    start: datetime | None  # local time, as the dashboard shows it; None: never started
    end: datetime | None  # None: still running
    gpus: int  # allocated, all nodes together
    nodes: str  # hostlist; "" when it never ran


def _local_time(value: Any) -> datetime | None:
    seconds = _whole(value)
    return datetime.fromtimestamp(seconds) if seconds else None


def _allocated_gpus(tres: Any) -> int:
    allocated = tres.get("allocated") if isinstance(tres, dict) else None
    counts = [_whole(item.get("count")) or 0 for item in allocated or () if isinstance(item, dict)
              and item.get("type") == "gres" and isinstance(item.get("name"), str)
              and item["name"].split(":")[0] == "gpu"]
    return sum(counts)


def _accounted_run(job: Any) -> AccountedRun | None:
    if not isinstance(job, dict):
        return None
    job_id, user = _whole(job.get("job_id")), _text(job, "user")
    state: dict[str, Any] = job["state"] if isinstance(job.get("state"), dict) else {}
    current: str = state["current"] if isinstance(state.get("current"), str) else ""
    times: dict[str, Any] = job["time"] if isinstance(job.get("time"), dict) else {}
    if job_id is None or not ACCOUNT_NAME.fullmatch(user) or not JOB_STATE.fullmatch(current):
        return None
    return AccountedRun(job_id=str(job_id), user=user, name=_text(job, "name"), state=current,
                        start=_local_time(times.get("start")), end=_local_time(times.get("end")),
                        gpus=_allocated_gpus(job.get("tres")), nodes=_node_list(job))


def read_sacct(answer: str | bytes, user: str | None = None) -> list[AccountedRun]:
    """The runs in a `sacct --json` answer, in Slurm's order: only `user`'s when given (sacct's -u is ignored).
    SlurmAnswerError when the answer is not Slurm's JSON."""
    runs = (_accounted_run(entry) for entry in _jobs_in(answer, "sacct", SACCT_READERS))
    return [run for run in runs if run is not None and (user is None or run.user == user)]
