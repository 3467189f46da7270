#!/bin/bash
# Slurm's Epilog for the cluster in a box: run by slurmd, as root, on each of a job's nodes once the job has ended
# (completed, failed, cancelled, out of time). Written by deploy/local on every `up`; edit the template.
#
# proctrack/cgroup ends what is in each step's own freezer cgroup, and nothing below it. Slurm gives the job's user
# its step directories, so a job can make cgroups under them, move processes there, and those outlive the job. This
# ends the job's whole subtree: freeze it (nothing forks meanwhile), KILL every process in it, thaw (a frozen
# process does not die), then remove the cgroups deepest first. A process still there after that fails the
# epilog, and Slurm drains the node: an operator must look, and no other job lands beside it.
set -u
for number in "${SLURM_JOB_ID:-}" "${SLURM_JOB_UID:-}"; do
    case "$number" in ''|*[!0-9]*) exit 0 ;; esac
done
job=/sys/fs/cgroup/freezer/slurm_${SLURMD_NODENAME:?}/uid_${SLURM_JOB_UID}/job_${SLURM_JOB_ID}
[ -d "$job" ] || exit 0

for _ in 1 2 3 4 5 6 7 8 9 10; do
    echo FROZEN > "$job/freezer.state" 2>/dev/null
    pids=$(find "$job" -name cgroup.procs -exec cat {} + 2>/dev/null)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    echo THAWED > "$job/freezer.state" 2>/dev/null
    [ -z "$pids" ] && break
    sleep 0.5
done
find "$job" -depth -type d -exec rmdir {} + 2>/dev/null
left=$(find "$job" -name cgroup.procs -exec cat {} + 2>/dev/null)
if [ -n "$left" ]; then
    echo "dsportal epilog: job $SLURM_JOB_ID left processes on $SLURMD_NODENAME: $left" >&2
    exit 1
fi
exit 0
