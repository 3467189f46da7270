# {{ program.title }} on Kubernetes, the toy launcher (tests/toyprogram/kube.py): this pod is rank 0 of
# {{ spec.nodes }}, and trains; the workers Job's pods are the other ranks, which end at once.
set -uo pipefail
job_dir={{ job_dir | q }}
mkdir -p "$job_dir/tensorboard" "$job_dir/checkpoints" || exit 1
cd "$job_dir" || exit 1
export PATH={{ venv_bin | q }}:"$PATH"
export PYTHONUNBUFFERED=1 RANK=0
{% for name, word in job_env %}export {{ name }}={{ word }}
{% endfor %}
{% include program.include() %}
{% include "card-in-log.sh" %}
{% include "k8s-finish.sh" %}
echo "{{ program.name }}: job {{ job_id }}, {{ spec.nodes }} pod(s), started by toyrun"
{{ python | q }} -m {{ program.module | q }} "${train_args[@]}"
finish $?
