{#- chexnet_torch's arguments in every job script (portal.records.programs: ARGS_TEMPLATE): the bash array
    train_args, each value shell-quoted. The launcher (torchrun) starts one process per GPU (or one per node on
    CPUs); each reads its rank from torchrun's environment. -#}
train_args=(--data-dir {{ spec.data_dir | q }}
    --logdir "$job_dir/tensorboard"
    --checkpoint-dir "$job_dir/checkpoints"
    --epochs {{ spec.epochs }} --batch-size {{ spec.batch_size }} --image-size {{ spec.image_size }}
    --model {{ spec.model | q }} --amp {{ options.amp | q }} --channels-last {{ options.channels_last | q }}
    --resume --progress epoch)
