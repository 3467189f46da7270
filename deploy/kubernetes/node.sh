#!/bin/sh
# One node of the Kubernetes box, run by deploy/kubernetes/kubeparts/nodes.py inside the node's own network, mount
# (a slave of the host's) and UTS namespaces:
#
#   node.sh NODE NODE_DIR CONTAINERD_CONFIG CONTAINERD_SOCKET PROXY_CONFIG -- kubelet ARGS...
#
# It names the host, binds the node's private directories over the paths that the kubelet and containerd
# hard-code (two kubelets sharing /var/log/pods would delete each other's pod logs, and /var/lib/kubelet holds
# each one's pod volumes), starts containerd and kube-proxy (its iptables rules are the node's namespace's) in the
# background and then becomes the kubelet, so the PID the box records is the kubelet's and stopping it (with its
# descendants) stops the other two as well. The binds live in this
# mount namespace only: they go when its last process does, and the host never sees them.
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
