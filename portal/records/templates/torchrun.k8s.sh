# {{ program.title }} on Kubernetes: this is node 0 of {{ spec.nodes }} (the pod of the job's record Job, hostname
# {{ host0 }}), {{ spec.workers_per_node }} process(es) per node under torchrun, one per GPU (one per node on CPUs).
# Rendered by portal.scheduler.kubernetes.manifests from a validated JobSpec; every value below was checked, then shell-quoted.
# Every node's torchrun meets the others in a FileStore in the job's directory, on the user's home that each pod
# mounts, in a directory only its owner can enter (torchrun-rendezvous.sh): nothing of the rendezvous listens on a
# pod's address, which any pod of the cluster could reach. Node 0 is rank 0: torchrun ranks the nodes by the address
# each gives it, and node 0 gives its IP address (--local-addr: digits, or IPv6's hex, sort before the worker pods'
# names, which begin with the job id, "k8s-"). The other {{ spec.nodes - 1 }} node(s) are the pods of the workers Job
# (torchrun.k8s-worker.sh): each beats a heartbeat file in $job_dir/nodes/ every {{ heartbeat_s }} s and joins a run
# that names it. Gang semantics: a run ends when any node's process fails (torchrun --max-restarts=0 on every node);
# when a node stopped beating (lost with its machine) this pod stops the run and starts another, from the last
# checkpoint, once a pod replaces it, at most {{ restarts }} time(s). At the end it writes $job_dir/workers-done,
# which ends the workers.
set -uo pipefail
job_dir={{ job_dir | q }}
mkdir -p "$job_dir/tensorboard" "$job_dir/checkpoints" "$job_dir/nodes" || exit 1
cd "$job_dir" || exit 1

export PATH={{ venv_bin | q }}:"$PATH"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS={{ spec.cpus_per_task }}
{% if spec.nodes == 1 %}# One pod: its ranks' gloo transport listens on the pod's own loopback, which no other pod reaches.
export GLOO_SOCKET_IFNAME=lo
{% endif %}{% for name, word in job_env %}export {{ name }}={{ word }}
{% endfor %}
# --resume: a run again (a lost node, a new pod for node 0) continues from the last checkpoint.
{% include program.include() %}
{% include "card-in-log.sh" %}
{% include "k8s-finish.sh" %}
{% include "run-status.sh" %}
{% include "torchrun-stop.sh" %}
{% include "run-stopped.sh" %}
{% include "ended-once.sh" %}
{% include "torchrun-rendezvous.sh" %}
nodes="$job_dir/nodes"
# Node 0's own heartbeat: the workers end a run whose rendezvous host stopped beating.
( while :; do touch "$nodes/node-0.alive"; sleep {{ heartbeat_s }}; done ) &

