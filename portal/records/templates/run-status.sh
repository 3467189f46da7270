{#- Kubernetes scripts: a run started in the background as `{ cmd; echo $? > FILE; } | tee -a LOG &` gives its exit
    status in FILE. `wait` cannot be trusted with it: once bash has reaped the pipeline (during any later command, a
    sleep in the watch loop), `wait PID` answers the status of the pipeline's last process, tee's 0, and a failed
    training read as a success. $1: the file; 1 when the run wrote none (it was killed before it could). -#}
run_status() {
    local found
    found=$(head -c 8 "$1" 2>/dev/null | tr -cd '0-9')
    echo "${found:-1}"
}
