"""A job's states, one vocabulary for every scheduler: Slurm's own names, which the portal's API and pages use for
Kubernetes' and local jobs too (each scheduler maps its own words onto these)."""

PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, UNKNOWN = (
    "PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "UNKNOWN")
ENDED_STATES = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, "BOOT_FAIL", "DEADLINE", "NODE_FAIL",
                          "OUT_OF_MEMORY", "PREEMPTED"})