age() {  # seconds since FILE's last beat, by the volume's clock (as the beats are)
    touch "$nodes/.now-0"
    echo $(( $(stat -c %Y "$nodes/.now-0") - $(stat -c %Y "$1" 2>/dev/null || echo 0) ))
}
beating() {  # the worker pods whose heartbeat is fresh, one name per line
    local file
    for file in "$nodes"/*.alive; do
        [ -f "$file" ] && [ ! -L "$file" ] || continue
        case ${file##*/} in node-0.alive) continue ;; esac
        [ "$(age "$file")" -le {{ stale_s }} ] && printf '%s\n' "${file##*/}" | sed 's/\.alive$//' | tr -cd 'a-z0-9.\n-'
    done | sort -u
}
{% include "wait-for-pods.sh" %}
wait_for_workers() {  # then $nodes/run has {{ spec.nodes - 1 }} of them
    wait_for_pods beating "$nodes/run" {{ spec.nodes - 1 }} {{ program.name | q }}
    echo "{{ program.name }}: {{ spec.nodes - 1 }} worker pod(s) ready after $waited s: $(tr '\n' ' ' < "$nodes/run")"
}
lost_workers() {  # how many of this run's workers stopped beating; their heartbeat files are removed
    local pod count=0
    while read -r pod; do
        if [ "$(age "$nodes/$pod.alive")" -gt {{ stale_s }} ]; then
            count=$((count + 1))
            rm -f "$nodes/$pod.alive"
        fi
    done < "$nodes/run"
    echo "$count"
}
# Runs are numbered on from what an earlier pod of node 0 published (it was lost with its node).
generation=$(head -c 100 "$job_dir/rendezvous" 2>/dev/null | cut -d' ' -f1 | tr -cd '0-9')
generation=${generation:-0}
rm -f "$job_dir/workers-done"
echo "{{ program.name }}: job {{ job_id }}, {{ spec.workers }} process(es) on {{ spec.nodes }} pod(s), launched by torchrun on each"
restarts=0
while :; do
    wait_for_workers
    generation=$((generation + 1))
    # The run: its number and the worker pods it is for (no other pod joins it); its rendezvous is named after both.
    private_rendezvous "$job_dir/.rendezvous" "{{ job_id }}-$generation" || finish 1
    echo "$generation $(tr '\n' ' ' < "$nodes/run")" > "$job_dir/.rendezvous-0" \
        && mv "$job_dir/.rendezvous-0" "$job_dir/rendezvous"
    echo "{{ program.name }}: run $generation, torchrun rendezvous {{ job_id }}-$generation in the job's directory"
    logs=()
    while read -r pod; do
        logs+=("$nodes/$generation-$pod.log")
        : >> "$nodes/$generation-$pod.log"
    done < "$nodes/run"
    # This node's processes, and the other nodes' output as they write it into the job's directory (their pods'
    # logs are theirs; the job's log is this pod's, as mpirun's is on the Horovod path).
    rm -f "$nodes/status-$generation"
    ( {{ (program_bin ~ "/torchrun") | q }} --nnodes={{ spec.nodes }} --nproc-per-node={{ spec.workers_per_node }} "${rendezvous[@]}" \
          --local-addr="${POD_IP:?}" --max-restarts=0 -m {{ program.module | q }} "${train_args[@]}" 2>&1 &
      run=$!
      gather=
      if [ -n "${logs[*]:-}" ]; then  # (one node: none to follow)
          tail -q -n +1 -F "${logs[@]}" 2>/dev/null &
          gather=$!
      fi
      wait "$run"
      status=$?
      sleep 2  # the other nodes' last lines
      [ -z "$gather" ] || kill "$gather" 2>/dev/null
      echo "$status" > "$nodes/status-$generation" ) | tee -a "$job_dir/output.log" &
    run=$!
    lost=0 looked=$SECONDS
    while kill -0 "$run" 2>/dev/null; do
        sleep 1  # the run's end is seen within a second; the heartbeats are read every {{ watch_every }} s
        kill -0 "$run" 2>/dev/null || break
        [ $((SECONDS - looked)) -ge {{ watch_every }} ] || continue
        looked=$SECONDS
        lost=$(lost_workers)
        if [ "$lost" -gt 0 ]; then
            echo "{{ program.name }}: $lost worker pod(s) stopped beating; stopping this run" | tee -a "$job_dir/output.log"
            stop_torchrun
            break
        fi
    done
    [ "$lost" -eq 0 ] || end_stopped_run
    wait "$run"
    status=$(run_status "$nodes/status-$generation")  # this node's torchrun's
    [ "$lost" -gt 0 ] || [ "$status" -eq 0 ] || { sleep {{ stale_s }}; lost=$(lost_workers); }
    [ "$lost" -eq 0 ] && [ "$status" -eq 0 ] && finish 0
    if [ "$lost" -gt 0 ] && [ "$restarts" -lt {{ restarts }} ]; then
        restarts=$((restarts + 1))
        echo "{{ program.name }}: $lost worker pod(s) lost; run $((generation + 1)) resumes from the last checkpoint once {{ spec.nodes - 1 }} beat" | tee -a "$job_dir/output.log"
        continue
    fi
    if [ "$lost" -gt 0 ]; then
        echo "{{ program.name }}: $lost worker pod(s) lost after {{ restarts }} restart(s); giving up (the checkpoints are in $job_dir/checkpoints)" | tee -a "$job_dir/output.log"
        [ "$status" -ne 0 ] || status=1
    fi
    finish "$status"
done
