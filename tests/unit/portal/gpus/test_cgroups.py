"""A holder's CPU time and memory from its cgroups: Slurm's job cgroup on the node and a pod's, read with every
process below them, against a tree and a /proc made here."""

from __future__ import annotations

import os
from pathlib import Path

from portal.gpus import cgroups


def process(proc: Path, pid: int, ticks: tuple[int, int, int, int], pages: int, name: str = "python") -> None:
    folder = proc / str(pid)
    folder.mkdir(parents=True)
    fields = ["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0", *map(str, ticks), "20", "0"]
    (folder / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    (folder / "statm").write_text(f"1000 {pages} 10 1 0 50 0\n")


def procs(folder: Path, *pids: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))


def test_a_slurm_jobs_processes_in_every_step_and_below_count(tmp_path):
    freezer, proc = tmp_path / "freezer", tmp_path / "proc"
    job = freezer / "slurm_tnode1" / "uid_10001" / "job_42"
    procs(job / "step_batch", 100)
    procs(job / "step_0" / "task_0" / "mine", 101)  # a cgroup the job made below its step
    procs(freezer / "slurm_tnode1" / "uid_10002" / "job_43", 200)  # another job's
    hz, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    process(proc, 100, (hz, hz, 0, 0), 10)
    process(proc, 101, (3 * hz, 0, hz, 0), 5, name="evil) 0 0 0 0 0 0 0 0 0 0 99999 99999")
    process(proc, 200, (50 * hz, 0, 0, 0), 7)
    dirs = cgroups.slurm_job_dirs("tnode1", "42", freezer)
    assert dirs == [job]
    use = cgroups.use_of(dirs, proc)
    assert use is not None and use.cpu_s == 6.0 and use.memory_bytes == 15 * page


def test_no_cgroup_is_no_use_and_an_ended_process_counts_nothing(tmp_path):
    freezer, proc = tmp_path / "freezer", tmp_path / "proc"
    assert cgroups.use_of(cgroups.slurm_job_dirs("tnode1", "42", freezer), proc) is None
    assert cgroups.slurm_job_dirs("tnode1", "42/../../x", freezer) == []
    procs(freezer / "slurm_tnode1" / "uid_1" / "job_42", 300)  # listed, but already gone from /proc
    use = cgroups.use_of(cgroups.slurm_job_dirs("tnode1", "42", freezer), proc)
    assert use is not None and (use.cpu_s, use.memory_bytes) == (0.0, 0)


def test_a_pods_cgroup_is_found_under_either_driver(tmp_path):
    freezer = tmp_path / "freezer"
    uid = "0b6e58d2-83a4-4f7e-a1d3-5e9c2f1a8b20"
    cgroupfs = freezer / "kube-node1" / "kubepods" / "besteffort" / f"pod{uid}"
    systemd = freezer / "kubepods.slice" / f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    procs(cgroupfs, 1)
    procs(systemd, 2)
    assert cgroups.pod_dirs(uid, freezer) == sorted([cgroupfs, systemd])
    assert cgroups.pod_dirs("../x", freezer) == []


def test_a_holders_cgroups_are_its_pods_where_the_scheduler_names_them_else_its_slurm_jobs(tmp_path):
    freezer, pids = tmp_path / "freezer", tmp_path / "pids"
    uids = ("0b6e58d2-83a4-4f7e-a1d3-5e9c2f1a8b20", "1c7f69e3-94b5-4a8f-b2e4-6f0d3a2b9c31")
    pods = [pids / "kube-node1" / "kubepods" / "besteffort" / f"pod{uid}" for uid in uids]
    for folder in pods:
        procs(folder, 1)
    job = freezer / "slurm_kube-node1" / "uid_1" / "job_7"
    procs(job, 2)
    assert cgroups.holder_dirs("kube-node1", "7", uids, freezer, pids) == pods
    assert cgroups.holder_dirs("kube-node1", "7", (), freezer, pids) == [job]
    assert cgroups.holder_dirs("kube-node1", "jupyter-alice", ("../../x",), freezer, pids) == []
