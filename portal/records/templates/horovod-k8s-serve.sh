{#- A Horovod worker pod on Kubernetes (horovod.k8s-worker.sh), once its sshd listens: $job_dir, $POD_IP and
    $POD_NAME are set. `publish` writes the pod's address and hostname into $job_dir/workers/ (whole, then renamed:
    the launcher never reads half of it); `serve SSHD_PID` publishes again whenever the file is gone (the launcher
    removes a worker it took for lost: horovod-k8s-watch.sh) until the launcher writes workers-done (then 0) or
    sshd dies (then 1). -#}
publish() {
    echo "$POD_IP $(hostname)" > "$job_dir/workers/.$POD_NAME" && mv -f "$job_dir/workers/.$POD_NAME" "$job_dir/workers/$POD_NAME"
}
serve() {
    while kill -0 "$1" 2>/dev/null; do
        if [ -e "$job_dir/workers-done" ]; then
            rm -f "$job_dir/workers/$POD_NAME"
            kill "$1"
            return 0
        fi
        if [ ! -e "$job_dir/workers/$POD_NAME" ]; then
            publish && echo "worker $POD_NAME ($POD_IP): published again (the launcher had taken it for lost)"
        fi
        sleep {{ serve_poll_s }}
    done
    echo "sshd exited" >&2
    return 1
}
