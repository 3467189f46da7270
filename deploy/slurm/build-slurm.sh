#!/usr/bin/env bash
# Build a Slurm release from Debian's source archive, installed side by side under the project's prefix, for the
# box on that version (issue 42; not yet used by `make up` or `make test`). 22.05 stays Debian 12's own packages.
#
#   sudo deploy/slurm/build-slurm.sh 24.11      # -> /opt/dsportal/slurm/24.11/{bin,sbin,lib}
#
# The source is Debian's orig tarball of that release (trixie carries 24.11.5), checked against the sha256 that
# Debian's Sources index lists for it; upstream's configure and make, no Debian packaging. Idempotent and cached
# per machine: when its stamp exists it exits at once. The build tree is deleted afterwards unless KEEP_BUILD=1.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # apt_install_missing

say() { echo "build-slurm: $*"; }
die() { echo "build-slurm: error: $*" >&2; exit 1; }

RELEASE=${1:-}
case $RELEASE in
    22.05) exit 0 ;;  # Debian 12's own packages (deploy/local/install.sh)
    24.11) VERSION=24.11.5 SUITE=trixie ;;
    26.05) VERSION=26.05.5 SUITE=forky ;;
    *) die "usage: build-slurm.sh 24.11|26.05 (22.05 is Debian 12's packages)" ;;
esac
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PREFIX=${SLURM_PREFIX:-/opt/dsportal/slurm}/$RELEASE
STAMP=$PREFIX/.built  # what was built, from where, when
CACHE=${SLURM_CACHE:-/var/cache/dsportal/slurm-src}
BUILD_ROOT=${BUILD_ROOT:-/var/cache/dsportal/slurm-build}
ORIG=slurm-wlm_$VERSION.orig.tar.gz
# What Slurm's configure finds and builds against: munge (auth), MariaDB (slurmdbd's accounting), hwloc, JSON
# (the --json output), YAML, http-parser and JWT (slurmrestd and auth/jwt), dbus (cgroup/v2), readline, lz4, PAM.
PACKAGES=(build-essential pkg-config python3 libmunge-dev libmariadb-dev libhwloc-dev libjson-c-dev libyaml-dev
          libhttp-parser-dev libjwt-dev libdbus-1-dev libreadline-dev liblz4-dev libpam0g-dev xz-utils curl)

if [[ -f $STAMP && -x $PREFIX/sbin/slurmctld ]]; then
    say "cached: $(cat "$STAMP") (delete $STAMP to rebuild)"
    exit 0
fi
[[ $(id -u) -eq 0 ]] || die "run as root (it installs Debian packages and writes $PREFIX)"
started=$(date +%s)
apt_install_missing "${PACKAGES[@]}"

# --- the source, checked against Debian's index ------------------------------------------------------------------
mkdir -p "$CACHE"
if [[ -n ${SLURM_SOURCE:-} ]]; then
    [[ -f $SLURM_SOURCE ]] || die "SLURM_SOURCE=$SLURM_SOURCE is not a file"
    TARBALL=$SLURM_SOURCE ORIGIN="$SLURM_SOURCE (given by SLURM_SOURCE; not Debian's, not checked)"
    # Upstream's release tarballs hold slurm-24.11.5/, GitHub's (and so Debian's orig) slurm-slurm-24-11-5-1/.
    VERSION=$(tar tzf "$TARBALL" | awk 'NR == 1 && match($0, /[0-9]+[.-][0-9]+[.-][0-9]+/) {
                                        v = substr($0, RSTART, RLENGTH); gsub("-", ".", v); print v}')
    [[ $VERSION == "$RELEASE".* ]] || die "$SLURM_SOURCE holds Slurm $VERSION, not $RELEASE"
else
    curl -fsS -o "$CACHE/Sources-$SUITE.xz" "$MIRROR/dists/$SUITE/main/source/Sources.xz" \
        || die "Debian's Sources index of $SUITE could not be fetched from $MIRROR"
    want=$(xz -dc "$CACHE/Sources-$SUITE.xz" \
           | awk -v f="$ORIG" '/^Package: /{p=($2=="slurm-wlm")} p && /^Checksums-Sha256:/{s=1; next} /^[^ ]/{s=0}
                               p && s && $3==f && !found {print $1; found=1}')
    [[ -n $want ]] || die "$ORIG is not in $MIRROR/dists/$SUITE's Sources index"
    if [[ ! -f $CACHE/$ORIG ]] || [[ $(sha256sum "$CACHE/$ORIG" | cut -d' ' -f1) != "$want" ]]; then
        say "fetching $ORIG"
        curl -fsS -o "$CACHE/$ORIG.part" "$MIRROR/pool/main/s/slurm-wlm/$ORIG" \
            || die "$MIRROR/pool/main/s/slurm-wlm/$ORIG could not be fetched (Debian's index lists it); where the \
archive does not serve it, build from a tarball of the same release: SLURM_SOURCE=<file> $0 $RELEASE"
        mv "$CACHE/$ORIG.part" "$CACHE/$ORIG"
    fi
    [[ $(sha256sum "$CACHE/$ORIG" | cut -d' ' -f1) == "$want" ]] || die "$ORIG: sha256 is not Debian's ($want)"
    TARBALL=$CACHE/$ORIG ORIGIN="Debian's $ORIG (sha256 checked against $SUITE's Sources)"
fi

# --- configure, make, install ----------------------------------------------------------------------------------
rm -rf "$BUILD_ROOT/$VERSION" && mkdir -p "$BUILD_ROOT/$VERSION"
tar xzf "$TARBALL" -C "$BUILD_ROOT/$VERSION" --strip-components=1
cd "$BUILD_ROOT/$VERSION"
say "configuring $VERSION for $PREFIX"
# --disable-static: nothing links Slurm's libraries statically, and libtool would compile each of their sources a
# second time, without -fPIC, for the archives (half the compiler runs of the build).
./configure --prefix="$PREFIX" --sysconfdir="$PREFIX/etc" --with-munge --enable-pam \
    --disable-debug --disable-static --without-rpath >"$BUILD_ROOT/configure-$VERSION.log" 2>&1 \
    || die "configure failed: read $BUILD_ROOT/configure-$VERSION.log"
say "building (make -j$(nproc))"
make -j"$(nproc)" >"$BUILD_ROOT/make-$VERSION.log" 2>&1 || die "make failed: read $BUILD_ROOT/make-$VERSION.log"
make install >"$BUILD_ROOT/install-$VERSION.log" 2>&1 || die "make install failed: read $BUILD_ROOT/install-$VERSION.log"
cd /
[[ ${KEEP_BUILD:-0} == 1 ]] || rm -rf "${BUILD_ROOT:?}/$VERSION"
echo "Slurm $VERSION from $ORIGIN, built $(date -u +%FT%TZ) in $(( $(date +%s) - started )) s" >"$STAMP"
say "$(cat "$STAMP")"
