"""A Slurm training job before it is submitted (pure): its batch script (render_sbatch, the job directory in
Slurm's own filename patterns) and what a user may ask of the jobs partition (limits_from). The scheduler that
submits it is portal.scheduler.slurm.scheduler."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from portal.config import PortalConfig
from portal.mlflow_accounts import JOB_FILE
from portal.quota import GpuQuota
from portal.records.limits import JobLimits
from portal.records.record import OUTPUT_FILE
from portal.records.spec import JobSpec
from portal.records.sweep import SweepPlan
from portal.records.templating import exported, job_environment, launch_template, program_values, programs_with
from portal.scheduler.cluster import NodePool, server_pools
from portal.scheduler.slurm.errors import SlurmError
from programkit.sweep import EXIT_FINISHED

SLURM_JOB_ID = "%j"  # in a job_dir: Slurm's own filename pattern for the job id
SLURM_ARRAY_JOB_ID = "%A"  # ... and for a job array's (a sweep's), which every task of the array shares
SWEEP_TASK_LOG = "trial-%a.log"  # each task's output, in the sweep's directory (%a: the task's index)


def shell_path(path: str) -> str:
    """A path for the script's shell, quoted, with Slurm's %j standing for "$SLURM_JOB_ID" (and %A for
    "$SLURM_ARRAY_JOB_ID")."""
    pattern, variable = (SLURM_ARRAY_JOB_ID, "SLURM_ARRAY_JOB_ID") if SLURM_ARRAY_JOB_ID in path else (
        SLURM_JOB_ID, "SLURM_JOB_ID")
    parts = path.split(pattern)
    return f'"${variable}"'.join(shlex.quote(p) if p else "" for p in parts)


def render_sbatch(spec: JobSpec, job_dir: str, cfg: PortalConfig, partition: str = "",
                  plan: SweepPlan | None = None) -> str:
    """The batch script for `spec`. `job_dir` is where the job writes everything; `%j` in it stands for the Slurm
    job id (as in sbatch's own --output patterns), which is how `submit` names a job's directory after its id.
    With a sweep's `plan`: a job array, one trial per task, `%A` (the array's id) in `job_dir`."""
    environment = job_environment(cfg, '"$HOME"', f'"$job_dir/{JOB_FILE}"')
    if plan is not None:
        job_dir = job_dir.replace(SLURM_JOB_ID, SLURM_ARRAY_JOB_ID)
    values = program_values(spec, cfg)
    return launch_template(spec, "sbatch").render(
        spec=spec,
        plan=plan,
        finished_exit=EXIT_FINISHED,
        partition=partition,
        output=f"{job_dir}/{SWEEP_TASK_LOG if plan is not None else OUTPUT_FILE}",
        job_dir_sh=shell_path(job_dir),
        venv_bin=values["program_bin"],
        slurm_bin=str(cfg.slurm_bin_dir),
        portal_python=str(cfg.venv / "bin" / "python"),
        job_env=environment,
        launcher=cfg.jobs_launcher,
        map_by=cfg.jobs_mpi_map_by,
        bind_to=cfg.jobs_mpi_bind_to,
        mpirun_args=cfg.jobs_mpirun_args,
        trainer_args=cfg.jobs_trainer_args,
        exported=exported(environment),
        srun_mpi=cfg.jobs_srun_mpi,
        **values,
    )


def jobs_partition(cfg: PortalConfig, partitions: Sequence[NodePool]) -> NodePool:
    """The partition jobs go to: `jobs_partition`, else Slurm's default. SlurmError when it is not up."""
    if not partitions:
        raise SlurmError("Slurm reports no partition that is up")
    wanted = cfg.jobs_partition
    partition = next((p for p in partitions if p.name == wanted), None) if wanted else next(
        (p for p in partitions if p.default), partitions[0])
    if partition is None:
        raise SlurmError(f"jobs_partition {wanted!r} is not a partition that is up; up: "
                         f"{', '.join(p.name for p in partitions)}")
    return partition


def limits_from(cfg: PortalConfig, partitions: Sequence[NodePool], quota: GpuQuota, jobs_queued: int = 0) -> JobLimits:
    """What a user may ask for, given Slurm's partitions and their GPU quota with what their jobs and server hold
    of it (SlurmScheduler.quota) (pure): the jobs partition's shape (its usable nodes, busy or not: a job may
    wait; drained or down ones are left out), the quota, and how many of their jobs are queued or running against
    max_jobs_per_user (Slurm holds the same limits for whatever does not come through the portal), and each usable
    node's shape, which a job's nodes must each have room for (portal.records.fit); and every partition a server
    may go to. SlurmError when the jobs partition is not up (a jobs partition whose nodes are all drained or down
    has 0 nodes: a job is refused naming them, a server may still go elsewhere)."""
    partition = jobs_partition(cfg, partitions)
    return JobLimits(
        partition=partition.name, nodes=len(partition.usable_nodes), gpus_per_node=partition.gpus_per_node,
        cpus_per_node=partition.cpus_per_node, memory_gb_per_node=max(1, partition.memory_mb_per_node // 1024),
        max_minutes=partition.max_minutes, quota=quota,
        default_data_dir=str(cfg.default_data_path), unusable_note=partition.unusable_note(),
        jobs_queued=jobs_queued, max_jobs=cfg.max_jobs_per_user, mail=cfg.job_mail,
        rooms=partition.rooms(), programs=programs_with("sbatch"), pools=server_pools(partitions))
