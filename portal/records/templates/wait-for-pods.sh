{#- Kubernetes launchers: `wait_for_pods LIST FILE WANTED WHO` waits until the command LIST prints WANTED ready worker
    pods (one per line), keeps the first WANTED of them in FILE and sets $waited to the seconds it took; WHO says how
    many are ready at once and then every 30 s. Looked at often: a worker shows itself (its address published, its
    heartbeat) about as soon as the launcher runs, and each look is a file test (Horovod's was 3 s: 2.6 s of a 2-node
    job's first point, bench.kube). -#}
wait_for_pods() {
    local list=$1 file=$2 wanted=$3 who=$4 started=$SECONDS said=0 ready
    while :; do
        "$list" | head -n "$wanted" > "$file"
        ready=$(wc -l < "$file")
        if [ "$ready" -ge "$wanted" ]; then
            waited=$((SECONDS - started))
            return
        fi
        if [ $((SECONDS - started)) -ge "$said" ]; then  # at once, then every 30 s
            echo "$who: waiting for worker pods: $ready of $wanted ready"
            said=$((said + 30))
        fi
        sleep {{ worker_poll }}
    done
}
