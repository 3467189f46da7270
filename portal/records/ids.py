"""Job ids, every scheduler's in one place. Ids become directory names, routes and Kubernetes object names, so
each has one spelling: Slurm's are ASCII digits without leading zeros ("0002" and "2" would name the same Slurm job,
and an owner check that compares strings would take them for two); the local runner's "local-<date>T<time>-<hex>";
Kubernetes' "k8s-<date>-<time>-<hex>" (also a valid Job or MPIJob name, a DNS-1123 label). Ids never look alike
across schedulers, so an id names its scheduler (portal.scheduler.scheduler_of_job)."""

import functools
import re

SLURM_ID_PATTERN = r"[1-9][0-9]{0,11}"  # a sweep's: its job array's id
LOCAL_ID_PATTERN = r"local-[0-9]{8}T[0-9]{6}-[0-9a-f]{6}"
K8S_ID_PATTERN = r"k8s-[0-9]{8}-[0-9]{6}-[0-9a-f]{6}"

SLURM_ID = re.compile(rf"^{SLURM_ID_PATTERN}\Z")
LOCAL_ID = re.compile(rf"^{LOCAL_ID_PATTERN}\Z")
K8S_ID = re.compile(rf"^{K8S_ID_PATTERN}\Z")
# The schedulers whose job records are job.json files in the homes, each with its ids (Kubernetes keeps its records
# as its own objects). A record's "scheduler" field names its scheduler ("backend" in records written before
# 2026-11: portal.renamed).
HOME_ID_PATTERNS = {"slurm": SLURM_ID_PATTERN, "local": LOCAL_ID_PATTERN}
class HomeJobIds:
    """The ids of the jobs whose records are in the homes: any of HOME_ID_PATTERNS as the table is when asked (so
    a scheduler registered in it later counts too)."""

    def match(self, text: str) -> re.Match[str] | None:
        return _either(tuple(HOME_ID_PATTERNS.values())).match(text)


@functools.lru_cache(maxsize=8)
def _either(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"^(?:{'|'.join(patterns)})\Z")


JOB_ID = HomeJobIds()
