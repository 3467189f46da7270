# CheXNet training with Horovod on Kubernetes without an operator: this is the launcher (the pod of the job's
# launcher Job) of {{ spec.nodes }} worker pod(s) x {{ spec.workers_per_node }} worker(s), one per GPU.
# Rendered by portal.scheduler.kubernetes.manifests from a validated JobSpec; every value below was checked, then shell-quoted.
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
{% for name, word in job_env %}export {{ name }}={{ word }}
{% endfor %}
# --resume: a run again (a lost worker, a new launcher pod) continues from the last checkpoint.
{% include program.include() %}
train=({{ python | q }} -m {{ program.module }} "${train_args[@]}")
{% include "card-in-log.sh" %}
{% include "k8s-finish.sh" %}
{% include "run-status.sh" %}
{% include "run-stopped.sh" %}
{% include "ended-once.sh" %}
# The job's key, from its Secret, where ssh accepts it (its own, not group-readable).
key=$(mktemp -d)/id
install -m 0600 {{ key_file | q }} "$key" || exit 1
# ServerAlive: an ssh to a node that died ends in 15 s, so mpirun, which waits for its ssh children, ends too.
ssh_probe="ssh -p {{ ssh_port }} -i $key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes -o ConnectTimeout=5 -o ServerAliveInterval=5 -o ServerAliveCountMax=3"
# mpirun's ssh tries a refused connection again, once a second: a pod's NetworkPolicy is programmed after the pod
# starts, as on any cluster, and a worker that answered the probe refused mpirun's ssh while the launcher's address
# was being added to what it lets in. One refusal made the whole job fail.
ssh_agent="$ssh_probe -o ConnectionAttempts={{ ssh_attempts }}"

{% include "horovod-k8s-watch.sh" %}
{% include "wait-for-pods.sh" %}
wait_for_workers() {  # then $job_dir/hostfile names {{ spec.nodes }} of them (an ssh only to a worker that published)
    wait_for_pods answering "$job_dir/hosts.ready" {{ spec.nodes }} {{ program.name | q }}
    sed 's/ .*/ slots={{ spec.workers_per_node }}/' "$job_dir/hosts.ready" > "$job_dir/hostfile"
    echo "{{ program.name }}: {{ spec.nodes }} worker pod(s) ready after $waited s: $(cut -d' ' -f3 "$job_dir/hosts.ready" | tr '\n' ' ')"
}

{% include "stop-by-name.sh" %}
stop_run() {  # mpirun and its ssh children: asked first, then killed
    stop_by_name mpirun
    pkill -KILL -x ssh
}

rm -f "$job_dir/workers-done"
echo "{{ program.name }}: job {{ job_id }}, {{ spec.workers }} worker(s) on {{ spec.nodes }} pod(s), launched by mpirun over ssh"
restarts=0 launches=0
while :; do
    wait_for_workers
    # -np is every worker on every pod; the hostfile gives each pod {{ spec.workers_per_node }} slot(s).
    # Each process marks .launched as it starts: a run that failed with none started never reached the program
    # (an orted that could not connect back to mpirun while a new pod's NetworkPolicy was being programmed).
    rm -f "$job_dir/.run-status" "$job_dir/.launched"
    { mpirun -np {{ spec.workers }} --hostfile "$job_dir/hostfile" --mca plm_rsh_agent "$ssh_agent" \
          --map-by {{ map_by | q }} --bind-to {{ bind_to | q }} \
          {% for arg in mpirun_args %}{{ arg | q }} {% endfor %}\
          {% for name in exported %}-x {{ name }} {% endfor %}\
          bash -c 'touch "$0" && exec "$@"' "$job_dir/.launched" "${train[@]}" 2>&1; echo $? > "$job_dir/.run-status"; } | tee -a "$job_dir/output.log" &
    run=$!
    # A worker whose node died sends no goodbye: mpirun would wait on its connections for many minutes. Its sshd
    # not answering any more is the sign; this run is then stopped, to run again once a worker replaces it.
    lost=0
    while kill -0 "$run" 2>/dev/null; do
        sleep {{ watch_every }}
        kill -0 "$run" 2>/dev/null || break
        lost=$(lost_workers)
        if [ "$lost" -gt 0 ]; then
            echo "{{ program.name }}: $lost worker pod(s) stopped answering; stopping this run" | tee -a "$job_dir/output.log"
            stop_run
            break
        fi
    done
    [ "$lost" -eq 0 ] || end_stopped_run
    wait "$run"
    status=$(run_status "$job_dir/.run-status")  # mpirun's
    # The workers are asked even when mpirun exited 0: Open MPI 4.1 exits 0 after "ORTE has lost communication
    # with a remote daemon", with the training half done.
    [ "$lost" -gt 0 ] || lost=$(lost_workers)
    [ "$lost" -eq 0 ] && [ "$status" -eq 0 ] && finish 0
    if [ "$lost" -eq 0 ] && [ ! -e "$job_dir/.launched" ] && [ "$launches" -lt {{ launch_attempts }} ]; then
        launches=$((launches + 1))
        echo "{{ program.name }}: mpirun started no process (exit $status); launching again in 5 s ({{ launch_attempts }} at most)" | tee -a "$job_dir/output.log"
        sleep 5
        continue
    fi
    if [ "$lost" -gt 0 ] && [ "$restarts" -lt {{ restarts }} ]; then
        restarts=$((restarts + 1))
        echo "{{ program.name }}: $lost worker pod(s) lost; run $((restarts + 1)) resumes from the last checkpoint once {{ spec.nodes }} answer" | tee -a "$job_dir/output.log"
        continue
    fi
    if [ "$lost" -gt 0 ]; then  # a run that lost a worker did not finish, whatever mpirun returned
        echo "{{ program.name }}: $lost worker pod(s) lost after {{ restarts }} restart(s); giving up (the checkpoints are in $job_dir/checkpoints)" | tee -a "$job_dir/output.log"
        [ "$status" -ne 0 ] || status=1
    fi
    finish "$status"
done
