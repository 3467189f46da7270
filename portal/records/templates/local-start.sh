{#- The local runner's scripts (<launcher>.local.sh) start so: in the job's directory, every line of output into its
    log, the script's PID where a cancel finds it (its process group), the run's folders made. -#}
set -uo pipefail
job_dir={{ job_dir | q }}
cd "$job_dir" || exit 1
exec >>"$job_dir/{{ output }}" 2>&1
echo "$$" > "$job_dir/pid"
mkdir -p "$job_dir/tensorboard" "$job_dir/checkpoints"

export PATH={{ venv_bin | q }}:"$PATH"
