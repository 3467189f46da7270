{% extends "k8s-trial.sh" %}{% set stop_process = "python" %}{% block header %}# One trial of a {{ program.title }} sweep on Kubernetes, the toy launcher: one pod of the sweep's Job, one process.
{% endblock %}{% block environment %}export PYTHONUNBUFFERED=1 RANK=0
{% endblock %}{% block run %}{ "${train[@]}" 2>&1; echo $? > "$run_dir/run-status"; } | tee -a "$log" &
{% endblock %}
