#!/usr/bin/env bash
# The MLflow tracking server's own environment (deploy/local/mlflow-requirements.txt): a venv of Debian's python3
# beside the portal's, which each box's `mlflow server` runs (deploy/local/parts/mlflow.py). Nothing of it reaches
# the portal's venv or the training programs'. Skipped while its stamp holds the requirements' hash (about 3.5 min
# and 850 MB on a new machine, most of it downloads). DSPORTAL_MLFLOW_VENV overrides where it goes.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # say, make_venv

REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${DSPORTAL_VENV:-/opt/dsportal/venv}
MLFLOW_VENV=${DSPORTAL_MLFLOW_VENV:-$(dirname "$VENV")/mlflow-venv}
STAMPS=$(dirname "$VENV")/stamps
REQUIREMENTS=$REPO/deploy/local/mlflow-requirements.txt
want=$(cat "$REQUIREMENTS" "$0" | sha256sum | cut -c1-16)
stamp=$STAMPS/mlflow-venv
mkdir -p "$STAMPS"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -x "$MLFLOW_VENV/bin/mlflow" ]; then
    exit 0
fi
started=$SECONDS
make_venv "$MLFLOW_VENV" "the MLflow tracking server's environment"
say "python: installing the MLflow tracking server into $MLFLOW_VENV"
"$MLFLOW_VENV/bin/pip" install -q -r "$REQUIREMENTS"
chmod -R go-w "$MLFLOW_VENV"
echo "$want" > "$stamp"
say "python: $MLFLOW_VENV ready in $((SECONDS - started)) s ($(du -sh "$MLFLOW_VENV" | cut -f1))"
