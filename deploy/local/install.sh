#!/usr/bin/env bash
# Install what the cluster in a box needs, idempotently: Debian packages, the shared Python environment that
# the hub and the users' jobs run (Debian's python3, in a place job users can read), and
# configurable-http-proxy from npm. Each step is skipped when its stamp says it is done with the same inputs.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # say, apt_install_missing, make_venv

REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${DSPORTAL_VENV:-/opt/dsportal/venv}
NODE_PREFIX=${DSPORTAL_NODE_PREFIX:-/opt/dsportal/node}
STAMPS=$(dirname "$VENV")/stamps
APT_PACKAGES=(slapd ldap-utils slurmctld slurmd slurm-client slurmdbd mariadb-server munge openssl iproute2
              python3-venv python3-dev
              chromium chromium-driver procps psmisc curl
              cmake g++ libopenmpi-dev openmpi-bin  # these four build and run Horovod
              exim4-daemon-light bsd-mailx  # the box's MTA for job-end e-mail (local delivery only), and `mail`
              prometheus)  # the operators' Prometheus server of each box (deploy/prometheus_server.py)

# Users' jobs and servers run the venv: every directory above it must let them through (a venv under root's mode-700
# home cannot work). Said at the first step, not when the first job fails.
venv_reachable "$VENV" || exit 1
mkdir -p "$STAMPS"

apt_install_missing "${APT_PACKAGES[@]}"
# Debian's packages start nothing here (policy-rc.d); the box runs its own private daemons.

# Debian's exim4 is only the box's binary: each box runs it with a configuration of its own (deploy/local/parts/
# mail.py), so Debian's /etc/exim4 configuration is left as the package installs it.

make_venv "$VENV" "the portal's environment"
chmod 755 "$(dirname "$VENV")"

# The distribution, NOT editable (install-package.sh): what users' processes import lies in the venv, never in the
# checkout, which may be unreadable to them. Its dependencies too when setup.py changes; otherwise only the
# distribution, whenever its sources change.
# The PyTorch program's own environment (install-torch.sh), before the copy below goes into it too.
"$REPO/deploy/local/install-torch.sh"
# The MLflow tracking server's environment (install-mlflow.sh): only `mlflow server` runs it.
"$REPO/deploy/local/install-mlflow.sh"
inputs=$(cat "$REPO/setup.py" | sha256sum | cut -c1-16)
if [ "$(cat "$STAMPS/pip" 2>/dev/null)" != "$inputs" ]; then
    "$REPO/deploy/local/install-package.sh" --with-deps
    echo "$inputs" > "$STAMPS/pip"
fi
"$REPO/deploy/local/install-package.sh"
# The checkout's tools, kept out of setup.py so that the images, whose dependency layers are keyed on setup.py, are
# not rebuilt for them: the type checker of `make check` and `make test` (mypy), coverage.py for
# `make coverage` (tests/line_coverage.py), and pytest-timeout, the suites' guard against a hung test (pyproject.toml).
DEV_TOOLS="mypy==1.13.0 coverage==7.17.5 pytest-timeout==2.4.0"
if [ "$(cat "$STAMPS/dev-tools" 2>/dev/null)" != "$DEV_TOOLS" ]; then
    say "python: installing $DEV_TOOLS into $VENV"
    "$VENV/bin/pip" install -q $DEV_TOOLS
    echo "$DEV_TOOLS" > "$STAMPS/dev-tools"
fi
# Horovod builds from source against the TensorFlow just installed (5-10 min on 2 cores), once per machine: its wheel
# is shared with the training image's build, which may have made it already (docker/horovod-wheel.sh).
HOROVOD_VERSION=0.28.1
if [ "$("$VENV/bin/python" -c 'import horovod; print(horovod.__version__)' 2>/dev/null)" != "$HOROVOD_VERSION" ] \
   || ! "$VENV/bin/python" -c 'import horovod.tensorflow' 2>/dev/null; then
    say "python: installing Horovod $HOROVOD_VERSION with TensorFlow, Gloo and MPI"
    HOROVOD_VERSION=$HOROVOD_VERSION "$REPO/docker/horovod-wheel.sh" "$VENV/bin/pip" \
        "${HOROVOD_WHEELS-/var/cache/dsportal/wheels}"
fi

if [ ! -x "$NODE_PREFIX/node_modules/.bin/configurable-http-proxy" ]; then
    say "npm: installing configurable-http-proxy into $NODE_PREFIX"
    mkdir -p "$NODE_PREFIX"
    npm install --silent --prefix "$NODE_PREFIX" configurable-http-proxy@5.3.0
fi
# axe-core, for the browser tests' accessibility checks: they inject its axe.min.js from here (no CDN).
AXE_VERSION=4.14.1
if [ "$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$NODE_PREFIX/node_modules/axe-core/package.json" 2>/dev/null)" \
     != "$AXE_VERSION" ]; then
    say "npm: installing axe-core $AXE_VERSION into $NODE_PREFIX"
    npm install --silent --prefix "$NODE_PREFIX" "axe-core@$AXE_VERSION"
fi
say "installed"
