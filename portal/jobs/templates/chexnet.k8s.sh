# CheXNet training with Horovod on Kubernetes without an operator: this is the launcher (the pod of the job's
# launcher Job) of {{ spec.nodes }} worker pod(s) x {{ spec.workers_per_node }} worker(s), one per GPU.
# Rendered by portal.jobs.k8s_manifests from a validated JobSpec; every value below was checked, then shell-quoted.
# Each worker pod (of the job's workers Job) runs sshd on port {{ ssh_port }} and writes its address into
# $job_dir/workers/ once sshd listens. The launcher starts mpirun only when {{ spec.nodes }} of them answer (the MPI
# Operator's launcher does not wait: mpi-operator#481). When a worker is lost (its node died), the workers Job
# makes another, and the launcher runs again from the last checkpoint, at most {{ restarts }} time(s). At the end
# it writes $job_dir/workers-done, which ends the workers.
set -uo pipefail
job_dir={{ job_dir | q }}
mkdir -p "$job_dir/tensorboard" "$job_dir/checkpoints" "$job_dir/workers" || exit 1
cd "$job_dir" || exit 1

export PATH={{ venv_bin | q }}:"$PATH"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2 LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
{% for name, value in nccl_env %}export {{ name }}={{ value | q }}
{% endfor %}
# --resume: a run again (a lost worker, a new launcher pod) continues from the last checkpoint.
{% include "chexnet.train.sh" %}
# The job's key, from its Secret, where ssh accepts it (its own, not group-readable).
key=$(mktemp -d)/id
install -m 0600 {{ key_file | q }} "$key" || exit 1
ssh_agent="ssh -p {{ ssh_port }} -i $key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes"

finish() {
    echo "$1" > "$job_dir/exit_status"
    touch "$job_dir/workers-done"
    exit "$1"
}
answering() {  # the addresses in $job_dir/workers/ whose sshd answers, one per line
    local file address
    for file in "$job_dir"/workers/*; do
        [ -f "$file" ] || continue
        address=$(head -c 64 "$file" | tr -cd '0-9.')
        if timeout 2 bash -c "exec 3<>/dev/tcp/$address/{{ ssh_port }}" 2>/dev/null; then
            echo "$address"
        fi
    done | sort -u
}
wait_for_workers() {  # then $job_dir/hostfile names {{ spec.nodes }} of them
    local waited=0 ready
    while :; do
        answering | head -n {{ spec.nodes }} > "$job_dir/hosts.ready"
        ready=$(wc -l < "$job_dir/hosts.ready")
        if [ "$ready" -ge {{ spec.nodes }} ]; then
            sed 's/$/ slots={{ spec.workers_per_node }}/' "$job_dir/hosts.ready" > "$job_dir/hostfile"
            echo "chexnet: {{ spec.nodes }} worker pod(s) ready after ${waited} s: $(tr '\n' ' ' < "$job_dir/hosts.ready")"
            return
        fi
        if [ $((waited % 30)) -eq 0 ]; then
            echo "chexnet: waiting for worker pods: $ready of {{ spec.nodes }} ready"
        fi
        sleep 3
        waited=$((waited + 3))
    done
}

lost_workers() {  # how many of the hostfile's workers no longer answer
    local address count=0
    for address in $(cut -d' ' -f1 "$job_dir/hostfile"); do
        timeout 3 bash -c "exec 3<>/dev/tcp/$address/{{ ssh_port }}" 2>/dev/null || count=$((count + 1))
    done
    echo "$count"
}

rm -f "$job_dir/workers-done"
echo "chexnet: job {{ job_id }}, {{ spec.workers }} worker(s) on {{ spec.nodes }} pod(s), launched by mpirun over ssh"
restarts=0
while :; do
    wait_for_workers
    # -np is every worker on every pod; the hostfile gives each pod {{ spec.workers_per_node }} slot(s).
    mpirun -np {{ spec.workers }} --hostfile "$job_dir/hostfile" --mca plm_rsh_agent "$ssh_agent" \
        --map-by {{ map_by | q }} --bind-to {{ bind_to | q }} \
        {% for arg in mpirun_args %}{{ arg | q }} {% endfor %}\
        {% for name in exported %}-x {{ name }} {% endfor %}\
        "${train[@]}" 2>&1 | tee -a "$job_dir/output.log" &
    run=$!
    # A worker whose node died sends no goodbye: mpirun would wait on its connections for many minutes. Its sshd
    # not answering any more is the sign; this run is then stopped, to run again once a worker replaces it.
    lost=0
    while kill -0 "$run" 2>/dev/null; do
        sleep {{ watch_every }}
        kill -0 "$run" 2>/dev/null || break
        lost=$(lost_workers)
        if [ "$lost" -gt 0 ]; then
            echo "chexnet: $lost worker pod(s) stopped answering; stopping this run" | tee -a "$job_dir/output.log"
            pkill -TERM -x mpirun
            break
        fi
    done
    wait "$run"
    status=$?  # mpirun's, when it failed (pipefail)
    [ "$lost" -eq 0 ] && [ "$status" -eq 0 ] && finish 0
    [ "$lost" -gt 0 ] || lost=$(lost_workers)
    if [ "$lost" -gt 0 ] && [ "$restarts" -lt {{ restarts }} ]; then
        restarts=$((restarts + 1))
        echo "chexnet: $lost worker pod(s) lost (mpirun exited $status); run $((restarts + 1)) resumes from the last checkpoint once {{ spec.nodes }} answer" | tee -a "$job_dir/output.log"
        continue
    fi
    finish "$status"
done
