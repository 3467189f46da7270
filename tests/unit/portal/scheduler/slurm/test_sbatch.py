"""The job scripts, rendered from a spec without any scheduler: every #SBATCH line, quoting, launchers, the CLI."""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys

import pytest

from portal.config import ConfigError, PortalConfig
from portal.records.programs import registry
from portal.records.spec import JobSpec
from portal.records.templating import sbatch_value
from portal.renamed import BACKEND_GOES
from portal.scheduler.local import render_local
from portal.scheduler.slurm.sbatch import render_sbatch, shell_path
from tests.unit.helpers import SPEC_LIMITS as LIMITS
from tests.unit.helpers import bash_syntax_ok, sbatch_lines
from tests.unit.helpers import parse_spec as parse

CFG = PortalConfig()
JOB_DIR = "/home/alice/jobs/%j"
AT_LIMITS = dict(nodes=1, gpus_per_node=4, cpus_per_task=2, memory_gb=19, time_limit="168:00:00", epochs=1000,
                 batch_size=1024, image_size=1024, model="resnet50", fp16=True, xla=True)


def test_every_sbatch_line_from_the_spec():
    script = render_sbatch(parse(nodes=2, gpus_per_node=2, cpus_per_task=3, memory_gb=12, time_limit="01:30:00"),
                           JOB_DIR, CFG, partition="gpu")
    assert script.startswith("#!/bin/bash\n")
    assert sbatch_lines(script) == {
        "job-name": "chexnet", "partition": "gpu", "nodes": "2", "ntasks-per-node": "2", "cpus-per-task": "3",
        "mem": "12G", "time": "01:30:00", "gres": "gpu:2", "output": "/home/alice/jobs/%j/output.log",
        "open-mode": "append"}
    assert "\n#SBATCH --requeue\n" in script  # a failed node requeues it; the log keeps both runs
    bash_syntax_ok(script)


def test_a_cpu_only_job_has_one_worker_and_no_gres():
    script = render_sbatch(parse(gpus_per_node=0), JOB_DIR, CFG)
    lines = sbatch_lines(script)
    assert lines["ntasks-per-node"] == "1" and "gres" not in lines and "partition" not in lines
    assert "mpirun -np 1 " in script


def test_every_field_at_its_limits_renders():
    spec = parse(**AT_LIMITS)
    script = render_sbatch(spec, JOB_DIR, CFG, partition="gpu")
    lines = sbatch_lines(script)
    assert (lines["ntasks-per-node"], lines["gres"], lines["mem"], lines["time"]) == ("4", "gpu:4", "19G",
                                                                                      "168:00:00")
    assert "--epochs 1000 --batch-size 1024 --image-size 1024" in script
    assert "--model resnet50 --pipeline parallel --resume --progress epoch --fp16 --xla)" in script
    bash_syntax_ok(script)


def test_the_training_command_writes_into_the_job_directory():
    script = render_sbatch(parse(), JOB_DIR, CFG)
    assert 'job_dir=/home/alice/jobs/"$SLURM_JOB_ID"\n' in script
    assert '--logdir "$job_dir/tensorboard"' in script and '--checkpoint-dir "$job_dir/checkpoints"' in script
    assert f"--data-dir {LIMITS.default_data_dir}\n" in script
    assert "--fp16" not in script and "--xla" not in script


def test_mpirun_by_default_one_worker_per_gpu_mapped_by_socket():
    script = render_sbatch(parse(nodes=2, gpus_per_node=2), JOB_DIR, CFG)
    launch = script[script.index("mpirun "):]
    assert launch.startswith("mpirun -np 4 --map-by socket --bind-to none")
    assert "--mca pml ob1 --mca btl '^openib'" in launch  # the caret is quoted for the shell
    for name in ("PATH", "LD_LIBRARY_PATH", "NCCL_DEBUG"):
        assert f"-x {name} " in launch
    assert '"${train[@]}"' in launch


def test_nccl_settings_come_from_config_and_are_quoted():
    cfg = dataclasses.replace(CFG, jobs_nccl_debug="INFO", jobs_nccl_socket_ifname="^docker0,lo",
                              jobs_nccl_ib_disable="1")
    script = render_sbatch(parse(), JOB_DIR, cfg)
    assert "export NCCL_DEBUG=INFO\n" in script
    assert "export NCCL_SOCKET_IFNAME='^docker0,lo'\n" in script
    assert "export NCCL_IB_DISABLE=1\n" in script
    assert "-x NCCL_SOCKET_IFNAME -x NCCL_IB_DISABLE" in script
    quiet = render_sbatch(parse(), JOB_DIR, dataclasses.replace(CFG, jobs_nccl_debug=""))
    assert "NCCL" not in quiet


