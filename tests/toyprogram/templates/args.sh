{#- The toy program's arguments in every job script (portal.records.programs: ARGS_TEMPLATE). -#}
train_args=(--data-dir {{ spec.data_dir | q }}
    --logdir "$job_dir/tensorboard"
    --checkpoint-dir "$job_dir/checkpoints"
    --epochs {{ spec.epochs }} --batch-size {{ spec.batch_size }} --image-size {{ spec.image_size }}
    --model {{ spec.model | q }} --grid {{ options.grid }}
    --resume --progress epoch)
