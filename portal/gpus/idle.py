"""Idle GPUs given back: the rule, pure. For each server that holds GPUs, its readings in time order decide:

    idle for `idle_after_s`  ->  WARN its user (the lab, a browser notification, mail)
    still idle `grace_s` on  ->  STOP it, unless its user said "keep it" (KEEP: its idle clock starts again)
    busy again after a warning  ->  CLEAR the warning

Idle means every GPU it holds was read, known, and under IDLE_BELOW over the reading's interval
(portal.gpus.readings.GpuReading.idle). An unknown reading (a reader that failed, a holder seen for the first
time) ends an idle stretch as busy would: nothing is stopped on an unknown. Work of any kind on its GPUs counts as
busy, whatever the kernel's state: a training started from the notebook keeps the server. The same rule flags a
job whose GPUs stay idle (a hung rank, a stalled input): FLAG, and STOP only where the site says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from portal.gpus.readings import NodeReading


class Act(Enum):
    WARN = "warn"
    STOP = "stop"
    CLEAR = "clear"
    FLAG = "flag"  # a job's: its page and its user are told


@dataclass(frozen=True)
class Watched:
    """What is known of one holder between readings (kept in the watcher's state file)."""

    holder: str
    user: str
    server: bool  # a server (warned, then stopped); else a job (flagged; stopped only where the site says)
    idle_since: float | None = None  # the start of its current idle stretch; None: not idle now
    warned_at: float | None = None
    kept_at: float | None = None  # its user said "keep it"
    read_at: float | None = None  # the last reading that counted
    stopped_at: float | None = None  # when a stop was asked for (portal.gpus.watch: asked again if it still runs)


@dataclass(frozen=True)
class Rule:
    idle_after_s: float
    grace_s: float
    stop_jobs: bool = False


def holder_state(readings: Iterable[NodeReading], holder: str) -> tuple[float, bool | None]:
    """When the holder's GPUs were last read on all its nodes, and whether all were idle then (None: some GPU of it
    unknown, or none read)."""
    at, idle, seen = 0.0, True, False
    for reading in readings:
        held = reading.held_by(holder)
        if not held:
            continue
        seen, at = True, max(at, reading.at)
        if reading.error or any(gpu.busy is None for gpu in held):
            return at, None
        idle = idle and all(gpu.idle for gpu in held)
    return (at, idle) if seen else (0.0, None)


def step(watched: Watched, at: float, idle: bool | None, rule: Rule) -> tuple[Watched, Act | None]:
    """The holder after a reading taken at `at` (idle: all its GPUs idle; None: unknown), and what to do now."""
    if watched.read_at is not None and at <= watched.read_at:
        return watched, None  # nothing new read
    watched = replace(watched, read_at=at)
    if not idle:  # busy, or unknown: the idle stretch ends
        was_warned = watched.warned_at is not None
        return replace(watched, idle_since=None, warned_at=None, kept_at=None), Act.CLEAR if was_warned else None
    since = watched.idle_since if watched.idle_since is not None else at
    watched = replace(watched, idle_since=since)
    if watched.warned_at is None:
        if at - since >= rule.idle_after_s:
            return replace(watched, warned_at=at), Act.WARN if watched.server else Act.FLAG
        return watched, None
    if at - watched.warned_at >= rule.grace_s and (watched.server or rule.stop_jobs):
        return watched, Act.STOP
    return watched, None


def keep(watched: Watched, at: float) -> Watched:
    """Its user said "keep it": the warning goes, the idle clock starts again from now."""
    return replace(watched, kept_at=at, warned_at=None, idle_since=at if watched.idle_since is not None else None)
