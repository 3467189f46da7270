"""What happened to a Slurm job across its runs: a job whose node failed is requeued by Slurm, runs again and
resumes from its last checkpoint. The dashboard shows it as "requeued after node2 failed (Not responding) at
18:56:00; resumed at epoch 3".

Pure: Slurm's own records go in, lines come out. Each run is a row of `sacct --duplicates`; which node failed is
Slurm's node event (`sacctmgr show event`) inside the run; where a run resumed is the training's own log line
("... continuing with epoch 3 of 5" or "... starting fresh at epoch 1") in that run's part of the job's log, which
the batch script starts with "chexnet: Slurm job 42 restarted (restart 1)" on every run after the first.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from portal.scheduler.cluster import expand_hostlist
from portal.scheduler.slurm.usage import sacct_time
from programkit import runlines

# `sacct -D -X -P -n -j ID -o RUNS_FORMAT` and `sacctmgr -nP show event ... format=EVENTS_FORMAT`
RUNS_FORMAT = "State,Start,End,NodeList"
EVENTS_FORMAT = "NodeName,TimeStart,State,Reason"
REQUEUED_BY = ("NODE_FAIL", "REQUEUED", "PREEMPTED", "BOOT_FAIL")  # a run that ended so and was run again
# The job's log is the user's to write: ASCII digits only, and few of them (int() of 5,000 digits raises).
# The launcher's line (any program's name before it: "chexnet:", "chexnet-torch:") and the program's own resume
# line (programkit.runlines, which every program says).
RESTART_LINE = re.compile(r"^[a-z][a-z0-9-]{0,40}: Slurm job [0-9]{1,12} restarted \(restart ([0-9]{1,6})\)", re.M)
MAX_MARKS, MAX_MARKS_BYTES = 1000, 256 * 1024  # of the log's lines that history reads: more than any job has
MAX_LOG_BYTES = 256 * 2**20  # of a job's log, the part history looks through (its start, where runs begin)
# What of a job's log history reads (grep -E: the lines the two patterns can match), so a long log is not copied.
LOG_LINES = rf"^[a-z][a-z0-9-]*: Slurm job [0-9]+ restarted|{runlines.RESUME_GREP}"
EVENT_SLACK = timedelta(seconds=60)  # a node is marked down when its jobs are killed, give or take Slurm's ping


@dataclass(frozen=True)
class Run:
    state: str
    start: datetime | None
    end: datetime | None
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class NodeEvent:
    node: str
    start: datetime
    state: str
    reason: str


def parse_runs(sacct_out: str) -> list[Run]:
    runs = []
    for line in sacct_out.splitlines():
        fields = line.split("|")
        if len(fields) != 4 or not fields[0]:
            continue
        state, start, end, nodes = fields
        runs.append(Run(state.split()[0], sacct_time(start), sacct_time(end), expand_hostlist(nodes)))
    return runs


def parse_events(sacctmgr_out: str) -> list[NodeEvent]:
    events = []
    for line in sacctmgr_out.splitlines():
        fields = line.split("|", 3)
        if len(fields) != 4 or not fields[0]:
            continue  # the cluster's own events have no node
        started = sacct_time(fields[1])
        if started is not None:
            events.append(NodeEvent(fields[0], started, fields[2], fields[3]))
    return events


def resumed_epochs(log: str) -> dict[int, int]:
    """Restart number (0: the first run) -> the epoch that run's training started at, from the job's log."""
    found = {}
    marks = [(0, 0), *((int(m.group(1)), m.start()) for m in RESTART_LINE.finditer(log)), (-1, len(log))]
    for (restart, begin), (_, end) in itertools.pairwise(marks):
        match = runlines.RESUME_LINE.search(log, begin, end)
        if match:
            found[restart] = runlines.resumed_at(match)
    return found


def failed_nodes(run: Run, events: list[NodeEvent]) -> list[NodeEvent]:
    """The node events (down, failing) on the run's nodes while it ran."""
    if run.start is None:
        return []
    until = (run.end or run.start) + EVENT_SLACK
    return [e for e in events if e.node in run.nodes and run.start <= e.start <= until
            and e.state.upper().startswith(("DOWN", "FAIL", "DRAIN"))]


def history_lines(runs: list[Run], events: list[NodeEvent], resumed: dict[int, int]) -> list[str]:
    """One line per run that Slurm ended and ran again."""
    lines = []
    for index, run in enumerate(runs[:-1]):
        if run.state not in REQUEUED_BY:
            continue
        failed = failed_nodes(run, events)
        if failed:
            why = "after " + ", ".join(f"{e.node} failed ({e.reason or e.state})" for e in failed)
        else:
            why = f"after it ended {run.state}"
        when = f" at {run.end:%Y-%m-%d %H:%M:%S}" if run.end else ""
        line = f"requeued {why}{when}"
        if index + 1 in resumed:
            line += f"; resumed at epoch {resumed[index + 1]}"
        elif runs[index + 1].state == "PENDING":
            line += "; waiting to run again"
        lines.append(line)
    return lines
