"""A user's small files read together, for a step that would read them one process each.

A job list asks each job's state, and a state is a few small files of the job's directory (`state_files` of its
scheduler: an exit status, a final state, a PID), each read as the user: a list of 50 ended jobs was 150 processes
as the user, each a runuser and a PAM session (portal.records.account). `reading_ahead` reads them all with
`JobUser.read_texts` (one process per READ_MANY_AT_ONCE files) and gives a `ReadAhead`: the same user, whose read
of one of those files, at the same limit, is answered from what was read. Any other read is read as before. Kept
for one step only (the caller drops it): what it answers is what the files held a moment ago.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path

from portal.records.account import READ_LIMIT_BYTES, JobUser

Answers = Mapping[tuple[Path, int], tuple[str | None, str]]


@dataclasses.dataclass(frozen=True)
class ReadAhead(JobUser):
    """The user, with the answers of the reads made ahead ((path, limit) -> read_text_why's answer)."""

    ahead: Answers = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def read_text_why(self, path: Path, limit: int = READ_LIMIT_BYTES) -> tuple[str | None, str]:
        found = self.ahead.get((path, limit))
        return found if found is not None else super().read_text_why(path, limit)


def reading_ahead(user: JobUser, wanted: Iterable[tuple[Path, int]]) -> ReadAhead:
    """`user` with each (path, limit) of `wanted` read now, one read_texts per limit."""
    by_limit: dict[int, list[Path]] = {}
    for path, limit in dict.fromkeys(wanted):
        by_limit.setdefault(limit, []).append(path)
    answers = {(path, limit): answer for limit, paths in by_limit.items()
               for path, answer in user.read_texts(paths, limit).items()}
    fields = {field.name: getattr(user, field.name) for field in dataclasses.fields(JobUser)}
    return ReadAhead(**fields, ahead=answers)
