{% extends "k8s-trial.sh" %}{% set stop_process = "torchrun" %}{% block header %}# One trial of a {{ program.title }} sweep on Kubernetes: one pod of the sweep's Job ({{ plan.trials }} completions, at
# most {{ plan.parallel }} at once), {{ spec.workers_per_node }} process(es) in this pod under torchrun, one per GPU, meeting in a FileStore in the
# trial's directory (torchrun-rendezvous.sh), never on a port of the pod's.
# Rendered by portal.scheduler.kubernetes.manifests from a validated JobSpec and sweep plan; every value below was checked,
# then shell-quoted. The pod claims a task (programkit.sweep claim: the lowest one no live pod holds), keeps its claim
# alive, asks the study for the task's trial (a task taken over from a lost pod gets the same trial, and resumes
# it from its checkpoint), trains it, and leaves the trial's row as its termination message for the dashboard.
{% endblock %}{% block environment %}export PYTHONUNBUFFERED=1 OMP_NUM_THREADS={{ spec.cpus_per_task }}
# The pod's ranks' gloo transport listens on the pod's own loopback, which no other pod reaches.
export GLOO_SOCKET_IFNAME=lo
{% include "torchrun-rendezvous.sh" %}
{% endblock %}{% block run %}# train is (python -m module arguments...): torchrun takes the same from its -m on. A pod's run has a rendezvous
# of its own (a task taken over by another pod meets apart from the lost one's).
if private_rendezvous "$run_dir/.rendezvous" "$holder" 2>> "$log"; then
    { {{ (program_bin ~ "/torchrun") | q }} --nnodes=1 --nproc-per-node={{ spec.workers_per_node }} "${rendezvous[@]}" --max-restarts=0 \
          "${train[@]:1}" 2>&1; echo $? > "$run_dir/run-status"; } | tee -a "$log" &
else
    echo 1 > "$run_dir/run-status" &
fi
{% endblock %}
