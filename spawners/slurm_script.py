"""The server's Slurm job script: batchspawner 1.3.0's, with the job's output out of the home's top level, and
`--get-user-env` as every supported Slurm takes it.

batchspawner writes each server job's output (`jupyterhub_slurmspawner_<job id>.log`, one per start) in the
home's top level, where it clutters JupyterLab's file browser; here it goes to `req_server_log_dir`
(~/.cache/dsportal/servers/<cluster_name>: Slurm's job ids are the cluster's own, and clusters that share the
homes would otherwise write into each other's files). Slurm does not create an --output directory, so the submit
command makes it.
"""

from __future__ import annotations

SERVER_LOG_DIR = ".cache/dsportal/servers"  # under the user's home: a directory per cluster (server_log_dir)
SERVER_OUTPUT_FILE = "jupyterhub_slurmspawner_%j.log"  # batchspawner's name; %j: Slurm's job id


def server_log_dir(home: str, cluster: str) -> str:
    """Where a cluster's server jobs write their output by default: ~/.cache/dsportal/servers/<cluster>."""
    return f"{home.rstrip('/')}/{SERVER_LOG_DIR}/{cluster}"


# batchspawner 1.3.0's SlurmSpawner.batch_script but for two lines (tests/unit/spawners/test_slurm_script.py holds
# it beside upstream's): the --output line (its default writes the output in the home's top level; the working
# directory stays the home), and --get-user-env without upstream's "=L": Slurm 25.05 deprecated its timeout and mode
# and 26.05 refuses them ("option '--get-user-env' doesn't allow an argument"). Plain, it is the login environment on
# every release: 26.05 has no other, and 22.05 and 24.11 take the build's default, `su -` (the login shell's) unless
# Slurm was configured with --enable-load-env-no-login.
SERVER_JOB_SCRIPT = "#!/bin/bash\n#SBATCH --output={{server_log_dir}}/" + SERVER_OUTPUT_FILE + """
#SBATCH --job-name=spawner-jupyterhub
#SBATCH --chdir={{homedir}}
#SBATCH --export={{keepvars}}
#SBATCH --get-user-env
{% if partition  %}#SBATCH --partition={{partition}}
{% endif %}{% if runtime    %}#SBATCH --time={{runtime}}
{% endif %}{% if memory     %}#SBATCH --mem={{memory}}
{% endif %}{% if gres       %}#SBATCH --gres={{gres}}
{% endif %}{% if nprocs     %}#SBATCH --cpus-per-task={{nprocs}}
{% endif %}{% if reservation%}#SBATCH --reservation={{reservation}}
{% endif %}{% if options    %}#SBATCH {{options}}{% endif %}

set -euo pipefail

trap 'echo SIGTERM received' TERM
{{prologue}}
{% if srun %}{{srun}} {% endif %}{{cmd}}
echo "jupyterhub-singleuser ended gracefully"
{{epilogue}}
"""
# Slurm does not create the --output directory (the job fails to open its output), so the submit command makes
# it, as the user, in the same command as sbatch (no extra runuser). The umask is set in a subshell: sbatch hands
# its own umask to the job, whose files must keep the usual modes.
SUBMIT_CREATING_LOG_DIR = ("""/bin/sh -c '(umask 077 && mkdir -p -- "$1") && exec sbatch --parsable' """
                           "sh {server_log_dir_q}")
