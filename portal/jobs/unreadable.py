"""A job directory whose job.json is not a record of its user's job (portal.records.record): shown, never acted on."""

from __future__ import annotations

from typing import Any

from portal.errors import Untrusted
from portal.records.record import RECORD_FILE, UNREADABLE


class UnreadableRecord(Untrusted, LookupError):
    """The job directory's job.json is not a record of the user's for that job; `job` stands for it."""

    def __init__(self, job: UnreadableJob):
        super().__init__(f"job {job.id}: unreadable record {job.job_dir}/{RECORD_FILE}: {job.reason}")
        self.job = job

    def user_message(self) -> str:
        return f"{self}; nothing is done with a job whose record cannot be trusted"


class UnreadableJob:
    """A job directory whose record is not one (see portal.records.record): shown with its id, its directory's owner
    and the reason; nothing is done with it, since nothing it says can be trusted."""

    state = UNREADABLE
    done = True
    submitted_at = ""

    def __init__(self, job_id: str, owner: str, job_dir: str, reason: str):
        self.id, self.owner, self.job_dir, self.reason = job_id, owner, job_dir, reason

    def refuse(self, *_: Any, **__: Any) -> Any:
        raise UnreadableRecord(self)

    logs = cancel = metrics = model_card = refuse  # nothing is read or done on the word of a broken record
    plan = None  # nor is it taken for a sweep

    def history(self) -> list[str]:
        return []

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "user": self.owner, "state": UNREADABLE, "job_dir": self.job_dir,
                "unreadable": self.reason}
