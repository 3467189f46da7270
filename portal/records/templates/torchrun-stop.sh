{#- torchrun's Kubernetes scripts: stop this pod's torchrun and the processes it started, asked first (TERM), then
    killed after {{ stop_grace }} s. Its processes are killed too: one stuck in a collective with a peer that vanished
    outlives a killed torchrun, and would keep the run's output pipe open (node 0's wait would never end) and its CPUs.
    By name: in the pod's own PID namespace `torchrun` is this pod's alone (run on a host, it would be every user's;
    the unit tests run it in a namespace of its own, tests/unit/helpers.py's in_a_pod). -#}
{% include "stop-by-name.sh" %}
stop_torchrun() {
    local launchers ranks
    launchers=$(pgrep -d, -x torchrun)
    [ -n "$launchers" ] || return 0
    ranks=$(pgrep -P "$launchers" | tr '\n' ' ')
    stop_by_name torchrun
    [ -z "$ranks" ] || kill -KILL $ranks 2>/dev/null
    return 0
}
