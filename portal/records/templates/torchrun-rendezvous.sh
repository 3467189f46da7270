{#- Every torchrun script's rendezvous: torch's FileStore in a directory only the job's owner can enter, on the home
    that every node of the job shares; never a TCP port, which any other user's process could reach (torch's
    TCPStore has no authentication, and torchrun's agents unpickle what its rendezvous holds: docs/security.md).
    `private_rendezvous DIR RUN` makes DIR (700) if it is missing, refuses one that is not this user's own
    directory, exports it to the ranks (chexnet_torch.rendezvous: each rank's process group meets in a FileStore
    there), and sets the array `rendezvous`: torchrun's flags for the run named RUN. -#}
private_rendezvous() {
    ( umask 077; mkdir -p "$1" ) 2>/dev/null
    if [ -L "$1" ] || [ ! -d "$1" ] || [ ! -O "$1" ]; then
        echo "{{ program.name }}: $1 is not a directory of this user's own: no rendezvous there" >&2
        return 1
    fi
    chmod 700 "$1" || return 1
    # No TCPStore of the agent's for the ranks: they meet in the directory too.
    export DSPORTAL_RENDEZVOUS_DIR=$1 TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
    rendezvous=(--rdzv-backend=c10d --rdzv-conf=store_type=file --rdzv-endpoint="$1/$2.store" --rdzv-id="$2")
}
