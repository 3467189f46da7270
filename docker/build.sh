#!/usr/bin/env bash
# Build the portal's images with podman (what `make images` runs):
#   localhost/dsportal-training:latest   JupyterLab + TensorFlow + Horovod + dsportal (docker/training/Dockerfile)
#   localhost/dsportal-hub:latest        JupyterHub + the portal's hub side + KubeSpawner (docker/hub/Dockerfile)
# First it runs docker/podman-setup.sh (packages, containers.conf, the local Debian base image). Layers are
# cached by podman on this machine: a second run with nothing changed takes seconds, and a change to the
# project's code rebuilds only the last layer of each image.
#
# Defaults are the CPU build that the tests use. Environment (or flags) to change them:
#   BASE_IMAGE              base of both images          (default localhost/debian:bookworm)
#   HUB_BASE_IMAGE          base of the hub image        (default BASE_IMAGE; needs Node.js >= 18 from apt)
#   TF_PACKAGE              TensorFlow requirement       (default tensorflow-cpu==2.15.1)
#   HOROVOD_GPU_OPERATIONS  NCCL for GPU builds          (default empty: CPU only)
#   CA_BUNDLE               CA bundle pip/npm trust      (default pip's `cert`, else the system bundle)
#   --gpu                   = BASE_IMAGE=nvidia/cuda:12.2.2-cudnn8-devel-ubuntu22.04 (training image only; the
#                             hub keeps its base) TF_PACKAGE=tensorflow==2.15.1 HOROVOD_GPU_OPERATIONS=NCCL
#                             TORCH_REQUIREMENTS=deploy/local/torch-requirements-gpu.txt
#   TORCH_REQUIREMENTS      the PyTorch program's venv   (default deploy/local/torch-requirements.txt: CPU torch)
#   HOROVOD_WHEELS          the machine's Horovod wheel cache, shared with deploy/local/install.sh's venv and mounted
#                           into the training build (default /var/cache/dsportal/wheels; empty: compile in the image)
#   WHEELS                  a directory of wheels mounted into the training build as pip's find-links (default the
#                           machine's pip find-links, where the CPU torch wheel is: PyPI's x86_64 torch is CUDA's)
#   --only training|hub     build one image;  --no-cache  rebuild every layer
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
export CONTAINERS_CONF=${DSPORTAL_CONTAINERS_CONF:-/etc/dsportal/containers.conf}
LOCAL_BASE=localhost/debian:bookworm
BASE_IMAGE=${BASE_IMAGE:-$LOCAL_BASE}
HUB_BASE_IMAGE=${HUB_BASE_IMAGE:-$BASE_IMAGE}
TF_PACKAGE=${TF_PACKAGE:-tensorflow-cpu==2.15.1}
HOROVOD_GPU_OPERATIONS=${HOROVOD_GPU_OPERATIONS:-}
TORCH_REQUIREMENTS=${TORCH_REQUIREMENTS:-deploy/local/torch-requirements.txt}
TRAINING_TAG=${TRAINING_TAG:-localhost/dsportal-training:latest}
HUB_TAG=${HUB_TAG:-localhost/dsportal-hub:latest}
ONLY=
EXTRA=()

usage() { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
    case $1 in
        --gpu) BASE_IMAGE=nvidia/cuda:12.2.2-cudnn8-devel-ubuntu22.04 TF_PACKAGE=tensorflow==2.15.1
               HOROVOD_GPU_OPERATIONS=NCCL TORCH_REQUIREMENTS=deploy/local/torch-requirements-gpu.txt ;;
        --only) ONLY=${2:?--only needs training or hub}; shift
                case $ONLY in training|hub) ;; *) echo "build.sh: --only must be training or hub" >&2; exit 2;; esac ;;
        --no-cache) EXTRA+=(--no-cache) ;;
        -h|--help) usage; exit 0 ;;
        *) echo "build.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

say() { printf '==> %s\n' "$*"; }

started=$SECONDS
"$REPO/docker/podman-setup.sh"
say "podman ready in $((SECONDS - started)) s"

# One build at a time on this machine (two would race for the tags and the layer cache).
mkdir -p /run/lock && exec 9> /run/lock/dsportal-images.lock
flock -w 3600 9 || { echo "build.sh: another image build held /run/lock/dsportal-images.lock for an hour" >&2; exit 1; }

# A build that was killed (a timeout, ^C, a machine stopped mid-build) leaves buildah's working containers behind:
# each pins an image and keeps its step's files (GBs for the pip steps), and nothing else removes them. With the
# lock held, no build of ours is running, so those of our bases and of untagged (intermediate) images are stale.
stale=()
while IFS='|' read -r id image; do
    case $image in ''|"$BASE_IMAGE"|"$HUB_BASE_IMAGE"|"$LOCAL_BASE") stale+=("$id") ;; esac
