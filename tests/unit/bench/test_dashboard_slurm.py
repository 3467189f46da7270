"""The dashboard benchmark's Slurm side, its pure parts: the hub's children by name, and what the dashboard ran
from GET api/cluster's counters; and /proc's lines read into processes (bench.common)."""

from __future__ import annotations

from bench.common import Proc, proc_of
from bench.dashboard_slurm import hub_children, slurm_counts


def test_a_process_is_read_from_its_stat_line_whatever_its_commands_name():
    stat = "77 (python3 -m a) b) S 12 77 77 0 -1 4194560 10 0 0 0 120 30 7 3 20 0 1 0 5 0 0"
    found = proc_of(77, stat, b"/usr/bin/python3\0-m\0portal.service\0", "0::/x\n")
    assert found == Proc(77, 12, "python3 -m a) b", ("/usr/bin/python3", "-m", "portal.service"), "0::/x\n")


def test_the_hubs_children_are_named_by_their_command_line():
    procs = [Proc(10, 5, "python3", ("python3", "-m", "portal.service")),
             Proc(11, 5, "node", ("node", "/usr/bin/configurable-http-proxy")),
             Proc(12, 5, "python3", ("python3", "-m", "jupyterhub_idle_culler")),
             Proc(13, 6, "python3", ("python3", "-m", "portal.service"))]  # another hub's
    assert hub_children(5, procs) == {"dashboard": 10, "proxy": 11}


def test_slurm_counts_name_the_shared_and_the_users_commands():
    before = {"squeue_calls": 10, "scontrol_calls": 20, "user_slurm_calls": {"sbatch": 1},
              "runuser_calls": {"sh": 2}, "hub_calls": 4}
    after = {"squeue_calls": 40, "scontrol_calls": 80, "user_slurm_calls": {"sbatch": 61, "scancel": 60},
             "runuser_calls": {"sh": 2, "test": 60}, "hub_calls": 5}
    assert slurm_counts(before, after) == {"squeue (shared)": 30, "scontrol (shared)": 60, "scancel (as users)": 60,
                                           "sbatch (as users)": 60, "runuser test": 60, "hub API requests": 1}
