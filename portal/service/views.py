"""The board's views of several users' records (issue 49, item 7), a part of portal.service.board.JobBoard.

The dashboard's views, by whose records they read:
- one user's own: the jobs list and API (a user's), a job's page, log, model card and API answer, the submit form,
  the settings, the user's usage: each waits only for reads of the user's own files, each bounded
  (portal.records.account.READ_BOUNDED), within the user's share of the readers (portal.service.fairness);
- several users': an admin's jobs list (page, its live rows, api/jobs), an admin's lookup of a job among every
  user's (a job's page, log, model card, API answer and cancel, "run again" in the submit form), an admin's usage
  (page and api/usage: this week's GPU-hours of everyone); each is here, or in gpu_usage for the usage;
- nobody's files: the cluster page and api/cluster (the shared squeue/scontrol answer), the templates page.

In a view of several users each user's part is read on its own (portal.service.parts): in his share of the part
readers, within the view's deadline, answered from what was read when it is late. A late user's rows say so
("stale": as read N s ago, and why); a user never read yet is listed in the answer's `late` with why; nobody's part
waits for another's.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from portal.jobs import Job, JobAccessError, JobNotFound, SchedulerError, UnreadableJob, UnreadableRecord
from portal.records.record import UNKNOWN
from portal.service.parts import PART_DEADLINE_S, PartsLate, UserParts
from portal.service.scans import UserRecords
from portal.service.summary import job_summary

if TYPE_CHECKING:
    from portal.config import PortalConfig
    from portal.scheduler.snapshot import ClusterCache, ClusterSnapshot
    from portal.service.hub_user import HubUser

AnyJob = Job | UnreadableJob


class ManyUsersViews:
    """JobBoard's views of several users, over its settings, snapshot cache, jobs API, records and part readers."""

    cfg: PortalConfig
    cluster: ClusterCache
    api: Any
    base_url: str
    service_prefix: str
    _parts: UserParts
    _records: dict[str, UserRecords]
    _records_lock: threading.Lock
    part_deadline_s: float = PART_DEADLINE_S

    if TYPE_CHECKING:
        def _jobs_of(self, user: HubUser) -> list[AnyJob]: ...

        def summary(self, job: AnyJob, snapshot: ClusterSnapshot | None = None, wait: bool = True,
                    viewer: str | None = None) -> dict[str, Any]: ...

        def prime_states(self, jobs: Sequence[AnyJob], snapshot: ClusterSnapshot) -> None: ...

    def job_rows(self, user: HubUser, everyone: Sequence[HubUser] = ()) -> list[dict[str, Any]]:
        """The user's jobs, newest first; an admin's list has every user in `everyone` too (`job_list`)."""
        return self.job_list(user, everyone)["jobs"]

    def job_list(self, user: HubUser, everyone: Sequence[HubUser] = ()) -> dict[str, Any]:
        """{"jobs": rows newest first, "late": [{"user", "note", "stale"}]}: a user's own jobs, read for this
        answer; an admin's list, every user's part read on its own within `part_deadline_s`, a late user's rows as
        last read (each row's "stale" says so) or none yet (his "late" entry says why)."""
        snapshot = self.cluster.snapshot()
        if not user.admin:
            return {"jobs": self.rows_of(user, snapshot, user.name), "late": []}
        owners = {owner.name: owner for owner in (user, *everyone)}
        parts = self._parts.gather({name: (("rows", user.name), functools.partial(self.rows_of, owner, snapshot,
                                                                                  user.name))
                                    for name, owner in owners.items()}, self.part_deadline_s)
        rows: list[dict[str, Any]] = []
        late = []
        for part in parts.values():
            note = part.note("jobs")
            if note:
                late.append({"user": part.user, "note": note, "stale": part.value is not None})
            rows.extend({**row, "stale": note} for row in part.value or [])
        rows.sort(key=lambda row: row["submitted_at"], reverse=True)
        return {"jobs": rows, "late": late}

    def rows_of(self, owner: HubUser, snapshot: ClusterSnapshot, viewer: str) -> list[dict[str, Any]]:
        """One user's rows as `viewer` sees them: his jobs (scanned as him), each with its state and the metrics
        known now."""
        try:
            found = self._jobs_of(owner)
        except JobAccessError:
            return []  # a hub user with no account on this machine has no jobs here
        listed = []
        self.prime_states(found, snapshot)
        for job in found:
            try:
                listed.append(self.summary(job, snapshot, wait=False, viewer=viewer))
            except JobNotFound:
                continue  # a job.json that claims a job Slurm says is someone else's
            except SchedulerError as err:  # this job's own question failed (say, accounting is down): not a state
                assert isinstance(job, Job)  # an unreadable record's summary asks no scheduler
                listed.append({**job_summary(job, UNKNOWN, "", None, self.base_url, self.service_prefix),
                               "reason": str(err)[:300]})
        listed.sort(key=lambda row: row["submitted_at"], reverse=True)
        return listed

    def find_among(self, viewer: HubUser, job_id: str, candidates: Sequence[HubUser], check: bool) -> AnyJob:
        """An admin's lookup of a job among other users' records: first among those whose records hold its id as
        last scanned, then among the rest; each user a part of his own within `part_deadline_s`. A job beats a
        broken record of the same id (anyone may make a directory named like another's job); JobNotFound when none
        has it, PartsLate when none that answered has it and some did not answer."""
        others = [owner for owner in candidates if owner.name != viewer.name]
        with self._records_lock:
            known = [o for o in others if o.name in self._records and job_id in self._records[o.name].jobs]
        broken: AnyJob | None = None
        late: list[str] = []
        for group in (known, [o for o in others if o not in known]):
            if not group:
                continue
            parts = self._parts.gather({owner.name: (("job", job_id, check),
                                                     functools.partial(self._lookup, owner, job_id, check))
                                        for owner in group}, self.part_deadline_s, keep=False)
            for part in parts.values():
                if part.late:
                    late.append(f"{part.user} ({part.late})")
                elif isinstance(part.value, Job):
                    return part.value
                elif part.value is not None:
                    broken = broken or part.value
        if broken is not None:
            return broken
        if late:
            raise PartsLate(f"job {job_id}: not found among the users whose records answered; not answered in "
                            f"time: {', '.join(late)}; try again shortly")
        raise JobNotFound(f"job {job_id}: not found")

    def _lookup(self, owner: HubUser, job_id: str, check: bool) -> AnyJob | None:
        """The job in the owner's records (as him), a broken record of that id, or None."""
        try:
            return self.api.get(job_id, user=owner.name, groups=owner.groups, cfg=self.cfg, check=check)
        except UnreadableRecord as err:
            return err.job
        except (JobNotFound, JobAccessError):
            return None
