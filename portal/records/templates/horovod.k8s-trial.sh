{% extends "k8s-trial.sh" %}{% set stop_process = "mpirun" %}{% block header %}# One trial of a CheXNet sweep on Kubernetes: one pod of the sweep's Job ({{ plan.trials }} completions, at most
# {{ plan.parallel }} at once), {{ spec.workers_per_node }} worker(s) in this pod under mpirun, one per GPU.
# Rendered by portal.scheduler.kubernetes.manifests from a validated JobSpec and sweep plan; every value below was checked,
# then shell-quoted. The pod claims a task (programkit.sweep claim: the lowest one no live pod holds), keeps its claim
# alive, asks the study for the task's trial (a task taken over from a lost pod gets the same trial, and resumes
# it from its checkpoint), trains it, and leaves the trial's row as its termination message for the dashboard.
{% endblock %}{% block environment %}export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2 LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
{% endblock %}{% block run %}{ mpirun -np {{ spec.workers_per_node }} --host localhost:{{ spec.workers_per_node }} \
      --map-by {{ map_by | q }} --bind-to {{ bind_to | q }} \
      {% for arg in mpirun_args %}{{ arg | q }} {% endfor %}\
      {% for name in exported %}-x {{ name }} {% endfor %}-x DSPORTAL_TASK \
      "${train[@]}" 2>&1; echo $? > "$run_dir/run-status"; } | tee -a "$log" &
{% endblock %}
