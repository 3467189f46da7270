#!/bin/bash
# CheXNet training with Horovod on this machine: {{ spec.workers }} worker(s) under horovodrun.
# Rendered by portal.jobs from a validated JobSpec; every value below was checked, then shell-quoted.
# Started detached in a session of its own (setsid), so cancelling signals its whole process group.
{% include "local-start.sh" -%}
# --resume: a job started again in the same directory continues from its last checkpoint.
{% include "horovod-train.sh" -%}
echo "{{ program.name }}: local job on $(hostname), {{ spec.workers }} worker(s), time limit {{ spec.time_limit }}"
status=0
# The wall-time limit, as Slurm would enforce it: TERM, then KILL a minute later. --foreground keeps timeout in
# this process group, so a cancel reaches it too; it exits 124 when the limit struck. --disable-cache: one host
# has nothing to cache, and horovodrun would otherwise keep its checks in ~/.horovod, outside the job's directory.
timeout --foreground --kill-after=60 {{ seconds }} \
    {{ (program_bin ~ "/horovodrun") | q }} --disable-cache -np {{ spec.workers }} -H localhost:{{ spec.workers }} "${train[@]}" \
    || status=$?
echo "$status" > "$job_dir/exit_status"
exit "$status"
