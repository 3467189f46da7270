{#- A Horovod launcher's look at its worker pods on Kubernetes (horovod.k8s.sh), over ssh with the job's key:
    $job_dir and $ssh_probe are set before. A worker is lost only when it fails to answer twice in a row,
    {{ probe_again_s }} s apart: one slow answer (a loaded node, another user's work on it) stopped a healthy run,
    and when the launcher had removed its file, the job waited for it until its time limit. The worker publishes
    its file again whenever it is gone (horovod-k8s-serve.sh), so a worker taken for lost costs a resume, never
    the job. -#}
probe() {  # probe ADDRESS HOSTNAME: true when the pod at ADDRESS takes the job's key and is HOSTNAME
    [ -n "$2" ] && [ "$(timeout 10 $ssh_probe "$1" hostname < /dev/null 2>/dev/null)" = "$2" ]  # not the caller's stdin
}
answering() {  # "address hostname file" of each worker in $job_dir/workers/ that answers, one per line
    local file address name
    for file in "$job_dir"/workers/*; do
        [ -f "$file" ] || continue
        read -r address name < <(head -c 200 "$file")
        address=$(printf '%s' "$address" | tr -cd '0-9.')
        name=$(printf '%s' "$name" | tr -cd 'a-z0-9.-')
        if probe "$address" "$name"; then
            echo "$address $name ${file##*/}"
        fi
    done | sort -u -k1,1
}
lost_workers() {  # how many of this run's workers no longer answer as themselves, twice; their files are removed
    local address name file count=0
    while read -r address name file; do
        probe "$address" "$name" && continue
        sleep {{ probe_again_s }}
        probe "$address" "$name" && continue
        count=$((count + 1))
        rm -f "$job_dir/workers/$file"
    done < "$job_dir/hosts.ready"
    echo "$count"
}
