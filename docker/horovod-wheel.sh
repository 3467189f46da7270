#!/usr/bin/env bash
# Install Horovod into a venv from a wheel built once per machine (docker/build.sh's training image and
# deploy/local/install.sh's venv both run this):
#
#   docker/horovod-wheel.sh PIP [CACHE_DIR]
#
# Horovod has no binary wheels: it compiles against the TensorFlow already in the venv (--no-build-isolation), for
# about 5 minutes on 2 cores, and 10 when the other builds of a new machine run beside it. The venv and the CPU image
# are the same Debian 12 with the same Python 3.11, Open MPI and TensorFlow, so one wheel serves both: whichever
# reaches this step first builds it, under a lock, into a directory of CACHE_DIR named after everything the wheel is
# built against (Horovod, TensorFlow, Python, Open MPI, the OS, GPU operations), and the other waits for the lock and
# installs it (seconds). A build that differs in any of those gets a directory of its own. Without CACHE_DIR (a
# site's image build) it compiles into the venv alone.
#
# Environment: HOROVOD_VERSION (default 0.28.1); HOROVOD_GPU_OPERATIONS (NCCL for GPU builds, default empty).
set -euo pipefail
PIP=${1:?usage: horovod-wheel.sh PIP [CACHE_DIR]}
CACHE_DIR=${2:-}
VERSION=${HOROVOD_VERSION:-0.28.1}

# TensorFlow, MPI and Gloo; NCCL only when asked for (CUDA's home then comes from the base image).
export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1
if [ -n "${HOROVOD_GPU_OPERATIONS:-}" ]; then export HOROVOD_CUDA_HOME=${HOROVOD_CUDA_HOME:-/usr/local/cuda}
else unset HOROVOD_GPU_OPERATIONS; fi

if [ -z "$CACHE_DIR" ]; then
    echo "horovod-wheel: compiling Horovod $VERSION into this venv (no cache directory given)"
    exec "$PIP" install -q --no-cache-dir --no-build-isolation "horovod==$VERSION"
fi

# What the wheel is built against, read off the venv and the system it runs on.
python=$(dirname "$PIP")/python
tensorflow=$("$PIP" list --format=freeze 2>/dev/null | grep -iE '^tensorflow(-cpu)?==' | head -n 1 | tr 'A-Z=' 'a-z-' \
    | tr -s -)
[ -n "$tensorflow" ] || { echo "horovod-wheel: no TensorFlow in the venv of $PIP: install it first" >&2; exit 1; }
mpi=$(mpirun --version 2>/dev/null | sed -n '1s/.* //p')
os=$(. /etc/os-release && echo "$ID$VERSION_ID")
key="horovod-$VERSION-$tensorflow-cp$("$python" -c 'import sys; print("%d%d" % sys.version_info[:2])')"
if [ -n "${HOROVOD_GPU_OPERATIONS:-}" ]; then  # and the CUDA it compiles against
    cuda=$("$HOROVOD_CUDA_HOME/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
    gpu="$(echo "$HOROVOD_GPU_OPERATIONS" | tr 'A-Z' 'a-z')-cuda${cuda:-unknown}"
else
    gpu=cpu
fi
key="$key-openmpi${mpi:-none}-$os-$gpu"
WHEEL_DIR=$CACHE_DIR/$key

mkdir -p "$WHEEL_DIR"
exec 9>"$WHEEL_DIR/.lock"
if ! flock -n 9; then
    echo "horovod-wheel: another build is making the Horovod $VERSION wheel in $WHEEL_DIR; waiting for it"
    flock -w 3600 9 || { echo "horovod-wheel: $WHEEL_DIR/.lock still held after an hour" >&2; exit 1; }
fi
wheels=("$WHEEL_DIR"/horovod-"$VERSION"-*.whl)
if [ ! -e "${wheels[0]}" ]; then
    echo "horovod-wheel: building the Horovod $VERSION wheel into $WHEEL_DIR (about 5 minutes on 2 cores)"
    started=$SECONDS
    rm -rf "$WHEEL_DIR"/.build.*  # what a killed build left
    build=$(mktemp -d "$WHEEL_DIR/.build.XXXXXX")
    "$PIP" wheel -q --no-cache-dir --no-build-isolation --no-deps -w "$build" "horovod==$VERSION"
    mv "$build"/horovod-"$VERSION"-*.whl "$WHEEL_DIR"/  # only a whole wheel ever lies in WHEEL_DIR
    rm -rf "$build"
    echo "horovod-wheel: built in $((SECONDS - started)) s"
    wheels=("$WHEEL_DIR"/horovod-"$VERSION"-*.whl)
fi
flock -u 9
echo "horovod-wheel: installing ${wheels[0]}"
"$PIP" install -q --no-cache-dir "${wheels[0]}"
