"""The job's MLflow file (`mlflow.json`, written by the portal: portal.mlflow_accounts.Account.job_file), read by rank 0
of a training as a file its user could have put anything in place of.

The job script names it in DSPORTAL_MLFLOW_FILE, always; where MLflow is off the file is absent, and `read` returns
None without a word. Anything else that is not the portal's file (a link, a FIFO, a directory, a file of megabytes,
something that is not JSON, a field missing or of the wrong type) is a `BadJobFile` whose message names the file
and the field: programkit.tracking says it once and the training goes on without MLflow. The read itself never waits
and never takes more than MAX_BYTES (programkit.userfiles).

    {"tracking_uri": "http://198.18.0.1:8095/services/portal/mlflow", "username": "alice", "password": "...",
     "experiment_id": "3", "tags": {"dsportal.user": "alice", "dsportal.job": "12", ...}}

The run's key (`run_key`): the job (tag `dsportal.job`), or in a sweep's task (DSPORTAL_TASK) "<job>:<task>", as the
portal's experiments page names a sweep's trials.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from programkit.userfiles import NotARegularFile, read_text

__all__ = ["FILE_ENV", "TASK_ENV", "BadJobFile", "JobFile", "read", "run_key", "run_name"]

FILE_ENV = "DSPORTAL_MLFLOW_FILE"
TASK_ENV = "DSPORTAL_TASK"
MAX_BYTES = 64 * 1024  # the portal's file is a few hundred bytes
MAX_TAGS = 50
TAG_JOB = "dsportal.job"
# What a job or a task may be called: it goes into a search filter between quotes (tags.`dsportal.run` = '12:3').
JOB_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
TASK_NAME = re.compile(r"[0-9]{1,9}")
FIELDS = ("tracking_uri", "username", "password", "experiment_id")


class BadJobFile(ValueError):
    """The file is there but is not one the portal writes: the message names the file and what is wrong."""


@dataclass(frozen=True)
class JobFile:
    tracking_uri: str
    username: str
    password: str
    experiment_id: str
    tags: dict[str, str]

    def __repr__(self) -> str:  # never the password, in a traceback or a log
        return f"JobFile(tracking_uri={self.tracking_uri!r}, username={self.username!r}, " \
               f"experiment_id={self.experiment_id!r}, tags={self.tags!r})"


def read(path: str) -> JobFile | None:
    """The file at `path`; None when there is none (MLflow is off). BadJobFile for anything else that is not the
    portal's file."""
    try:
        text = read_text(path, MAX_BYTES)
    except FileNotFoundError:
        return None
    except NotARegularFile:
        raise BadJobFile(f"{path} is not a regular file (a link, a FIFO, a directory or a device)") from None
    except ValueError:
        raise BadJobFile(f"{path} is larger than {MAX_BYTES} bytes") from None
    except OSError as err:
        raise BadJobFile(f"{path} cannot be read ({err.strerror or err})") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise BadJobFile(f"{path} is not JSON") from None
    return parse(data, path)


def parse(data: object, path: str) -> JobFile:
    """The file's JSON, its fields checked: four non-empty strings and `tags`, an object of strings."""
    if not isinstance(data, dict):
        raise BadJobFile(f"{path} holds {type(data).__name__}, not an object")
    for name in FIELDS:
        if not isinstance(data.get(name), str) or not data[name]:
            raise BadJobFile(f"{path}: {name} must be a non-empty string; got {_kind(data.get(name))}")
    if not data["tracking_uri"].startswith(("http://", "https://")):
        raise BadJobFile(f"{path}: tracking_uri must be an http:// or https:// URL")
    tags = data.get("tags")
    if not isinstance(tags, dict) or len(tags) > MAX_TAGS:
        got = f"{len(tags)} of them" if isinstance(tags, dict) else _kind(tags)
        raise BadJobFile(f"{path}: tags must be an object of at most {MAX_TAGS} strings; got {got}")
    for key, value in tags.items():
        if not isinstance(value, str):
            raise BadJobFile(f"{path}: tags.{key} must be a string; got {_kind(value)}")
    if not JOB_NAME.fullmatch(tags.get(TAG_JOB, "")):
        raise BadJobFile(f"{path}: tags.{TAG_JOB} must name the job (letters, digits, _ . -)")
    return JobFile(data["tracking_uri"].rstrip("/"), data["username"], data["password"], data["experiment_id"],
                   dict(tags))


def run_key(job: JobFile, task: str | None = None) -> str:
    """The run's `dsportal.run` tag: "<job>", or "<job>:<task>" for a sweep's task (DSPORTAL_TASK)."""
    if task is None:
        task = os.environ.get(TASK_ENV) or None
    if task is None:
        return job.tags[TAG_JOB]
    if not TASK_NAME.fullmatch(task):
        raise BadJobFile(f"{TASK_ENV} must be a task number; got {task[:20]!r}")
    return f"{job.tags[TAG_JOB]}:{task}"


def run_name(key: str) -> str:
    """The run's name in MLflow's UI: "job 12", or "sweep 12, task 3"."""
    job, _, task = key.partition(":")
    return f"sweep {job}, task {task}" if task else f"job {job}"


def _kind(value: object) -> str:
    """What a field holds, in words: "nothing", "a number", "a list", "an empty string", ..."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    return {str: "an empty string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)