def test_the_sites_programs_directory_is_every_workers_python_path_and_none_without_it():
    """A site's own programs (portal.config_programs): every job script names their directory to its processes, and
    mpirun passes it on to the other node's workers; a site with none adds nothing."""
    cfg = dataclasses.replace(CFG, site_python_path="/opt/site programs")
    for template in registry().names[:2]:  # the portal's own: a site's directory reaches every program
        script = render_sbatch(parse(template=template, nodes=2, gpus_per_node=1), JOB_DIR, cfg)
        assert "export PYTHONPATH='/opt/site programs'\n" in script, template
        assert "PYTHONPATH" not in render_sbatch(parse(template=template, nodes=2, gpus_per_node=1), JOB_DIR, CFG)
    assert "-x PYTHONPATH " in render_sbatch(parse(nodes=2, gpus_per_node=1), JOB_DIR, cfg)
    assert "export PYTHONPATH='/opt/site programs'\n" in render_local(parse(), "/home/alice/jobs/local-1", cfg)


def test_the_sites_job_environment_reaches_every_worker_with_home_expanded_by_the_shell(tmp_path):
    cfg = dataclasses.replace(CFG, jobs_environment=("KERAS_HOME={home}/.cache/it's keras", "EMPTY=",
                                                     "TMPDIR=/scratch/$USER"))
    script = render_sbatch(parse(nodes=2, gpus_per_node=1), JOB_DIR, cfg)
    assert "export KERAS_HOME=\"$HOME\"'/.cache/it'\"'\"'s keras'\n" in script
    assert "export EMPTY=''\n" in script and "export TMPDIR='/scratch/$USER'\n" in script  # no expansion but {home}
    assert "-x KERAS_HOME -x EMPTY -x TMPDIR " in script  # mpirun passes them on to the other node's workers
    bash_syntax_ok(script)
    exports = "\n".join(line for line in script.splitlines() if line.startswith("export KERAS_HOME"))
    shown = subprocess.run(["bash", "-c", f"{exports}; printf %s \"$KERAS_HOME\""], env={"HOME": str(tmp_path)},
                           capture_output=True, text=True, check=True).stdout
    assert shown == f"{tmp_path}/.cache/it's keras"
    local = render_local(parse(), "/home/alice/jobs/local-1", cfg)
    assert "export KERAS_HOME=\"$HOME\"'/.cache/it'\"'\"'s keras'\n" in local
    bash_syntax_ok(local)


def test_srun_launcher():
    cfg = dataclasses.replace(CFG, jobs_launcher="srun", jobs_srun_mpi="pmi2")
    script = render_sbatch(parse(nodes=2, gpus_per_node=2, cpus_per_task=2), JOB_DIR, cfg)
    assert "mpirun" not in script
    assert ('srun --mpi=pmi2 --ntasks=4 --ntasks-per-node=2 \\\n    --cpus-per-task=2 "${train[@]}"'
            in script)
    bash_syntax_ok(script)


def test_launcher_and_binding_are_checked_in_config():
    with pytest.raises(ConfigError, match="jobs_launcher is 'ssh'; allowed: 'mpirun', 'srun'"):
        dataclasses.replace(CFG, jobs_launcher="ssh")
    with pytest.raises(ConfigError, match="jobs_mpi_bind_to"):
        dataclasses.replace(CFG, jobs_mpi_bind_to="numa-ish")
    with pytest.raises(ConfigError, match="jobs_nccl_ib_disable"):
        dataclasses.replace(CFG, jobs_nccl_ib_disable="yes")


