#!/usr/bin/env bash
# Build the Kubernetes v1.20.2 servers from Debian bookworm's `kubernetes` source package, for the Kubernetes box
# (deploy/kubernetes/kubebox.py) and its tests: kube-apiserver, kube-controller-manager, kube-scheduler, the kubelet
# and kube-proxy; and install what runs the nodes' pods (containerd, runc, the CNI plugins, a static busybox).
#
#   sudo deploy/kubernetes/build-kubernetes.sh        # or: make kube-build
#
# Nothing on the package registries ships a kube-apiserver (no kind, k3s or envtest binaries), so we build the
# one Debian carries, with Debian's Go 1.19. About 9.5 minutes on 2 cores from an empty Go cache; the build tree is 2.4 GB and is
# deleted after installing unless KEEP_BUILD=1.
#
# Idempotent and cached per machine: when the stamp file and both binaries exist it exits at once.
#
# Two fixes the plain source needs:
#   - the build needs rsync (hack/lib/golang.sh copies the binaries with it) -- installed below;
#   - the vendored github.com/modern-go/reflect2 1.0.1 breaks under Go >= 1.18: the apiserver segfaults in
#     runtime.mapiterinit on the first custom resource. Debian's golang-github-modern-go-reflect2-dev 1.0.2
#     is swapped in for it (its API is the same; vendor/modules.txt keeps naming 1.0.1, which Go accepts).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # apt_missing, apt_get (its `say` is replaced below)

KUBE_VERSION=v1.20.2
PREFIX=${PREFIX:-/opt/dsportal/kubernetes}
BIN_DIR=$PREFIX/bin
STAMP=$PREFIX/.built-$KUBE_VERSION
BUILD_ROOT=${BUILD_ROOT:-/var/cache/dsportal/kubernetes-build}
# Go's build cache, kept when the build tree is deleted: a later build (another command, a patched source) then
# recompiles only what changed. hack/lib/golang.sh sets GOCACHE itself, to _output/local/go/cache inside the tree
# (an exported GOCACHE has no effect), so that directory is made a link to this one.
GO_CACHE=${GO_CACHE:-/var/cache/dsportal/go-build-cache}
GO_ROOT=/usr/lib/go-1.19
REFLECT2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2
COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
PACKAGES=(etcd-server golang-1.19-go rsync dpkg-dev golang-github-modern-go-reflect2-dev
          containerd runc containernetworking-plugins busybox-static iptables gcc libc6-dev
          socat)  # socat: the hub pod's LDAP relay (kubeparts/hub.py)
SRC_LIST=/etc/apt/sources.list.d/dsportal-deb-src.sources

say() { echo "build-kubernetes: $*"; }
die() { echo "build-kubernetes: error: $*" >&2; exit 1; }

binaries_built() {
    [[ -f $STAMP ]] || return 1
    for cmd in "${COMMANDS[@]}"; do [[ -x $BIN_DIR/$cmd ]] || return 1; done
}

if binaries_built && [[ -x /usr/bin/etcd && -x /usr/bin/containerd && -x /bin/busybox && -x /usr/bin/socat ]]; then
    say "cached: $(cat "$STAMP") (delete $STAMP to rebuild)"
    exit 0
fi
[[ $(id -u) -eq 0 ]] || die "run as root (it installs Debian packages and writes $PREFIX)"
command -v apt-get >/dev/null || die "apt-get not found: this script needs Debian 12 (bookworm)"
started=$(date +%s)

