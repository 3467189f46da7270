{#- Kubernetes launchers (Horovod's launcher, torchrun's node 0): finish STATUS ends the job's run, once. It writes
    the exit status, the model card's lines after a run that completed, then workers-done, which ends the workers.
    A failed run says so in the container's termination message (portal.scheduler.kubernetes.records.RUN_ENDED),
    from which the portal reads the job FAILED at once: its Job makes a new pod for a failed one, as for one lost
    with its node (which says nothing), and gives up only after its backoff (about 30 s; ended-once.sh ends those
    pods). After card-in-log.sh. -#}
finish() {
    echo "$1" > "$job_dir/exit_status"
    [ "$1" -ne 0 ] || card_in_log "$job_dir/checkpoints"
    touch "$job_dir/workers-done"
    [ "$1" -eq 0 ] || echo "dsportal: the run ended (exit status $1)" 2>/dev/null > /dev/termination-log
    exit "$1"
}