done < <(buildah containers --format '{{.ContainerID}}|{{.ImageName}}')
if ((${#stale[@]})); then
    buildah rm "${stale[@]}" > /dev/null
    say "removed ${#stale[@]} working containers left by interrupted builds"
fi

# pip behind this machine's HTTPS proxy needs the CA that re-signs; a site without one passes the system bundle.
if [ -z "${CA_BUNDLE:-}" ]; then
    CA_BUNDLE=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
    CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
fi
[ -r "$CA_BUNDLE" ] || { echo "build.sh: CA bundle $CA_BUNDLE is not readable; set CA_BUNDLE" >&2; exit 1; }

build() {  # build NAME TAG BASE [--build-arg ...]
    local name=$1 tag=$2 base=$3; shift 3
    local t0=$SECONDS
    if [ "$base" = "$LOCAL_BASE" ]; then :; elif ! podman image exists "$base"; then
        say "$name: pulling $base"; podman pull -q "$base" > /dev/null
    fi
    say "$name: building $tag from $base"
    # --network=host: RUN steps use the host's resolver and routes (apt's mirror, PyPI through the proxy).
    podman build --layers --force-rm --network=host --ignorefile "$REPO/docker/.dockerignore" \
        --secret "id=ca-bundle,src=$CA_BUNDLE" --build-arg "BASE_IMAGE=$base" "$@" "${EXTRA[@]}" \
        -f "$REPO/docker/$name/Dockerfile" -t "$tag" "$REPO"
    say "$name: $tag built in $((SECONDS - t0)) s ($(podman image inspect --format '{{.Size}}' "$tag" \
        | awk '{printf "%.2f GB", $1 / 1e9}'))"
}

# The two images build side by side: they share nothing but the base, and much of each build waits on downloads.
# Each line of a build's output starts with the image's name.
declare -A builds
started_build() {  # started_build NAME TAG BASE [--build-arg ...]
    local name=$1
    build "$@" > >(sed -u "s/^/$name| /") 2>&1 &
    builds[$name]=$!
}

if [ "$ONLY" != hub ]; then
    WHEELS=${WHEELS:-$(python3 -m pip config get global.find-links 2>/dev/null || true)}
    wheels=()
    if [ -n "$WHEELS" ] && [ -d "$WHEELS" ]; then
        wheels=(--volume "$WHEELS:/opt/dsportal-wheels:ro" --build-arg "PIP_FIND_LINKS=/opt/dsportal-wheels")
    fi
    # Horovod's wheel: built once for this machine's venv and this image, by whichever gets there first
    # (docker/horovod-wheel.sh names its directory after what it is built against: a GPU build gets its own).
    HOROVOD_WHEELS=${HOROVOD_WHEELS-/var/cache/dsportal/wheels}
    if [ -n "$HOROVOD_WHEELS" ]; then
        mkdir -p "$HOROVOD_WHEELS"
        wheels+=(--volume "$HOROVOD_WHEELS:/opt/dsportal-horovod-wheels" \
                 --build-arg "HOROVOD_WHEELS=/opt/dsportal-horovod-wheels")
    fi
    started_build training "$TRAINING_TAG" "$BASE_IMAGE" --build-arg "TF_PACKAGE=$TF_PACKAGE" \
        --build-arg "HOROVOD_GPU_OPERATIONS=$HOROVOD_GPU_OPERATIONS" \
        --build-arg "TORCH_REQUIREMENTS=$TORCH_REQUIREMENTS" "${wheels[@]}"
fi
if [ "$ONLY" != training ]; then
    # The hub needs no CUDA: with --gpu it keeps the base it had (HUB_BASE_IMAGE).
    started_build hub "$HUB_TAG" "$HUB_BASE_IMAGE"
fi
failed=
for name in "${!builds[@]}"; do wait "${builds[$name]}" || failed="$failed $name"; done
[ -z "$failed" ] || { echo "build.sh: the build of$failed failed (its lines above start with its name)" >&2; exit 1; }
# Each rebuild leaves the previous image untagged (GBs each); the layers the new images use are kept. Removing an
# image can leave its parent (an older build's step) dangling in turn, hence the loop.
pruned=0
while removed=$(podman image prune -f | grep -c .); ((removed)); do pruned=$((pruned + removed)); done
say "images built in $((SECONDS - started)) s ($pruned untagged images removed; $(df -h --output=avail \
    /var/lib/containers | tail -1 | tr -d ' ') left on the disk)"
