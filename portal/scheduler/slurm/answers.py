"""Reading Slurm's own answers about the cluster: `scontrol show partition -o` and `scontrol show node -d -o` (the
administrator's text: names, limits, states) into the scheduler-neutral `ClusterNode` and `NodePool`
(portal.scheduler.cluster), and Slurm's pending reasons in words. Jobs are read from `squeue --json`
(portal.scheduler.slurm.json_answers): their names and paths are their users' text.

Pure parsers shared by the spawner (spawners/slurm.py: what a JupyterLab server may ask for), the training jobs
and the dashboard. Nothing here runs a command.
"""

from __future__ import annotations

import re

from portal.scheduler.cluster import ClusterNode, NodePool

# A node in one of these states cannot run anything now (it may come back: it still counts as a member).
UNUSABLE_NODE_STATE = re.compile(r"DOWN|DRAIN|FAIL|NOT_RESPONDING|FUTURE")
SERVER_JOB_NAME = "spawner-jupyterhub"  # batchspawner's --job-name for a JupyterLab server

# Slurm's pending reasons, in words a data scientist can act on.
PENDING_REASONS = {
    "Resources": "waiting for GPUs, CPUs or memory to free up",
    "Priority": "other jobs are ahead in the queue",
    "ReqNodeNotAvail": "a node it needs is not available",
    "NodeDown": "a node it needs is down",
    "PartitionTimeLimit": "the wall time exceeds the partition's limit",
    "PartitionNodeLimit": "it asks for more nodes than the partition has usable",
    "QOSMaxGRESPerUser": "you are using your whole GPU allowance",
    "AssocGrpGRES": "your other jobs and servers hold your whole GPU quota; it starts when they end",
    "AssocGrpGRESLimit": "your other jobs and servers hold your whole GPU quota; it starts when they end",
    # The weekly GPU-hours budget, as Slurm holds it (GrpTRESMins, since Sunday 00:00; docs/gpus.md).
    "AssocGrpGRESMinutes": "what is left of your weekly GPU-hours budget (Slurm counts since Sunday 00:00), beside "
                           "what your running jobs and servers may still use, is less than its GPUs x time limit; "
                           "it starts when they end if that leaves enough, else next week: ask for less",
    "AssocGrpGRESRunMinutes": "your running jobs and servers may still use what is left of your weekly GPU-hours "
                              "budget; it starts when they end",
    "JobHeldUser": "the job is held",
    "JobHeldAdmin": "the job is held by an administrator",
    "BeginTime": "the job's start time has not come (Slurm waits a while before restarting a requeued job)",
    "None": "the scheduler has not looked at it yet",
}

# Slurm's reasons that mean "the GPUs, CPUs or memory it asks for are held": what holds them is worth naming.
HELD_REASONS = frozenset({"Resources", "Priority", "AssocGrpGRES", "AssocGrpGRESLimit", "QOSMaxGRESPerUser"})


SLURM_REASON = re.compile(r"[A-Za-z_]+(,[A-Za-z_]+)*")  # Slurm's own word(s); a reason in words has spaces


def pending_reason(reason: str) -> str:
    """Why a job waits, in words, once, with Slurm's word after them: "waiting for GPUs, CPUs or memory to free
    up (Slurm: Resources)". Slurm's word may come in parentheses (squeue's %R): they are not repeated. A reason
    that is words already (the Kubernetes scheduler's, put in words by portal.scheduler.kubernetes.pods) is kept as it
    is."""
    word = reason.strip().strip("()").strip()
    if not SLURM_REASON.fullmatch(word):
        return reason.strip()
    words = PENDING_REASONS.get(word.split(",")[0])
    return f"{words} (Slurm: {word})" if words else f"Slurm: {word}"


def held_reason(reason: str) -> bool:
    """Whether Slurm's reason (its first word, parentheses or not) says the GPUs, CPUs or memory the job asks for
    are held by running jobs (HELD_REASONS)."""
    return reason.strip().strip("()").split(",")[0] in HELD_REASONS


# What Slurm answers for a job it does not know: ended and forgotten (MinJobAge), or hidden from this user
# (PrivateData=jobs). Every other failure of squeue/scontrol means Slurm did not answer, which is no job state.
JOB_UNKNOWN = "Invalid job id specified"


