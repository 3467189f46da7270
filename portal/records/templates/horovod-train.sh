{#- A Horovod script's training command, `train` (mpirun or horovodrun starts it on every rank): the program's
    environment, the job's, and the program's arguments (its fragment: the bash array `train_args`). -#}
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
{% for name, word in job_env %}export {{ name }}={{ word }}
{% endfor %}
{%- include program.include() %}
train=({{ python | q }} -m {{ program.module }} "${train_args[@]}")
