#!/usr/bin/env bash
# Install this checkout's dsportal distribution into the shared venv, NOT editable: what users' processes run (the
# training program, the servers' entry points, the template notebooks) then lies in the venv, readable by every
# user wherever the checkout is (root's mode-700 home included), and never reads the checkout itself.
# A no-op while the installed copy's fingerprint (deploy/source_hash.py) is the checkout's; otherwise the sources
# are staged in a temporary directory (no build/ left to go stale in the checkout) and installed over the old copy;
# `--with-deps` installs its dependencies first (install.sh, when setup.py changed).
# The fingerprint, the commit and the checkout go to <venv>/share/dsportal/source.json: the box's check
# (deploy/local/parts/reach.py) compares it with the checkout, the model card reads the commit there.
# deploy/local/install.sh runs it; the test suites run it too (tests/conftest.py), so that a changed source reaches
# the test box's jobs. One at a time (flock).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # say

REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${DSPORTAL_VENV:-/opt/dsportal/venv}
# The training programs' own environments hold the same copy (chexnet_torch imports chexnet's TF-free modules):
# install-torch.sh makes the PyTorch one; each gets this copy once it exists.
TORCH_VENV=${DSPORTAL_TORCH_VENV:-$(dirname "$VENV")/torch-venv}
RECORD=$VENV/share/dsportal/source.json

exec 9>"$(dirname "$VENV")/install-package.lock"
flock 9
fingerprint=$(/usr/bin/python3 "$REPO/deploy/source_hash.py" "$REPO")
installed_in() {  # the fingerprint of the copy a venv holds, "" when none
    /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["source_hash"])' \
        "$1/share/dsportal/source.json" 2>/dev/null || true
}
venvs=("$VENV")
[ -x "$TORCH_VENV/bin/python" ] && venvs+=("$TORCH_VENV")
stale=()
for venv in "${venvs[@]}"; do
    [ "$(installed_in "$venv")" = "$fingerprint" ] || stale+=("$venv")
done
if [ "${1:-}" != --with-deps ] && [ ${#stale[@]} -eq 0 ]; then
    exit 0
fi
say "python: installing this checkout's dsportal ($fingerprint) into ${stale[*]:-$VENV} (not editable: users' jobs run that copy)"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mapfile -t sources < <(/usr/bin/python3 "$REPO/deploy/source_hash.py" --sources)  # what the fingerprint covers
(cd "$REPO" && tar -c --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' "${sources[@]}") \
    | tar -x -C "$stage"
if [ "${1:-}" = --with-deps ]; then
    say "python: installing the dsportal distribution's dependencies into $VENV"
    "$VENV/bin/pip" install -q "$stage[test,train,k8s]"
fi
commit=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || true)
dirty=$([ -z "$commit" ] || git -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null)
[ "${1:-}" != --with-deps ] || [ ${#stale[@]} -gt 0 ] || stale=("$VENV")
for venv in "${stale[@]}"; do
    out=$("$venv/bin/pip" install -q --no-deps --no-build-isolation --force-reinstall "$stage" 2>&1) \
        || { echo "$out" >&2; exit 1; }
    record=$venv/share/dsportal/source.json
    mkdir -p "$(dirname "$record")"
    /usr/bin/python3 -c 'import json, sys; _, fingerprint, commit, dirty, checkout = sys.argv
print(json.dumps({"source_hash": fingerprint, "git_commit": commit or None, "git_dirty": bool(dirty) if commit else None,
                  "checkout": checkout}))' "$fingerprint" "$commit" "$dirty" "$REPO" > "$record.new"
    chmod 0644 "$record.new"
    mv "$record.new" "$record"
done
