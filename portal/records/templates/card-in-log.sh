{#- Kubernetes scripts: the run's model card as one line of the pod's log, where the dashboard reads it (it cannot
    open the user's volume). $1: the checkpoint directory. JSON holds no raw newline, so joining lines keeps it. -#}
card_in_log() {
    local card="$1/model_card.json"
    [ -f "$card" ] && [ ! -L "$card" ] && echo "{{ card_line }}$(head -c {{ card_bytes }} "$card" | tr -d '\n')"
    return 0
}
