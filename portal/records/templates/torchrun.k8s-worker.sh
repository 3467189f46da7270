# A worker pod of job {{ job_id }} on Kubernetes (see torchrun.k8s.sh): node 1 to {{ spec.nodes - 1 }} of {{ spec.nodes }}, {{ spec.workers_per_node }} process(es)
# under torchrun. It beats its heartbeat file in $job_dir/nodes/ every {{ heartbeat_s }} s, joins each run whose
# line in $job_dir/rendezvous names it (meeting the other nodes in the job's private FileStore:
# torchrun-rendezvous.sh), writes its output where node 0 gathers it, and is done when node 0 writes workers-done.
# A run whose node 0 stopped beating (node 0 lost with its machine) is stopped here: a new pod of node 0
# starts the next one.
set -uo pipefail
job_dir={{ job_dir | q }}
pod=${POD_NAME:?}
nodes="$job_dir/nodes"
mkdir -p "$nodes" || exit 1
cd "$job_dir" || exit 1

export PATH={{ venv_bin | q }}:"$PATH"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS={{ spec.cpus_per_task }}
{% for name, word in job_env %}export {{ name }}={{ word }}
{% endfor %}
{% include program.include() %}
{% include "torchrun-stop.sh" %}
{% include "torchrun-rendezvous.sh" %}
( while :; do touch "$nodes/$pod.alive"; sleep {{ heartbeat_s }}; done ) &
echo "worker $pod (${POD_IP:-}): beating in $nodes, waiting for a run that names it"
host_age() {  # seconds since node 0's last beat, by the volume's clock
    touch "$nodes/.now-$pod"
    echo $(( $(stat -c %Y "$nodes/.now-$pod") - $(stat -c %Y "$nodes/node-0.alive" 2>/dev/null || echo 0) ))
}
joined=0  # the last run this pod joined
while :; do
    if [ -e "$job_dir/workers-done" ]; then
        echo "worker $pod: the job has ended"
        rm -f "$nodes/$pod.alive"
        exit 0
    fi
    read -r generation invited < <(head -c 4000 "$job_dir/rendezvous" 2>/dev/null; echo)
    generation=$(printf '%s' "${generation:-}" | tr -cd '0-9')
    if [ -z "$generation" ] || [ "$generation" -le "$joined" ] || [[ " ${invited:-} " != *" $pod "* ]]; then
        sleep {{ worker_poll }}
        continue
    fi
    joined=$generation
    if ! private_rendezvous "$job_dir/.rendezvous" "{{ job_id }}-$generation"; then
        echo "worker $pod: run $generation not joined"
        continue
    fi
    echo "worker $pod: joining run $generation"
    {{ (program_bin ~ "/torchrun") | q }} --nnodes={{ spec.nodes }} --nproc-per-node={{ spec.workers_per_node }} "${rendezvous[@]}" \
        --max-restarts=0 -m {{ program.module | q }} "${train_args[@]}" >> "$nodes/$generation-$pod.log" 2>&1 &
    run=$!
    looked=$SECONDS
    while kill -0 "$run" 2>/dev/null; do
        sleep 1
        [ $((SECONDS - looked)) -ge {{ watch_every }} ] || continue
        looked=$SECONDS
        current=$(head -c 100 "$job_dir/rendezvous" 2>/dev/null | cut -d' ' -f1 | tr -cd '0-9')
        if [ "$(host_age)" -gt {{ stale_s }} ] || [ "${current:-0}" != "$generation" ]; then
            echo "worker $pod: run $generation's rendezvous host stopped beating, or a new run began; stopping"
            stop_torchrun
            break
        fi
    done
    wait "$run"
    echo "worker $pod: run $generation ended (exit $?)"
done
