{#- A pod's script stops a process it started by its name: asked first (TERM), killed after {{ stop_grace }} s. By name:
    in the pod's own PID namespace the name is this pod's alone (on a host it would be every user's). -#}
stop_by_name() {
    local waited=0
    pkill -TERM -x "$1"
    while pgrep -x "$1" > /dev/null && [ "$waited" -lt {{ stop_grace }} ]; do
        sleep 1
        waited=$((waited + 1))
    done
    pkill -KILL -x "$1"
}
