# Shell functions shared by the set-up scripts (deploy/local/install.sh, docker/podman-setup.sh,
# deploy/kubernetes/build-kubernetes.sh). Source it, relative to the script:
#     . "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# A script that words its lines differently defines its own `say` after sourcing this file.

say() { printf '==> %s\n' "$*"; }

# apt_missing PKG...: print, one per line, the packages dpkg does not have installed.
apt_missing() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || printf '%s\n' "$pkg"
    done
}

# apt_get ARGS...: apt-get, one at a time across the project's scripts. `make builds` runs two of them side by side,
# and apt-get stops at once ("Could not get lock /var/lib/apt/lists/lock"), not waits, when another apt-get holds
# its lists lock (DPkg::Lock::Timeout waits for dpkg's lock only): so the scripts take a lock of their own first.
APT_LOCK=${DSPORTAL_APT_LOCK:-/run/lock/dsportal-apt.lock}
apt_get() {
    flock --wait 1800 "$APT_LOCK" apt-get -o DPkg::Lock::Timeout=600 "$@"
}

# apt_install_missing PKG...: install those of the packages that are missing (none: nothing runs, not even
# apt-get update), without recommends and without questions, with one `say` line naming them.
apt_install_missing() {
    local missing
    mapfile -t missing < <(apt_missing "$@")
    ((${#missing[@]})) || return 0
    say "apt: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive  # as the scripts did before: also for what they run afterwards
    apt_get update -q
    apt_get install -y -q --no-install-recommends "${missing[@]}"
}

# make_venv DIR WHAT: a venv of Debian's /usr/bin/python3 at DIR (the Python the nodes and the images have), with a
# current pip, unless DIR has one; WHAT names it in the one `say` line. The portal's venv, the PyTorch program's and
# the MLflow server's (install.sh, install-torch.sh, install-mlflow.sh).
make_venv() {
    local venv=$1 what=$2
    [ -x "$venv/bin/python" ] && return 0
    say "python: creating $venv ($what) with Debian's /usr/bin/python3"
    mkdir -p "$(dirname "$venv")"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip wheel "setuptools<81"
}

# Whether users' jobs and servers can reach the venv $1: every directory above it that exists lets others through
# (o+x; a venv under root's mode-700 home cannot work). A directory still to be made is made 0755 by install.sh.
# Says why on stderr and returns 1 when one does not.
venv_reachable() {
    local venv=$1 dir=$1 perms
    while [ "$dir" != / ]; do
        if perms=$(stat -c %A "$dir" 2>/dev/null) && [ "${perms:9:1}" != x ] && [ "${perms:9:1}" != t ]; then
            echo "install: $dir is mode $perms: the users' jobs and servers could not reach the venv $venv." >&2
            echo "install: give it o+x, or choose a venv users can reach (DSPORTAL_VENV; default /opt/dsportal/venv)." >&2
            return 1
        fi
        dir=$(dirname "$dir")
    done
}
