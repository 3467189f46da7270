"""A job's runs across requeues, from sacct, Slurm's node events and the job's log (as Slurm 22.05 prints them)."""

import re
import subprocess

from portal.scheduler.cluster import expand_hostlist
from portal.scheduler.slurm.history import LOG_LINES, history_lines, parse_events, parse_runs, resumed_epochs
from programkit import runlines

# sacct -D -X -P -n -j 13 -o State,Start,End,NodeList, for a job whose node2 died in its first run
RUNS = ("NODE_FAIL|2026-11-22T18:55:31|2026-11-22T18:56:00|node[1-2]\n"
        "RUNNING|2026-11-22T18:58:18|Unknown|node[1-2]\n")
# sacctmgr -nP show event start=... format=NodeName,TimeStart,State,Reason
EVENTS = ("|2026-11-22T18:53:18||Cluster Registered TRES\n"
          "node2|2026-11-22T18:56:00|DOWN*|Not responding\n"
          "node3|2026-11-22T18:56:00|DOWN*|Not responding\n")  # not one of the job's nodes
LOG = """chexnet: Slurm job 13 on node[1-2], 2 worker(s), launched by mpirun
chexnet.train: --resume: no checkpoint in /home/alice/jobs/13/checkpoints; starting fresh at epoch 1
chexnet.train: epoch 1/5: loss/train=0.6 ...
chexnet.train: epoch 2/5: loss/train=0.5 ...
slurmstepd-node1: error: *** JOB 13 ON node1 CANCELLED AT 2026-11-22T18:56:00 DUE TO NODE FAILURE ***
chexnet: Slurm job 13 restarted (restart 1) after it was requeued
chexnet: Slurm job 13 on node[1-2], 2 worker(s), launched by mpirun
chexnet.train: resuming from /home/alice/jobs/13/ckpt-2: 2 epochs done, continuing with epoch 3 of 5 at lr 0.002
"""


def test_host_lists():
    assert expand_hostlist("node[1-2]") == ("node1", "node2")
    assert expand_hostlist("node[1,3-4],gpu[08-10]") == ("node1", "node3", "node4", "gpu08", "gpu09", "gpu10")
    assert expand_hostlist("node1") == ("node1",)
    assert expand_hostlist("None assigned") == ()


def test_a_node_failure_then_a_resume():
    runs = parse_runs(RUNS)
    assert [(r.state, r.nodes) for r in runs] == [("NODE_FAIL", ("node1", "node2")), ("RUNNING", ("node1", "node2"))]
    assert resumed_epochs(LOG) == {0: 1, 1: 3}
    assert history_lines(runs, parse_events(EVENTS), resumed_epochs(LOG)) == [
        "requeued after node2 failed (Not responding) at 2026-11-22 18:56:00; resumed at epoch 3"]


def test_waiting_to_run_again_and_unknown_causes():
    runs = parse_runs("NODE_FAIL|2026-11-22T18:55:31|2026-11-22T18:56:00|node[1-2]\nPENDING|None|Unknown|None "
                      "assigned\n")
    assert history_lines(runs, [], {0: 1}) == [
        "requeued after it ended NODE_FAIL at 2026-11-22 18:56:00; waiting to run again"]


def test_a_job_that_ran_once_has_no_history():
    assert history_lines(parse_runs("COMPLETED|2026-11-22T18:55:31|2026-11-22T18:57:00|node1\n"), [], {0: 1}) == []


def test_the_log_lines_grep_keeps_are_the_ones_read():
    kept = subprocess.run(["grep", "-E", LOG_LINES], input=LOG, text=True, capture_output=True).stdout
    assert len(kept.splitlines()) == 3 and resumed_epochs(kept) == resumed_epochs(LOG)
    assert not re.search("epoch 1/5", kept)


def test_any_programs_resume_lines_are_read_as_the_kit_words_them():
    """A program says where it starts with programkit.runlines after its own prefix, whatever its module's name."""
    log = (f"toy.run: {runlines.starting_fresh('/home/alice/jobs/7/checkpoints')}\n"
           "toy: Slurm job 7 restarted (restart 1) after it was requeued\n"
           f"toy.run: {runlines.resuming('/home/alice/jobs/7/checkpoints/ckpt-4', 4, 9, ' at lr 0.01')}\n")
    assert resumed_epochs(log) == {0: 1, 1: 5}
    kept = subprocess.run(["grep", "-E", LOG_LINES], input=log, text=True, capture_output=True).stdout
    assert kept == log
