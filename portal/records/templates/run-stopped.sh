{#- Kubernetes launchers (Horovod's launcher, torchrun's node 0): a run stopped for a lost node ends when its
    `... | tee` ($run, tee's PID) does. When it has not {{ stop_grace }} s later, something still holds the pipe (a
    torchrun job's node 0 waited on it until the job's time limit in a CI run): each process that holds it but tee
    (a rank orphaned by its killed launcher, a log follower) is said in the log, then killed. -#}
end_stopped_run() {  # a run stopped for a lost node ends in {{ stop_grace }} s; what still holds its output is then killed
    local waited=0 pipe fd holder left
    while kill -0 "$run" 2>/dev/null && [ "$waited" -lt {{ stop_grace }} ]; do
        sleep 1
        waited=$((waited + 1))
    done
    kill -0 "$run" 2>/dev/null || return 0
    left=$(ps -e -o pid=,ppid=,stat=,comm= | tr -s ' ' | tr '\n' ';')
    echo "{{ program.name }}: the stopped run did not end in $waited s; killing what holds its output: $left" \
        | tee -a "$job_dir/output.log"
    pipe=$(readlink "/proc/$run/fd/0")
    for fd in /proc/[0-9]*/fd/[0-9]*; do
        [ -n "$pipe" ] && [ "$(readlink "$fd" 2>/dev/null)" = "$pipe" ] || continue
        holder=${fd#/proc/}
        holder=${holder%%/*}
        [ "$holder" = "$run" ] || kill -KILL "$holder" 2>/dev/null
    done
}
