{#- chexnet's arguments in every job script (portal.records.programs: ARGS_TEMPLATE): the bash array train_args,
    each value shell-quoted; --progress epoch: one line per epoch in the log (mpirun gives ranks a
    pseudo-terminal); the site's jobs_trainer_args last. -#}
train_args=(--data-dir {{ spec.data_dir | q }}
    --logdir "$job_dir/tensorboard"
    --checkpoint-dir "$job_dir/checkpoints"
    --epochs {{ spec.epochs }} --batch-size {{ spec.batch_size }} --image-size {{ spec.image_size }}
    --model {{ spec.model | q }} --pipeline parallel --resume --progress epoch{% if spec.fp16 %} --fp16{% endif %}{% if spec.xla %} --xla{% endif %}{% for arg in trainer_args %} {{ arg | q }}{% endfor %})
