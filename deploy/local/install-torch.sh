#!/usr/bin/env bash
# The PyTorch program's own environment (chexnet_torch): a venv of Debian's python3 beside the portal's, from
# deploy/local/torch-requirements.txt, then torchvision without its dependencies, then this checkout's dsportal (not
# editable, as install-package.sh installs it). Nothing of TensorFlow's pins (numpy 1.26, protobuf 4) holds it back.
# Python: Debian 12's 3.11, as the nodes and the images have it (the only CPU torch wheel reachable here is cp311).
# Skipped while its stamp holds the requirements' hash. DSPORTAL_TORCH_VENV overrides where it goes.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # say, make_venv

REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${DSPORTAL_VENV:-/opt/dsportal/venv}
TORCH_VENV=${DSPORTAL_TORCH_VENV:-$(dirname "$VENV")/torch-venv}
STAMPS=$(dirname "$VENV")/stamps
REQUIREMENTS=$REPO/deploy/local/torch-requirements.txt
TORCHVISION=torchvision==0.28.0
want=$(cat "$REQUIREMENTS" "$0" | sha256sum | cut -c1-16)
stamp=$STAMPS/torch-venv
mkdir -p "$STAMPS"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -x "$TORCH_VENV/bin/torchrun" ]; then
    exit 0
fi
started=$SECONDS
make_venv "$TORCH_VENV" "the PyTorch program's environment"
say "python: installing PyTorch (CPU) and its program's requirements into $TORCH_VENV"
"$TORCH_VENV/bin/pip" install -q -r "$REQUIREMENTS"
"$TORCH_VENV/bin/pip" install -q --no-deps "$TORCHVISION"
chmod -R a+rX "$TORCH_VENV"
echo "$want" > "$stamp"
say "python: $TORCH_VENV ready in $((SECONDS - started)) s ($(du -sh "$TORCH_VENV" | cut -f1))"
