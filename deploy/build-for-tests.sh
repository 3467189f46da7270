#!/usr/bin/env bash
# Build what the test suites need before any of them starts (`make test` runs this; `make builds` alone):
#   - the training and hub images (docker/build.sh, what `make images` runs);
#   - the Kubernetes servers and containerd (deploy/kubernetes/build-kubernetes.sh, `make kube-build`);
#   - each Slurm release the suites run a box on besides Debian 12's 22.05 (deploy/slurm/build-slurm.sh, `make
#     slurm-build`): DSPORTAL_TEST_SLURM_RELEASES, default 24.11 (tests/slurm_versions).
# All are cached per machine: once built this takes a few seconds. On a new machine they take minutes on the
# same 2 cores the suites would use, and a suite that times a server's start or a training run cannot share
# them with a build, so the builds come first. The two run side by side: the image build spends much of its
# time waiting on downloads, the Kubernetes and Slurm builds are mostly CPU.
# With --install (what `make test` runs), `make install` (deploy/local/install.sh) runs beside them too: its pip
# installs wait on the registry while the builds compile, so a new machine gets both ready in the time of the longer
# (about 6 minutes less than one after the other). Nothing of the builds needs the venv, and apt-get takes turns
# (deploy/lib.sh's apt_get).
# With --install, the other Slurm releases' builds are left to run beside the suites instead, at the lowest CPU and
# I/O priority (nice 19 in a scheduling group at niceness 19, ionice idle; LOWEST below): only tests/slurm_versions
# needs them, and its side starts once a worker has finished another side, so each build has what CPU the other
# builds, then the suites, leave it until then; its fixture waits for it (tests/slurm_versions/conftest.py: the pid
# and status files below). From nothing on 2026-12-05 the 24.11 build (about 250 CPU-s) was done before the other
# builds were: its group weighed as much as theirs then. With the builds cached this changes nothing (the build
# finds its stamp in a second).
# Each writes its log to $LOG_DIR/build-<name>.log (default tests/artifacts), its process to build-<name>.pid and, when
# it ends, its exit status to build-<name>.status; a failure prints that log's tail.
set -uo pipefail
WITH_INSTALL=0
case ${1:-} in
    --install) WITH_INSTALL=1 ;;
    "") ;;
    *) echo "build-for-tests.sh: unknown argument $1 (--install or nothing)" >&2; exit 2 ;;
esac

REPO=$(cd "$(dirname "$0")/.." && pwd)
LOG_DIR=${LOG_DIR:-$REPO/tests/artifacts}
PROGRESS_EVERY=${PROGRESS_EVERY:-60}  # seconds between "still building" lines
mkdir -p "$LOG_DIR"

say() { printf '==> builds: %s\n' "$*"; }

declare -A pids logs
start() {  # start NAME COMMAND...
    local name=$1; shift
    logs[$name]=$LOG_DIR/build-$name.log
    rm -f "$LOG_DIR/build-$name.status"
    { "$@"; echo $? >"$LOG_DIR/build-$name.status"; } >"${logs[$name]}" 2>&1 </dev/null &
    pids[$name]=$!
    echo "${pids[$name]}" >"$LOG_DIR/build-$name.pid"
}

started=$SECONDS
builds=()
checks=()
if ((WITH_INSTALL)); then
    start install "$REPO/deploy/local/install.sh"
    builds+=(install)
    # The style and type checks as soon as the venv is ready, beside the builds still running (from nothing the
    # images take about 2 minutes longer than the venv, and mypy's cold cache most of a minute). Their failure does
    # not stop the suites: `make test` prints build-checks.log and fails at the end (its exit status is the file's).
    start checks bash -c 'until [ -e "$1/build-install.status" ]; do sleep 1; done
        [ "$(cat "$1/build-install.status")" = 0 ] || { echo "checks: not run, the venv was not installed"; exit 1; }
        cd "$2" && set -x && rc=0 && "$3" -m ruff check . || rc=$?; "$3" -m mypy || rc=$?; exit $rc' \
        checks "$LOG_DIR" "$REPO" "${DSPORTAL_VENV:-/opt/dsportal/venv}/bin/python"
    checks+=(checks)
fi
start images "$REPO/docker/build.sh"
start kubernetes "$REPO/deploy/kubernetes/build-kubernetes.sh"
builds+=(images kubernetes)
behind=()
# The lowest CPU and I/O priority, for a command in a session of its own (setsid): with kernel.sched_autogroup_enabled
# (these machines' default) each session is a scheduling group that the kernel weighs by the group's niceness, never
# by its processes', so a build at `nice -n 19` in a session of its own took a whole core from the builds the suites
# wait for (2026-12-06; tests/children.py has the same for the trainings the suites start). Its group is niced too.
LOWEST='echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 ionice -c 3 "$@"'
for release in ${DSPORTAL_TEST_SLURM_RELEASES:-24.11}; do
    if ((WITH_INSTALL)); then  # left to run beside the suites (above)
        start "slurm-$release" setsid bash -c "$LOWEST" lowest "$REPO/deploy/slurm/build-slurm.sh" "$release"
        behind+=("slurm-$release")
    else
        start "slurm-$release" "$REPO/deploy/slurm/build-slurm.sh" "$release"
        builds+=("slurm-$release")
    fi
done
say "${builds[*]} building (logs: $LOG_DIR/build-<name>.log)"
((${#behind[@]} == 0)) || say "${behind[*]} building beside the suites, at the lowest priority"

running() { kill -0 "${pids[$1]}" 2>/dev/null; }
failed= next_report=$((SECONDS + PROGRESS_EVERY))
for name in "${builds[@]}" "${checks[@]}"; do
    while running "$name"; do
        sleep 1
        ((SECONDS >= next_report)) || continue
        next_report=$((SECONDS + PROGRESS_EVERY))
        for other in "${builds[@]}"; do
            running "$other" && say "$other still building after $((SECONDS - started)) s: $(tail -n 1 "${logs[$other]}" | cut -c1-100)"
        done
    done
    if wait "${pids[$name]}"; then
        say "$name ready after $((SECONDS - started)) s: $(grep -E '^(==>|build-kubernetes:|build-slurm:|Success)' "${logs[$name]}" | tail -n 1)"
    elif [ "$name" = checks ]; then
        say "checks FAILED after $((SECONDS - started)) s (ruff, mypy: ${logs[$name]}); the suites run all the same"
    else
        say "$name FAILED (whole log: ${logs[$name]}):"
        tail -n 40 "${logs[$name]}" | sed 's/^/    /'
        failed="$failed $name"
    fi
done
[ -z "$failed" ] || { say "failed:$failed"; exit 1; }
say "everything the tests need is built ($((SECONDS - started)) s)"
