# CheXNet training with Horovod, an MPIJob's launcher: {{ spec.nodes }} worker pod(s) x {{ spec.workers_per_node }} worker(s), one per GPU.
# Rendered by portal.scheduler.kubernetes.horovodjob from a validated JobSpec; every value below was checked, then shell-quoted.
# The MPI operator writes the hostfile and starts the workers' sshd.
set -uo pipefail
job_dir={{ job_dir | q }}
mkdir -p "$job_dir/tensorboard" "$job_dir/checkpoints" || exit 1
cd "$job_dir" || exit 1

export PATH={{ venv_bin | q }}:"$PATH"
# --resume: a restarted launcher continues from the last checkpoint (a fresh job starts at epoch 1).
{% include "horovod-train.sh" -%}
{% include "card-in-log.sh" %}
echo "{{ program.name }}: MPIJob {{ job_id }}, {{ spec.workers }} worker(s) on {{ spec.nodes }} pod(s), launched by mpirun"
status=0
# -np is every worker on every pod; the operator's hostfile gives each pod slotsPerWorker slots.
mpirun -np {{ spec.workers }} --map-by {{ map_by | q }} --bind-to {{ bind_to | q }} \
    {% for arg in mpirun_args %}{{ arg | q }} {% endfor %}\
    {% for name in exported %}-x {{ name }} {% endfor %}\
    "${train[@]}" 2>&1 | tee "$job_dir/output.log"
status=${PIPESTATUS[0]}
[ "$status" -ne 0 ] || card_in_log "$job_dir/checkpoints"
echo "$status" > "$job_dir/exit_status"
exit "$status"