def test_values_that_reach_the_shell_are_quoted(tmp_path):
    odd = tmp_path / "it's $(touch pwned) `x`; rm -rf ~"
    odd.mkdir()
    spec = dataclasses.replace(parse(), data_dir=str(odd))
    script = render_sbatch(spec, JOB_DIR, CFG)
    assert f"--data-dir {shlex.quote(str(odd))}\n" in script
    # The script's own train=( ... ) array holds the path as one word, untouched.
    prefix = script[:script.index('if [ "${SLURM_RESTART_COUNT')]
    check = prefix.replace("cd \"$job_dir\" || exit 1\n", "").replace('mkdir -p "$job_dir/tensorboard"', "true")
    out = subprocess.run(["bash", "-c", check + 'printf "%s\\n" "${train[4]}"'], capture_output=True, text=True,
                         env={"SLURM_JOB_ID": "7", "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert out.stdout == f"{odd}\n", out.stderr
    assert not (tmp_path / "pwned").exists()


def test_a_job_dir_with_the_slurm_id_pattern():
    assert shell_path("/home/alice/jobs/%j") == '/home/alice/jobs/"$SLURM_JOB_ID"'
    assert shell_path("/home/my jobs/%j/x") == "'/home/my jobs/'\"$SLURM_JOB_ID\"/x"
    assert shell_path("/home/alice/jobs/42") == "/home/alice/jobs/42"


def test_sbatch_lines_never_carry_values_that_need_quoting():
    assert sbatch_value("/home/alice/jobs/%j/output.log") == "/home/alice/jobs/%j/output.log"
    for bad in ("/home/my jobs/%j", "x\n#SBATCH --uid=0", ""):
        with pytest.raises(ValueError, match="#SBATCH"):
            sbatch_value(bad)
    with pytest.raises(ValueError, match="#SBATCH"):
        render_sbatch(parse(), "/home/my jobs/%j", CFG)


def test_local_script_runs_horovodrun_on_localhost_with_the_time_limit():
    spec = dataclasses.replace(parse(gpus_per_node=0, time_limit="01:02:03"), gpus_per_node=2)
    script = render_local(spec, "/home/alice/jobs/local-20260101T000000-abcdef", CFG)
    assert "job_dir=/home/alice/jobs/local-20260101T000000-abcdef\n" in script
    assert "timeout --foreground --kill-after=60 3723 \\\n" in script
    # --disable-cache: one host, and nothing written to ~/.horovod, outside the job's directory.
    assert "/opt/dsportal/venv/bin/horovodrun --disable-cache -np 2 -H localhost:2 \"${train[@]}\"" in script
    assert 'echo "$$" > "$job_dir/pid"' in script and '> "$job_dir/exit_status"' in script
    bash_syntax_ok(script)


def test_render_cli_refuses_bad_flags_in_one_line(tmp_path):
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "portal.jobs", "render", *args], capture_output=True,
                              text=True, timeout=60)

    result = cli("--scheduler", "local", "--nodes", "2", "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "python -m portal.jobs: error: nodes: 2 is out of range; allowed: 1 (usable nodes on this machine)"]
    result = cli("--backend", "local", "--epochs", "two")  # its old name: still taken, with a warning
    assert result.returncode == 2 and "epochs: 'two' is not a whole number" in result.stderr
    assert f"--backend is deprecated and goes after {BACKEND_GOES}: use --scheduler" in result.stderr
    result = cli("--scheduler", "local", "--gpu", "1")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    result = cli("--scheduler", "slurmish")
    assert result.returncode == 2 and "scheduler: 'slurmish' is not a scheduler; allowed: slurm, local, kubernetes" \
        in result.stderr
    result = cli("--scheduler", "local", "--image-size", "64", "--fp16", "--data-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "--image-size 64" in result.stdout and "--fp16" in result.stdout
    assert "horovodrun --disable-cache -np 1 -H localhost:1" in result.stdout


def test_the_spec_defaults_match_the_design():
    assert JobSpec().template == "chexnet" and JobSpec().model == "densenet121"


@pytest.mark.parametrize("program", registry().names)
def test_mail_at_the_end_is_slurms_own_and_only_when_asked(program):
    """Each program's job script: Slurm's MailProg sends the mail (the box proves the mail itself, for one)."""
    asked = render_sbatch(dataclasses.replace(parse(template=program), mail=True), JOB_DIR, CFG)
    assert "\n#SBATCH --mail-type=END,FAIL\n" in asked and "--mail-user" not in asked  # MailProg finds the address
    assert "mail-type" not in render_sbatch(parse(template=program), JOB_DIR, CFG)
    bash_syntax_ok(asked)


def test_the_portals_slurm_commands_come_first_on_the_jobs_path():
    """Open MPI starts its daemons on the other nodes with srun: on a box of a built release (24.11, 26.05) the
    srun on the default PATH would be Debian's 22.05, which that controller refuses."""
    cfg = dataclasses.replace(CFG, slurm_bin_dir="/opt/dsportal/slurm/24.11/bin")
    script = render_sbatch(parse(nodes=2), JOB_DIR, cfg)
    assert f'export PATH={cfg.venv}/bin:/opt/dsportal/slurm/24.11/bin:"$PATH"' in script
