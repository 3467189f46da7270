#!/bin/bash
# {{ program.title }} on this machine: {{ spec.workers }} process(es) under torchrun, meeting in a FileStore in the job's
# directory (torchrun-rendezvous.sh): nothing of the rendezvous listens, not even on this machine's loopback.
# Rendered by portal.jobs from a validated JobSpec; every value below was checked, then shell-quoted.
# Started detached in a session of its own (setsid), so cancelling signals its whole process group.
{% include "local-start.sh" -%}
export PYTHONUNBUFFERED=1
export OMP_NUM_THREADS={{ spec.cpus_per_task }}
{% for name, word in job_env %}export {{ name }}={{ word }}
{% endfor %}
# --resume: a job started again in the same directory continues from its last checkpoint.
{% include program.include() %}
{% include "torchrun-rendezvous.sh" %}
private_rendezvous "$job_dir/.rendezvous" "local-$$" || { echo 1 > "$job_dir/exit_status"; exit 1; }
echo "{{ program.name }}: local job on $(hostname), {{ spec.workers }} process(es), time limit {{ spec.time_limit }}"
status=0
# The wall-time limit, as Slurm would enforce it: TERM, then KILL a minute later (see horovod.local.sh).
timeout --foreground --kill-after=60 {{ seconds }} \
    {{ (program_bin ~ "/torchrun") | q }} --nnodes=1 --nproc-per-node={{ spec.workers }} "${rendezvous[@]}" --max-restarts=0 \
    -m {{ program.module | q }} "${train_args[@]}" || status=$?
echo "$status" > "$job_dir/exit_status"
exit "$status"