def job_unknown(message: str) -> bool:
    """Whether a failed squeue/scontrol's message says the job is not known (rather than Slurm not answering)."""
    return JOB_UNKNOWN in message


def squeue_outcome(answer: str, error: str | None) -> str:
    """What `squeue -h -j ID` says of a job: "state" (its line is in `answer`), "gone" (Slurm does not know it, or
    lists nothing: it has ended), or "unavailable" (squeue failed otherwise: Slurm did not answer, which says
    nothing of the job). `error` is the failed command's message, None when it succeeded."""
    if error is not None:
        return "gone" if job_unknown(error) else "unavailable"
    return "state" if answer.strip() else "gone"


def parse_key_values(line: str) -> dict[str, str]:
    """One line of `scontrol show partition|node -o`: Key=Value pairs (values that contain spaces are cut, which
    the fields we read never do). Never a job's line: a job's name, comment and paths are its user's text, and a
    later "Key=" of theirs would override Slurm's (read jobs with portal.scheduler.slurm.json_answers)."""
    return dict(re.findall(r"(\w+)=(\S*)", line))


def wall_minutes(text: str) -> int | None:
    """Slurm's time limit ("UNLIMITED", "1:00:00", "7-00:00:00", "30") in minutes."""
    if text in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = (parts + [0, 0])[:3]
    else:  # minutes, minutes:seconds or hours:minutes:seconds
        hours, minutes, seconds = ([0] + parts + [0])[:3] if len(parts) < 3 else parts
    return int(days or 0) * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def gpu_count(tres: str) -> int:
    """GPUs in a TRES or GRES string such as `cpu=2,mem=2G,gres/gpu=1` or `gpu:4` or `gpu:v100:2(S:0)`."""
    match = re.search(r"gres/gpu(?::[\w-]+)?=(\d+)", tres) or re.search(r"\bgpu(?::[\w-]+)?:(\d+)", tres)
    return int(match.group(1)) if match else 0


def _whole(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0


def nodes_from_scontrol(node_lines: str) -> dict[str, ClusterNode]:
    """`scontrol show node -d -o`, by node name."""
    nodes = {}
    for line in node_lines.splitlines():
        node = parse_key_values(line)
        if "NodeName" not in node:
            continue
        usable = not UNUSABLE_NODE_STATE.search(node.get("State", ""))
        total = gpu_count(node.get("Gres", ""))
        # GresUsed comes with `scontrol show node -d`; AllocTRES counts GPUs only where slurmdbd tracks them.
        used = gpu_count(node.get("GresUsed") or node.get("AllocTRES", ""))
        nodes[node["NodeName"]] = ClusterNode(
            name=node["NodeName"],
            cpus=int(node.get("CPUTot", 0) or 0),
            memory_mb=int(node.get("RealMemory", 0) or 0),
            gpus=total,
            free_gpus=max(0, total - used) if usable else 0,
            usable=usable,
            partitions=tuple(node.get("Partitions", "").split(",")),
            state=node.get("State", ""),
            address=node.get("NodeAddr", ""),
            free_cpus=max(0, _whole(node.get("CPUTot")) - _whole(node.get("CPUAlloc"))) if usable else 0,
            free_memory_mb=max(0, _whole(node.get("RealMemory")) - _whole(node.get("AllocMem"))) if usable else 0,
        )
    return nodes


def slurm_partitions(partition_lines: str, node_lines: str) -> tuple[NodePool, ...]:
    """Partitions that are up and have nodes, from `scontrol show partition -o` and `scontrol show node -d -o`."""
    nodes = nodes_from_scontrol(node_lines)
    partitions = []
    for line in partition_lines.splitlines():
        part = parse_key_values(line)
        if "PartitionName" not in part or part.get("State") != "UP":
            continue
        members = tuple(n for n in nodes.values() if part["PartitionName"] in n.partitions)
        if not members:
            continue
        partitions.append(NodePool(
            name=part["PartitionName"],
            nodes=members,
            max_minutes=wall_minutes(part.get("MaxTime", "UNLIMITED")),
            default=part.get("Default") == "YES",
        ))
    return tuple(partitions)


