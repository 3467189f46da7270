"""What a job leaves in its directory (`~/jobs/<id>/job.json`) and the states a job can be in."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from portal.jobs.spec import FIELDS, JobSpec

# The states the API reports: Slurm's own names, which the local backend uses too.
PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, UNKNOWN = (
    "PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "UNKNOWN")
ENDED_STATES = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, "BOOT_FAIL", "DEADLINE", "NODE_FAIL",
                          "OUT_OF_MEMORY", "PREEMPTED"})
# Job ids become directory names: Slurm's are digits, the local backend's "local-<time>-<random>".
JOB_ID = re.compile(r"^(\d{1,12}|local-[0-9T]{15}-[0-9a-f]{6})$")

RECORD_FILE = "job.json"
OUTPUT_FILE = "output.log"  # the Slurm job's or the local run's stdout and stderr
SCRIPT_FILES = {"slurm": "job.sbatch", "local": "job.sh"}
EXIT_STATUS_FILE = "exit_status"  # written by the script when training ends, with its exit code
FINAL_STATE_FILE = "final_state"  # the ended state once seen, for when Slurm has forgotten the job


@dataclass(frozen=True)
class JobRecord:
    id: str
    backend: str
    user: str
    spec: JobSpec
    submitted_at: str  # ISO 8601, UTC
    job_dir: Path

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "backend": self.backend, "user": self.user, "spec": self.spec.to_dict(),
                           "submitted_at": self.submitted_at, "job_dir": str(self.job_dir)}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> JobRecord:
        data: dict[str, Any] = json.loads(text)
        spec = {k: v for k, v in data["spec"].items() if k in FIELDS}  # a record from a newer version still loads
        return cls(id=str(data["id"]), backend=str(data["backend"]), user=str(data["user"]), spec=JobSpec(**spec),
                   submitted_at=str(data["submitted_at"]), job_dir=Path(data["job_dir"]))

    @property
    def output_path(self) -> Path:
        return self.job_dir / OUTPUT_FILE

    @property
    def logdir(self) -> Path:
        return self.job_dir / "tensorboard"

    @property
    def checkpoint_dir(self) -> Path:
        return self.job_dir / "checkpoints"


def now_utc() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")
