#!/bin/sh
# One node of the Kubernetes box, run by deploy/kubernetes/kubeparts/nodes.py inside the node's own network, mount
# (a slave of the host's) and UTS namespaces:
#
#   node.sh NODE NODE_DIR CONTAINERD_CONFIG CONTAINERD_SOCKET PROXY_CONFIG -- kubelet ARGS...
#
# It names the host, binds the node's private directories ($dir/private/...) over the paths that no setting
# moves (everything else of the node is configured into $dir), starts containerd and kube-proxy (its iptables rules
# are the node's namespace's) in the background and then becomes the kubelet, so the PID the box records is the
# kubelet's and stopping it (with its descendants) stops the other two as well. The binds live in this mount
# namespace only: they go when its last process does, and the host never sees what the node writes there; the
# machine keeps only the empty mount points (kubeparts/machine.py makes them when missing). The paths, and who
# hard-codes each (the same list as machine.HARD_CODED_PATHS, which a unit test holds to this one):
#   /var/lib/kubelet     the kubelet 1.20's device-plugin socket and checkpoint, whatever its --root-dir
#   /var/log/pods        the kubelet's pod logs: two kubelets sharing them would delete each other's
#   /var/log/containers  the kubelet's links to its containers' logs
#   /var/lib/cni         libcni's cache of CNI results, in containerd 1.6 (no setting); podman keeps its networks
#                        in the machine's own
#   /run/containerd      containerd 1.6's shim sockets
set -eu
node=$1 dir=$2 config=$3 socket=$4 proxy_config=$5
shift 5
[ "$1" = "--" ] && shift
hostname "$node"
for path in /var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni /run/containerd; do
    mkdir -p "$dir/private$path"
    mount --bind "$dir/private$path" "$path"
done
rm -f "$socket"
containerd --config "$config" >>"$dir/containerd.log" 2>&1 &
tries=0
until [ -S "$socket" ]; do
    tries=$((tries + 1))
    if [ "$tries" -gt 100 ] || ! kill -0 $! 2>/dev/null; then
        echo "node.sh: containerd did not make $socket within 30 s; read $dir/containerd.log" >&2
        tail -n 20 "$dir/containerd.log" >&2
        exit 1
    fi
    sleep 0.3
done
"$(dirname "$1")/kube-proxy" --config="$proxy_config" >>"$dir/kube-proxy.log" 2>&1 &
exec "$@"
