"""Reading Slurm's answers: partitions, free GPUs, time limits, a user's GPUs, pending reasons."""

import json

import pytest

from portal.config import PortalConfig
from portal.quota import GpuQuota
from portal.records.spec import JobSpecError, parse_job_spec
from portal.scheduler.cluster import gpu_holders, server_pools, users_jobs
from portal.scheduler.slurm.answers import (
    gpu_count,
    held_reason,
    nodes_from_scontrol,
    pending_reason,
    slurm_partitions,
    wall_minutes,
)
from portal.scheduler.slurm.json_answers import read_squeue
from portal.scheduler.slurm.sbatch import limits_from
from tests.slurm_answers import SLURM_24_11, SLURM_26_05, STARTED, squeue_job, squeue_json

PARTITIONS = (
    "PartitionName=gpu AllowGroups=ALL Default=YES MaxTime=7-00:00:00 Nodes=localhost State=UP TotalCPUs=8\n"
    "PartitionName=debug AllowGroups=ALL Default=NO MaxTime=01:00:00 Nodes=localhost State=UP\n"
    "PartitionName=old Default=NO MaxTime=UNLIMITED Nodes=localhost State=DOWN\n"
)
NODE = ("NodeName=localhost Arch=x86_64 CoresPerSocket=4 CPUAlloc=2 CPUTot=8 Gres=gpu:4 NodeAddr=127.0.0.1 "
        "OS=Linux 6.1.0-x #1 SMP RealMemory=20000 AllocMem=2048 State={state} Partitions=gpu,debug "
        "GresUsed=gpu:1(IDX:0) CfgTRES=cpu=8,mem=20000M,billing=8 AllocTRES=cpu=2,mem=2G\n")


def server_pools_of(partition_lines: str, node_lines: str):
    """The pools a server may go to (portal.scheduler.cluster.server_pools), from scontrol's answers."""
    return server_pools(slurm_partitions(partition_lines, node_lines))


def test_partitions_and_free_gpus():
    gpu, debug = server_pools_of(PARTITIONS, NODE.format(state="MIXED"))
    assert (gpu.name, gpu.default, gpu.max_minutes, gpu.gpus_per_node, gpu.free_gpus_per_node) == (
        "gpu", True, 7 * 1440, 4, 3)
    assert (debug.name, debug.default, debug.max_minutes, debug.cpus_per_node) == ("debug", False, 60, 8)
    assert debug.memory_mb_per_node == 20000


def test_allocated_gpus_from_tres_where_slurmdbd_tracks_them():
    node = NODE.replace("GresUsed=gpu:1(IDX:0) ", "").replace("mem=2G", "mem=2G,gres/gpu=2")
    gpu, _ = server_pools_of(PARTITIONS, node.format(state="MIXED"))
    assert gpu.free_gpus_per_node == 2


def test_a_drained_node_offers_nothing():
    assert server_pools_of(PARTITIONS, NODE.format(state="IDLE+DRAIN")) == ()  # none usable: not offered
    small = NODE.replace("localhost", "node2").replace("CPUTot=8", "CPUTot=16").replace("gpu:1(", "gpu:0(")
    partitions = PARTITIONS.replace("Nodes=localhost", "Nodes=localhost,node2")
    gpu, _ = server_pools_of(partitions, NODE.format(state="MIXED") + small.format(state="IDLE+DRAIN"))
    assert (gpu.cpus_per_node, gpu.free_gpus_per_node) == (8, 3)  # the drained node's 16 CPUs and 4 GPUs do not count
    (both, _) = slurm_partitions(partitions, NODE.format(state="MIXED") + small.format(state="DOWN+NOT_RESPONDING"))
    assert [n.name for n in both.usable_nodes] == ["localhost"]
    assert both.unusable_note() == "; not usable now: node2 (down+not_responding)"


def test_a_users_gpus_count_every_node_and_pending_jobs():
    jobs = read_squeue(squeue_json(
        squeue_job(12, "alice", gpus_per_node=2, nodes=2), squeue_job(15, "alice", gpus_per_node=1,
                                                                      name="spawner-jupyterhub"),
        squeue_job(16, "alice", "PENDING", name="a | b", tres_per_job="gres:gpu:3", tres_req_str="cpu=1,gres/gpu=3"),
        squeue_job(17, "alice", name="cpu-only"), squeue_job(18, "bob", gpus_per_node=4, uid=10002),
        squeue_job(19, "alice", "CANCELLED", gpus_per_node=4)), now=STARTED + 60)
    holders = gpu_holders(users_jobs(jobs, "alice"))
    assert [(h.describe(), h.gpus) for h in holders] == [("job 12", 4), ("your server", 1), ("job 16", 3)]
    assert [job.id for job in jobs.values() if job.server] == ["15"]  # batchspawner's job name, read by read_squeue


