# Shared by deploy/image/build and deploy/image/build-postgres (sourced):
# base images made from Debian packages, for machines that cannot pull one.
#
# A base is a root file system that mmdebstrap makes from the packages of
# this machine's Debian release (so a binary built here finds the C library
# it was linked against), imported with `podman import`. It is named after a
# hash of everything that shapes it (the packages, the options, the script
# that finishes it): a second build reuses it, a change makes a new one.

set -euo pipefail

# podman's settings for these machines (runc, cgroupfs, no default ulimits:
# deploy/image/containers.conf), unless the caller chose its own.
export CONTAINERS_CONF="${CONTAINERS_CONF:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/containers.conf}"

# This machine's Debian release (bookworm), and its main and security
# archives: the base gets the same C library the binary was built against,
# with its security fixes.
debian_suite() {
    . /etc/os-release
    echo "${VERSION_CODENAME:?/etc/os-release names no Debian release}"
}

need_tools() {
    local missing=()
    for tool in "$@"; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "error: ${missing[*]} not found: run \`make system-packages\` (it installs podman, runc, mmdebstrap and podman-compose from Debian)" >&2
        exit 1
    fi
}

# debian_base NAME FINISH VARIANT PACKAGES [MMDEBSTRAP OPTIONS...]
# Prints the image name of a base with PACKAGES (comma-separated), made with
# mmdebstrap's VARIANT; FINISH is a function run with the root file system's
# folder as $1 before it is imported. Builds it only when no image of that
# name exists, or always with FRESH_BASE=1 (the packages' security fixes
# since the last build).
debian_base() {
    local name=$1 finish=$2 variant=$3 packages=$4
    shift 4
    local suite key image
    suite=$(debian_suite)
    key=$( { echo "$suite $variant $packages $*"; declare -f "$finish"; } | sha256sum | cut -c1-16)
    image="localhost/$name:$key"
    if [ "${FRESH_BASE:-0}" != 1 ] && podman image exists "$image"; then
        echo "$image"
        return
    fi
    local root
    root=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$root'" EXIT
    echo "building $image from Debian $suite: $packages" >&2
    # Documentation, manual pages and translations are left out; the
    # copyright files stay.
    mmdebstrap --quiet --variant="$variant" --include="$packages" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
        "$@" "$suite" "$root/rootfs" \
        "deb http://deb.debian.org/debian $suite main" \
        "deb http://deb.debian.org/debian $suite-updates main" \
        "deb http://deb.debian.org/debian-security $suite-security main" >&2
    "$finish" "$root/rootfs"
    # The label tells our bases (and the images on them) from anyone else's
    # when a replaced one is cleaned up (remove_replaced).
    tar --numeric-owner --xattrs -C "$root/rootfs" -c . \
        | podman import --quiet --change "LABEL dev.plinth.base=$name" - "$image" >/dev/null
    rm -rf "$root"
    trap - EXIT
    # Bases this one replaces go, unless an image is still built on them.
    local old
    for old in $(podman images --format '{{.Repository}}:{{.Tag}}' "localhost/$name"); do
        [ "$old" = "$image" ] || podman rmi "$old" >/dev/null 2>&1 || true
    done
    echo "$image"
}

# remove_replaced TAG PREVIOUS_ID: removes the image TAG named before a
# rebuild, unless it is the same or a container still uses it; then the
# bases of ours that no name refers to any more (a base made again).
remove_replaced() {
    local now
    now=$(podman image inspect --format '{{.Id}}' "$1")
    if [ -n "$2" ] && [ "$2" != "$now" ]; then
        podman rmi "$2" >/dev/null 2>&1 || true
    fi
    local unnamed
    for unnamed in $(podman images -q --filter dangling=true --filter label=dev.plinth.base); do
        podman rmi "$unnamed" >/dev/null 2>&1 || true
    done
}

# A free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
