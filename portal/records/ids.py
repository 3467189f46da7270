"""Job ids: each scheduler's pattern is in its registration (portal.registrations: `job_ids`, with why each is
spelled so). Here is what the records layer makes of them: the ids of the jobs whose records are job.json files in
the homes (`JOB_ID`: every such scheduler's, as the registrations are when asked), and a scheduler's pattern
anchored for a class's `job_ids`. Ids never look alike across schedulers, so an id names its scheduler
(portal.scheduler.registry.scheduler_of_job). A record's "scheduler" field names its scheduler ("backend" in
records written before 2026-11: portal.renamed)."""

import functools
import re

from portal.registrations import SCHEDULERS


def anchored(pattern: str) -> re.Pattern[str]:
    """A registered `job_ids` pattern, matching a whole id."""
    return re.compile(rf"^{pattern}\Z")


def home_id_patterns() -> dict[str, str]:
    """The schedulers whose job records are in the homes, each with its ids' pattern (unanchored)."""
    return {name: registered.job_ids for name, registered in SCHEDULERS.items() if registered.records_in_home}


class HomeJobIds:
    """The ids of the jobs whose records are in the homes, of every such scheduler registered when asked."""

    def match(self, text: str) -> re.Match[str] | None:
        return _either(tuple(home_id_patterns().values())).match(text)


@functools.lru_cache(maxsize=8)
def _either(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"^(?:{'|'.join(patterns)})\Z")


JOB_ID = HomeJobIds()
