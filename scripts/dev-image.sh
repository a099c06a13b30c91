#!/usr/bin/env bash
# The container image Trainyard's tests run jobs in, built offline (no registry is reachable
# from CI): a Debian bookworm minbase with python3, made by debootstrap and `podman import`.
#
#   scripts/dev-image.sh build   build the image unless the engine already has it; print its name
#   scripts/dev-image.sh name    print the image's name
#
# `build` and `name` print exactly one line on stdout:
#   TRAINYARD_TEST_IMAGE=localhost/trainyard-test:bookworm
# and everything else on stderr, so a caller can do
#   line="$(scripts/dev-image.sh build)" && export "$line"
#
# The root filesystem is cached as a tarball (debootstrap takes minutes, importing it a few
# seconds), so a machine whose engine lost its images builds again quickly. The image holds
# /etc/trainyard-test-image, a marker file the tests read to tell the image's files from the
# host's. Settings (environment):
#   TRAINYARD_IMAGE_CACHE   where the rootfs tarball is kept (default /var/cache/trainyard-test-image)
#   TRAINYARD_IMAGE_ENGINE  podman (default) or docker
#   TRAINYARD_IMAGE_MIRROR  the Debian mirror debootstrap uses (default deb.debian.org)
set -euo pipefail

IMAGE="localhost/trainyard-test:bookworm"
CACHE="${TRAINYARD_IMAGE_CACHE:-/var/cache/trainyard-test-image}"
ENGINE="${TRAINYARD_IMAGE_ENGINE:-podman}"
MIRROR="${TRAINYARD_IMAGE_MIRROR:-http://deb.debian.org/debian}"
TARBALL="$CACHE/bookworm-minbase-python3.tar"
MARKER="trainyard-test-image bookworm"

exec 3>&1 1>&2
log() { printf 'dev-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

print_name() { printf 'TRAINYARD_TEST_IMAGE=%s\n' "$IMAGE" >&3; }

build_rootfs() {
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install -y debootstrap)"
    mkdir -p "$CACHE"
    ROOTFS="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
    trap 'rm -rf "$ROOTFS"' EXIT
    local root="$ROOTFS"
    log "debootstrap --variant=minbase bookworm (a few minutes, once)"
    debootstrap --variant=minbase --include=python3 bookworm "$root" "$MIRROR" >&2
    printf '%s\n' "$MARKER" >"$root/etc/trainyard-test-image"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    # Written beside the final name, then renamed: a cut-short build leaves no half tarball.
    tar -C "$root" -cf "$TARBALL.partial" .
    mv "$TARBALL.partial" "$TARBALL"
    rm -rf "$root"
}

build() {
    command -v "$ENGINE" >/dev/null || die "$ENGINE is not installed"
    if "$ENGINE" image exists "$IMAGE" 2>/dev/null \
        || { [ "$ENGINE" = docker ] && docker image inspect "$IMAGE" >/dev/null 2>&1; }; then
        log "$IMAGE is already there"
        return
    fi
    [ -s "$TARBALL" ] || build_rootfs
    log "importing $TARBALL as $IMAGE"
    "$ENGINE" import --change 'CMD ["/bin/bash"]' "$TARBALL" "$IMAGE" >&2
}

case "${1:-}" in
    build) build; print_name ;;
    name) print_name ;;
    *) die "usage: $0 build|name" ;;
esac
