# {{ program.title }} on Kubernetes, the toy launcher: one of the {{ spec.nodes - 1 }} other rank(s), which end at
# once (the toy trains on rank 0 alone).
set -uo pipefail
job_dir={{ job_dir | q }}
cd "$job_dir" || exit 1
export PATH={{ venv_bin | q }}:"$PATH"
export PYTHONUNBUFFERED=1 RANK=1
{% for name, word in job_env %}export {{ name }}={{ word }}
{% endfor %}
{% include program.include() %}
exec {{ python | q }} -m {{ program.module | q }} "${train_args[@]}"