def test_the_reasons_that_say_what_it_asks_for_is_held():
    assert held_reason("Resources") and held_reason("(Priority)") and held_reason("AssocGrpGRES,Priority")
    assert not held_reason("JobHeldUser") and not held_reason("BeginTime") and not held_reason("")


def test_pending_reasons_in_words():
    assert pending_reason("Resources") == "waiting for GPUs, CPUs or memory to free up (Slurm: Resources)"
    assert pending_reason("(Resources)") == pending_reason("Resources")  # squeue's %R: the word once
    assert pending_reason("AssocGrpGRES").startswith("your other jobs and servers hold your whole GPU quota")
    assert pending_reason("SomethingNew") == "Slurm: SomethingNew"
    words = "none of the 2 nodes can run it now: 2 without enough nvidia.com/gpu free"
    assert pending_reason(words) == words  # the Kubernetes scheduler's, in words already


def test_time_limits():
    assert wall_minutes("UNLIMITED") is None
    assert wall_minutes("1:00:00") == 60
    assert wall_minutes("7-00:00:00") == 7 * 1440
    assert wall_minutes("2-01:30:00") == 2 * 1440 + 90
    assert wall_minutes("30:00") == 30
    assert wall_minutes("00:00:30") == 1
    assert wall_minutes("1-12") == 1440 + 720
    assert wall_minutes("45") == 45


def test_gpu_counts():
    assert gpu_count("cpu=2,mem=2G,gres/gpu=2") == 2
    assert gpu_count("gres/gpu:v100=3") == 3
    assert gpu_count("gpu:4") == 4
    assert gpu_count("gpu:v100:2(S:0)") == 2
    assert gpu_count("cpu=1") == 0


@pytest.mark.parametrize("release", [SLURM_24_11, SLURM_26_05], ids=["24.11", "26.05"])
def test_scontrols_text_of_each_release_says_what_its_json_says(release):
    """The portal reads nodes and partitions from `scontrol show node -d -o` and `show partition -o` on every
    release: 24.11's `--json` for partitions does not say which one is the default (26.05's v0.0.45 does, in its
    flags). The real text answers of 24.11.5 and 26.05.3 read as their JSON answers, taken at the same moment, say."""
    nodes = nodes_from_scontrol((release / "scontrol-node.txt").read_text())
    newest = max(release.glob("scontrol-node-v*.json"))
    for record in json.loads(newest.read_text())["nodes"]:
        node = nodes[record["name"]]
        assert (node.cpus, node.memory_mb, node.gpus, node.address) == (
            record["cpus"], record["real_memory"], gpu_count(record["gres"]), record["address"])
        assert node.free_gpus == node.gpus - gpu_count(record["gres_used"]) and node.usable
        assert node.free_cpus == record["cpus"] - record["alloc_cpus"]
        assert node.partitions == tuple(record["partitions"]) and node.state == "+".join(record["state"])
    pools = slurm_partitions((release / "scontrol-partition.txt").read_text(),
                             (release / "scontrol-node.txt").read_text())
    assert [(p.name, p.default, p.max_minutes, len(p.nodes)) for p in pools] == [
        ("gpu", True, 7 * 1440, 2), ("debug", False, 60, 2)]


def test_a_jobs_partition_with_every_node_drained_refuses_a_job_by_its_nodes_and_offers_no_server_there():
    """limits() still answers (the spawn form may offer another partition): the job partition has 0 nodes, and a
    job is refused naming the field and the drained node."""
    limits = limits_from(PortalConfig(), slurm_partitions(PARTITIONS, NODE.format(state="IDLE+DRAIN")), GpuQuota(4))
    assert limits.nodes == 0 and limits.pools == ()
    with pytest.raises(JobSpecError) as refused:
        parse_job_spec({"epochs": 1}, limits, user_can_read=lambda path: True)
    assert refused.value.field == "nodes"
    assert str(refused.value) == ("nodes: no node in partition gpu can run a job now; not usable now: localhost "
                                  "(idle+drain)"), str(refused.value)
