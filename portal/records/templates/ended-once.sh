{#- Kubernetes launchers (Horovod's launcher, torchrun's node 0): a job's run ends once; finish() writes its exit
    status, then workers-done, which ends the workers. Its Job makes a new pod for a launcher pod that exited with a
    failure, as it does for one lost with its node; that pod, finding the job ended, ends it the same way at once
    instead of waiting for workers that were told to end (until the job's time limit). The job's log is its latest
    launcher pod's, so that pod repeats the end of the run's output, where the failure is said. After run-status.sh. -#}
if [ -f "$job_dir/exit_status" ] && [ -e "$job_dir/workers-done" ]; then
    ended=$(run_status "$job_dir/exit_status")
    echo "job {{ job_id }} has ended (exit status $ended); this pod, made again by its Job, ends it the same way."
    echo "The end of its output ($job_dir/output.log):"
    [ ! -f "$job_dir/output.log" ] || timeout 5 tail -c 6000 "$job_dir/output.log"
    exit "$ended"
fi