# --- packages, and a deb-src line for bookworm main on the mirror apt already uses ----------------------
debian_mirror() {
    # The first URI serving bookworm main, from deb822 .sources files or one-line .list files.
    local uri
    uri=$(awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ && u {print u; exit}' \
          /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    if [[ -z $uri ]]; then
        uri=$(awk '$1 == "deb" && / bookworm / && / main/ {for (i=2; i<=NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
              /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n1 || true)
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

need_update=0
if [[ ! -f $SRC_LIST ]]; then
    mirror=$(debian_mirror)
    say "adding deb-src for bookworm main from $mirror ($SRC_LIST)"
    cat >"$SRC_LIST" <<EOF
# Written by dsportal deploy/kubernetes/build-kubernetes.sh: \`apt-get source kubernetes\` needs it.
Types: deb-src
URIs: $mirror
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    need_update=1
fi
# Not apt_install_missing: apt-get update is also needed for the deb-src line, and the output here is terse.
mapfile -t missing < <(apt_missing "${PACKAGES[@]}")
if ((need_update)) || ((${#missing[@]})) || ! apt-cache showsrc kubernetes >/dev/null 2>&1; then
    say "apt-get update"
    apt_get update -qq || die "apt-get update failed"
fi
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
fi
[[ -x $GO_ROOT/bin/go ]] || die "$GO_ROOT/bin/go missing after installing golang-1.19-go"
[[ -f $REFLECT2_SRC/reflect2.go ]] || die "$REFLECT2_SRC missing after installing golang-github-modern-go-reflect2-dev"
if binaries_built; then
    say "packages installed; binaries cached: $(cat "$STAMP")"
    exit 0
fi

# --- source ------------------------------------------------------------------------------------------
mkdir -p "$BUILD_ROOT"
cd "$BUILD_ROOT"
src=$(find . -maxdepth 1 -type d -name 'kubernetes-*' | sort | tail -n1)
if [[ -z $src || ! -f $src/.dsportal-unpacked ]]; then
    rm -rf ./kubernetes-*/  # a half-unpacked tree; downloaded files are checked and reused by apt-get
    say "apt-get source kubernetes (into $BUILD_ROOT)"
    apt_get source -qq kubernetes >/dev/null || die "apt-get source kubernetes failed (is the deb-src line in $SRC_LIST reachable?)"
    src=$(find . -maxdepth 1 -type d -name 'kubernetes-*' | sort | tail -n1)
    [[ -n $src ]] || die "apt-get source kubernetes unpacked nothing in $BUILD_ROOT"
    touch "$src/.dsportal-unpacked"
fi
src=$(cd "$src" && pwd)
say "source: $src"

vendored=$src/vendor/github.com/modern-go/reflect2
[[ -d $vendored ]] || die "$vendored not found: not the kubernetes source this script knows"
say "swapping in Debian's reflect2 $(dpkg-query -W -f='${Version}' golang-github-modern-go-reflect2-dev) for the vendored copy"
# Sources only (1.0.2 renamed its go_above_*/go_below_* files, so the old ones go); LICENSE stays.
find "$vendored" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) -delete
find "$REFLECT2_SRC" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) ! -name '*_test.go' \
    -exec cp {} "$vendored/" \;

# --- build (as debian/rules does: a GOPATH link to the tree, CGO off, the tree's own make) --------------
export PATH=$GO_ROOT/bin:$PATH GOROOT=$GO_ROOT CGO_ENABLED=0
export GOPATH=$src/.go
mkdir -p "$GO_CACHE" "$src/_output/local/go"
[[ -L $src/_output/local/go/cache ]] || { rm -rf "$src/_output/local/go/cache"; ln -s "$GO_CACHE" "$src/_output/local/go/cache"; }
mkdir -p "$GOPATH/src/k8s.io"
[[ -L $GOPATH/src/k8s.io/kubernetes ]] || ln -s ../../.. "$GOPATH/src/k8s.io/kubernetes"
# hack/lib/version.sh stamps the binaries from this file instead of git (the source package has no .git).
{
    echo "KUBE_GIT_COMMIT='debian-$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)'"
    echo "KUBE_GIT_TREE_STATE='clean'"
    echo "KUBE_GIT_VERSION='$KUBE_VERSION'"
    echo "KUBE_GIT_MAJOR='1'"
    echo "KUBE_GIT_MINOR='20'"
} >"$BUILD_ROOT/version.env"
export KUBE_GIT_VERSION_FILE=$BUILD_ROOT/version.env
cd "$src"
what=$(printf 'cmd/%s ' "${COMMANDS[@]}")
say "building ${COMMANDS[*]} with $(go version | cut -d' ' -f3) (about 9 minutes on 2 cores from an empty Go cache; log: $BUILD_ROOT/build.log)"
if ! make WHAT="${what% }" >"$BUILD_ROOT/build.log" 2>&1; then
    tail -n 30 "$BUILD_ROOT/build.log" >&2
    die "building ${COMMANDS[*]} failed; read $BUILD_ROOT/build.log"
fi

# --- install -----------------------------------------------------------------------------------------
mkdir -p "$BIN_DIR"
for cmd in "${COMMANDS[@]}"; do
    [[ -x $src/_output/bin/$cmd ]] || die "make exited 0 but $src/_output/bin/$cmd is missing; read $BUILD_ROOT/build.log"
    install -m 0755 "$src/_output/bin/$cmd" "$BIN_DIR/$cmd"
done
version=$("$BIN_DIR/kube-apiserver" --version)
echo "$version, Go 1.19, reflect2 1.0.2, built $(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$STAMP"
say "installed ${COMMANDS[*]} into $BIN_DIR ($version)"
if [[ ${KEEP_BUILD:-0} != 1 ]]; then
    say "deleting the build tree $BUILD_ROOT (KEEP_BUILD=1 keeps it)"
    cd /
    rm -rf "$BUILD_ROOT"
fi
say "done in $(($(date +%s) - started)) s"
