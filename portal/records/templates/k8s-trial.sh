{#- One trial of a sweep on Kubernetes, for every launcher: <launcher>.k8s-trial.sh extends it with its
    header, its environment and how it starts the pod's {{ spec.workers_per_node }} worker(s) (block run, in the
    background, `{ ...; echo $? > "$run_dir/run-status"; } | tee -a "$log" &`); stop_process is what a deleted pod
    stops. -#}
{% block header %}{% endblock %}set -uo pipefail
job_dir={{ job_dir | q }}
holder=${POD_NAME:?}
mkdir -p "$job_dir/tensorboard" "$job_dir/trials" || exit 1
cd "$job_dir" || exit 1

export PATH={{ venv_bin | q }}:"$PATH"
{% block environment %}{% endblock %}{% for name, word in job_env %}export {{ name }}={{ word }}
{% endfor %}
# The plan the portal validated, for every trial (the first pod writes it; the same text in each).
if [ ! -e {{ plan_file | q }} ]; then
    printf '%s\n' {{ plan_json | q }} > ".plan.$holder" && mv -n ".plan.$holder" {{ plan_file | q }}
    rm -f ".plan.$holder"
fi
# --resume: a task taken over from a lost pod continues from its trial's last checkpoint.
{% include program.include() %}
train=({{ python | q }} -m {{ program.module }} "${train_args[@]}")
{% include "card-in-log.sh" %}
{% include "run-status.sh" %}
task=$({{ python | q }} -m programkit.sweep_cli claim "$job_dir" "$holder" {{ plan.trials }})
status=$?
if [ "$status" -eq {{ finished_exit }} ]; then
    echo "{{ program.name }}: every trial of the sweep has finished: nothing left for pod $holder"
    exit 0
fi
if [ "$status" -ne 0 ] || ! [[ "$task" =~ ^[0-9]+$ ]]; then
    echo "{{ program.name }}: pod $holder could not claim a task of the sweep (exit $status)" >&2
    exit 1
fi
run_dir="$job_dir/trials/$task"
export DSPORTAL_TASK=$task  # the task's MLflow run is "<job>:<task>" (programkit.tracking)
mkdir -p "$run_dir" || exit 1
rm -f "$run_dir/exit_status"
log="$job_dir/trial-$task.log"
# The claim stays this pod's while it lives: a claim untouched for {{ stale_s }} s is a lost pod's, and taken over.
claim_file="$job_dir/claims/$task"
( while sleep {{ heartbeat_s }}; do
      [ "$(head -c 200 "$claim_file" 2>/dev/null)" = "$holder" ] || exit 0
      touch "$claim_file"
  done ) &
report() {  # the trial's row, where the dashboard reads it (4 KB at most, a pod's termination message)
    {{ python | q }} -m programkit.sweep_cli status "$job_dir" "$task" 2>/dev/null | head -c 4000 > /dev/termination-log
}
stopped() {  # the pod is deleted (the sweep cancelled): its trial ends as FAIL, not left running
    echo "{{ program.name }}: pod $holder stopped: task $task's trial ends as FAIL" | tee -a "$log"
    pkill -TERM -x {{ stop_process }}
    {{ python | q }} -m programkit.sweep_cli fail "$job_dir" "$task"
    echo 143 > "$run_dir/exit_status"
    report
    exit 143
}
trap stopped TERM  # bash is the container's PID 1: without a trap it would ignore the TERM of a deleted pod

number=$({{ python | q }} -m programkit.sweep_cli attach "$job_dir" "$task")
status=$?
if [ "$status" -eq {{ finished_exit }} ]; then
    echo "{{ program.name }}: task $task's trial has already finished: nothing to do" | tee -a "$log"
    report
    exit 0
fi
if [ "$status" -ne 0 ] || ! [[ "$number" =~ ^[0-9]+$ ]]; then
    echo "{{ program.name }}: the sweep's study did not give task $task a trial (exit $status)" | tee -a "$log" >&2
    echo "$status" > "$run_dir/exit_status"
    exit 1
fi
echo "{{ program.name }}: sweep task $task is trial $number, on pod $holder" | tee -a "$log"
echo "{{ program.name }}: trial parameters $(head -c 2000 "$run_dir/trial.json")" | tee -a "$log"
# The trial's own run: its TensorBoard run beside the other trials', its checkpoints, its parameters (the last
# --logdir and --checkpoint-dir given are the ones taken).
train+=(--logdir "$job_dir/tensorboard/trial-$number" --checkpoint-dir "$run_dir/checkpoints"
    --trial "$run_dir/trial.json")

rm -f "$run_dir/run-status"
{% block run %}{% endblock %}
wait $!
status=$(run_status "$run_dir/run-status")
if [ "$status" -ne 0 ]; then
    echo "{{ program.name }}: trial $number's training failed (exit $status): it ends as FAIL" | tee -a "$log"
    {{ python | q }} -m programkit.sweep_cli fail "$job_dir" "$task"
fi
echo "$status" > "$run_dir/exit_status"
card_in_log "$run_dir/checkpoints"
report
# The task is done whatever its trial's end (complete, pruned, failed: the study says which): one completion of
# the sweep's Job. A pod that fails is one that could not run its task, and the Job makes another.
exit 0
