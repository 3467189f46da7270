#!/usr/bin/env bash
# Make this Debian 12 machine able to build and run the portal's images with podman, without a registry:
#   1. the Debian packages (podman, buildah, runc, debootstrap, ...);
#   2. a containers.conf that the build and the tests name with CONTAINERS_CONF: runc (crun, podman's default,
#      fails here with "cgroups in hybrid mode not supported") and ulimits the sandbox accepts;
#   3. the base image localhost/debian:bookworm, made with debootstrap from the mirror apt already uses and
#      imported with `podman import` (no registry is reachable here). Made once per machine.
# Idempotent: every step is skipped when its result is already there, so a second run takes a second or two.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../deploy/lib.sh"  # say, apt_install_missing

CONTAINERS_CONF_FILE=${DSPORTAL_CONTAINERS_CONF:-/etc/dsportal/containers.conf}
BASE_IMAGE=${DSPORTAL_BASE_IMAGE:-localhost/debian:bookworm}
SUITE=bookworm
APT_PACKAGES=(podman buildah runc debootstrap fuse-overlayfs slirp4netns uidmap)

[ "$(id -u)" = 0 ] || { echo "podman-setup.sh: run as root (it installs packages and uses rootful podman)" >&2; exit 1; }

apt_install_missing "${APT_PACKAGES[@]}"

wanted_conf='# Written by docker/podman-setup.sh; podman and buildah read it through CONTAINERS_CONF.
[containers]
# The sandbox refuses the ulimits podman asks for by default (nofile 1048576).
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
# crun fails on this machine: "cgroups in hybrid mode not supported".
runtime = "runc"'
if [ "$(cat "$CONTAINERS_CONF_FILE" 2>/dev/null)" != "$wanted_conf" ]; then
    say "podman: writing $CONTAINERS_CONF_FILE"
    mkdir -p "$(dirname "$CONTAINERS_CONF_FILE")"
    printf '%s\n' "$wanted_conf" > "$CONTAINERS_CONF_FILE"
fi
export CONTAINERS_CONF=$CONTAINERS_CONF_FILE

# The first Debian archive (not -security) that apt is configured with: one-line or deb822 sources.
apt_mirror() {
    local files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
    grep -hsoE '(^deb(\s+\[[^]]*\])?\s+|^URIs:\s+)https?://\S+' "${files[@]}" \
        | grep -oE 'https?://\S+' | grep -E '/debian/?$' | head -n1 || true
}

if podman image exists "$BASE_IMAGE"; then
    exit 0
fi
MIRROR=${DEBIAN_MIRROR:-$(apt_mirror)}
[ -n "$MIRROR" ] || { echo "podman-setup.sh: no Debian mirror in apt's sources; set DEBIAN_MIRROR" >&2; exit 1; }
ROOTFS=$(mktemp -d /var/tmp/dsportal-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
started=$SECONDS
say "base image: debootstrap --variant=minbase $SUITE from $MIRROR"
debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" > "$ROOTFS.log" 2>&1 \
    || { tail -n 30 "$ROOTFS.log" >&2; exit 1; }
rm -f "$ROOTFS.log"
# The image's apt uses the same mirror; its package lists and downloaded .debs are not part of the image.
printf 'deb %s %s main\ndeb %s %s-updates main\n' "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" > "$ROOTFS/etc/apt/sources.list"
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/archives/*.deb
say "base image: podman import as $BASE_IMAGE"
tar -C "$ROOTFS" -c . | podman import --change 'CMD ["/bin/bash"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$BASE_IMAGE" > /dev/null
say "base image: $BASE_IMAGE made in $((SECONDS - started)) s"
