#!/usr/bin/env bash
# The suite as a newcomer runs it: a fresh clone, `make up`, then `make test`, then `make down`, each step timed.
# Run as root from a checkout (`make fresh-test`, or `make fresh-test FRESH_ARGS=--no-cache`):
#
#   tests/fresh-run.sh [--no-cache] [--ref REF] [--dir DIR] [--skip-up] [--user-work]
#
#   --no-cache  first remove every cache the project builds on this machine, as on a machine that has never
#               run it: the venv and its stamps, the npm prefix (/opt/dsportal), the Kubernetes binaries and
#               the Go build cache (/opt/dsportal/kubernetes, /var/cache/dsportal), the images (podman's
#               localhost/dsportal-*, the Debian base and their layers). Debian's packages stay installed.
#   --ref REF   what to clone (default HEAD of this checkout: commit first; uncommitted changes are not run)
#   --dir DIR   where to clone (default a new directory under /var/tmp); kept afterwards, with its logs
#   --skip-up   `make test` alone (what CI runs), without `make up` before it
#   --user-work the newcomer's order (issue 38): `make up`, alice's server, a job and a sweep of each program
#               in it (python -m tests.newcomer slurm), `make up-k8s` and her server there, then
#               `make test` beside them (which checks that it left all of theirs as it was), then both boxes down
#
# Each step's output goes to DIR/fresh-run-logs/<step>.log; the summary (the times, the test counts and the
# slowest tests) is printed at the end and written to DIR/fresh-run-logs/summary.txt. Exits 1 when a step fails.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
NO_CACHE=0 REF=HEAD DIR= SKIP_UP=0 USER_WORK=0
usage() { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
    case $1 in
        --no-cache) NO_CACHE=1 ;;
        --ref) REF=${2:?--ref needs a commit or branch}; shift ;;
        --dir) DIR=${2:?--dir needs a path}; shift ;;
        --skip-up) SKIP_UP=1 ;;
        --user-work) USER_WORK=1 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "fresh-run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "fresh-run.sh: run as root (make up and make test need it)" >&2; exit 1; }
commit=$(git -C "$REPO" rev-parse --verify "$REF^{commit}" 2>/dev/null) \
    || { echo "fresh-run.sh: --ref $REF is not a commit of $REPO" >&2; exit 2; }
DIR=${DIR:-$(mktemp -d /var/tmp/dsportal-fresh.XXXXXX)}
LOGS=$DIR/fresh-run-logs
SUMMARY=()
failed=

say() { printf '==> fresh-run: %s\n' "$*"; }
clock() { date -u +%H:%M:%S; }

# step NAME COMMAND...: run it in the clone, its output to LOGS/NAME.log, its time kept for the summary.
step() {
    local name=$1 t0=$SECONDS status; shift
    say "$(clock) $name: $* (log: $LOGS/$name.log)"
    (cd "$DIR/repo" && "$@") >"$LOGS/$name.log" 2>&1
    status=$?
    SUMMARY+=("$(printf '%-12s %5d s  %s' "$name" $((SECONDS - t0)) "$([ $status = 0 ] && echo ok || echo "FAILED ($status)")")")
    say "$(clock) $name: exit $status after $((SECONDS - t0)) s"
    if [ $status != 0 ]; then
        tail -n 40 "$LOGS/$name.log" | sed 's/^/    /'
        failed="$failed $name"
    fi
    return $status
}

remove_caches() {
    local podman_conf=/etc/dsportal/containers.conf image
    say "removing every cache the project builds on this machine"
    if [ -d /opt/dsportal ]; then rm -rf /opt/dsportal; say "removed /opt/dsportal (venv, stamps, npm prefix, Kubernetes binaries)"; fi
    if [ -d /var/cache/dsportal ]; then rm -rf /var/cache/dsportal; say "removed /var/cache/dsportal (Go build cache, Slurm sources and builds, mypy cache)"; fi
    if command -v podman >/dev/null; then
        for image in localhost/dsportal-training:latest localhost/dsportal-hub:latest localhost/debian:bookworm; do
            CONTAINERS_CONF=$podman_conf podman rmi -f "$image" >/dev/null 2>&1 && say "removed image $image"
        done
        CONTAINERS_CONF=$podman_conf podman image prune -f >/dev/null 2>&1 && say "removed podman's dangling layers"
    fi
}

mkdir -p "$DIR"
[ -e "$DIR/repo" ] && { echo "fresh-run.sh: $DIR/repo exists; give another --dir" >&2; exit 2; }
mkdir -p "$LOGS"
started=$SECONDS
say "$(clock) cloning $commit of $REPO into $DIR/repo"
git clone -q --no-local "$REPO" "$DIR/repo" && git -C "$DIR/repo" checkout -q "$commit" \
    || { echo "fresh-run.sh: the clone failed" >&2; exit 1; }
((NO_CACHE)) && remove_caches
if ((SKIP_UP)); then
    step test make test PYTEST_ARGS="-ra --durations=0"
elif ((USER_WORK)); then
    PY=/opt/dsportal/venv/bin/python
    step up make up && step user-slurm "$PY" -m tests.newcomer slurm && step up-k8s make up-k8s \
        && step user-k8s "$PY" -m tests.newcomer kubernetes \
        && step test make test PYTEST_ARGS="-ra --durations=0"
    step user-status "$PY" -m tests.newcomer status
    step down-k8s make down-k8s
    step down make down
else
    step up make up && step test make test PYTEST_ARGS="-ra --durations=25"
    step down make down
fi
total=$((SECONDS - started))

{
    echo "fresh-run of $commit ($(git -C "$REPO" log -1 --format=%s "$commit" | cut -c1-60))"
    echo "caches: $( ((NO_CACHE)) && echo 'every one removed first' || echo 'as this machine had them')"
    printf '%s\n' "${SUMMARY[@]}"
    printf '%-12s %5d s\n' total "$total"
    # make test runs pytest twice (the unit tests and the suites in one session, then the check of the users'
    # boxes): both results, and the slowest tests of the first.
    [ -f "$LOGS/test.log" ] && grep -E '^=+ .*(passed|failed|error).* in ' "$LOGS/test.log"
    [ -f "$LOGS/test.log" ] && awk '/slowest .*durations/ && !seen {seen = 1; on = 1}
        on && n < 27 {print; n++}' "$LOGS/test.log"
} | tee "$LOGS/summary.txt"
if [ -n "$failed" ]; then say "failed:$failed"; exit 1; fi
say "every step passed (logs and summary: $LOGS)"
