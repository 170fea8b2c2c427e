#!/usr/bin/env bash
# Builds the two images without a registry or a Docker engine: rootful podman/buildah from Debian, runc, a base
# image made from Debian packages with mmdebstrap, and a private containers.conf/storage.conf under
# ~/.cache/ascend-hybrid/containers/ (the machine's global container config and storage are never touched).
#
#   hack/images.sh [build] [operator] [trainer]   build (default: both), then print each image's size and time
#   hack/images.sh env                            the exports under which plain `podman images` lists them
#   hack/images.sh tags                           the tags it builds, one a line (operator, then trainer)
#
# Tags: ascend-hybrid/operator:<version> and ascend-hybrid/trainer:<version>-cpu (version from pyproject.toml).
# The trainer built here is the CPU variant (TRAINER_BASE = the Debian base); the CANN variant stays the
# Dockerfile's default for real clusters. Every container, build steps included, uses the host network (builds)
# or none: podman's default bridge network is never used.
#
# Caches (reused when present): the base image (tag ascend-hybrid/base:bookworm-<hash of how it is made>), the
# build layers (buildah --layers), and a wheelhouse ~/.cache/ascend-hybrid/wheels, mounted into the build
# (trainer/docker/install.sh installs from it and adds what it lacks), so a rebuild that reinstalls MindSpore
# does not download its ~800 MB of wheels again.
#
# Environment: AHJ_CACHE_DIR (default ~/.cache/ascend-hybrid), AHJ_IMAGES_NO_INSTALL=1 (fail instead of
# apt-get installing podman buildah runc mmdebstrap), AHJ_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${AHJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ascend-hybrid}
conf_dir=$cache/containers
wheelhouse=$cache/wheels
# Runtime state must not survive a reboot (podman detects reboots by its tmp_dir vanishing): keep it under /run,
# one folder per cache (two caches must not share a runroot).
run_dir=/run/ascend-hybrid-containers/$(printf '%s' "$conf_dir" | sha256sum | cut -c1-12)
mirror=${AHJ_DEBIAN_MIRROR:-http://deb.debian.org/debian}
version=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$repo/pyproject.toml" | head -n 1)
operator_tag=ascend-hybrid/operator:$version
trainer_tag=ascend-hybrid/trainer:$version-cpu
base_packages=python3,python3-pip,python3-venv,ca-certificates,passwd
# The host's CA bundle, mounted read-only into every build step (pip and apt inside the build use it).
ca_bundle=/etc/ssl/certs/ca-certificates.crt

export CONTAINERS_CONF=$conf_dir/containers.conf
export CONTAINERS_STORAGE_CONF=$conf_dir/storage.conf

say() { printf '[images] %s\n' "$*" >&2; }
die() { printf '[images] error: %s\n' "$*" >&2; exit 1; }

write_config() {
    mkdir -p "$conf_dir/storage" "$conf_dir/networks" "$wheelhouse" "$run_dir"
    # runc, not crun: crun 1.8.1 refuses every container on this kind of host ("cgroups in hybrid mode not
    # supported"). Ulimits: podman's defaults are larger than an unprivileged-resource host allows.
    cat >"$conf_dir/containers.conf.new" <<EOF
# Written by hack/images.sh; used through CONTAINERS_CONF. Not the machine's global config.
[containers]
netns = "host"
default_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$run_dir/libpod"

[network]
network_config_dir = "$conf_dir/networks"
EOF
    cat >"$conf_dir/storage.conf.new" <<EOF
# Written by hack/images.sh; used through CONTAINERS_STORAGE_CONF. Not the machine's global storage.
[storage]
driver = "overlay"
graphroot = "$conf_dir/storage"
runroot = "$run_dir/storage"
EOF
    mv "$conf_dir/containers.conf.new" "$conf_dir/containers.conf"
    mv "$conf_dir/storage.conf.new" "$conf_dir/storage.conf"
}

ensure_tools() {
    local missing=()
    for tool in podman buildah runc mmdebstrap; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    [ "${AHJ_IMAGES_NO_INSTALL:-0}" = 1 ] && die "missing ${missing[*]} (AHJ_IMAGES_NO_INSTALL=1: not installing)"
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
    say "installing ${missing[*]} with apt-get (podman buildah runc mmdebstrap, runc as the runtime)"
    local started=$EPOCHREALTIME
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends podman buildah runc mmdebstrap \
        >"$conf_dir/apt-get.log" 2>&1 \
        || { DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$conf_dir/apt-get.log" 2>&1 \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                    podman buildah runc mmdebstrap >>"$conf_dir/apt-get.log" 2>&1; } \
        || { tail -n 20 "$conf_dir/apt-get.log" >&2; die "apt-get install failed (log: $conf_dir/apt-get.log)"; }
    say "tools installed in $(since "$started") s"
}

# Wall-clock seconds since $1 (an $EPOCHREALTIME), to a tenth.
since() { awk -v start="$1" -v now="$EPOCHREALTIME" 'BEGIN { printf "%.1f", now - start }'; }

human_size() { numfmt --to=iec-i --suffix=B --format='%.1f' "$1"; }

image_size() { podman image inspect --format '{{.Size}}' "$1"; }

# The base: Debian bookworm minbase with Python 3.11, pip and venv, made from Debian packages (no registry).
# Its tag carries a hash of everything that makes it, so a change to how it is made builds a new one.
base_image() {
    local key
    key=$(printf '%s\n' "$mirror" "$base_packages" "bookworm" "v1" | sha256sum | cut -c1-12)
    printf 'localhost/ascend-hybrid/base:bookworm-%s' "$key"
}

build_base() {
    local base tarball started
    base=$(base_image)
    if podman image exists "$base"; then
        say "base $base: cached ($(human_size "$(image_size "$base")"))"
        timings+=("base cached 0 $(image_size "$base")")
        return 0
    fi
    started=$EPOCHREALTIME
    tarball=$(mktemp "$cache/base-XXXXXX.tar")
    say "base $base: mmdebstrap bookworm (minbase + $base_packages)"
    # Debian's EXTERNALLY-MANAGED marker is removed so that pip installs system-wide in the images, as it does
    # in the python:3.11-slim images the Dockerfile defaults to.
    # shellcheck disable=SC2016  # $1 is mmdebstrap's, expanded by the hook's shell
    mmdebstrap --quiet --variant=minbase --include="$base_packages" \
        --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
        bookworm "$tarball" \
        "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
        "deb ${mirror%/debian}/debian-security bookworm-security main" \
        || { rm -f "$tarball"; die "mmdebstrap failed"; }
    podman import --quiet "$tarball" "$base" >/dev/null || { rm -f "$tarball"; die "podman import failed"; }
    rm -f "$tarball"
    local took
    took=$(since "$started")
    say "base $base: built in ${took} s ($(human_size "$(image_size "$base")"))"
    timings+=("base built $took $(image_size "$base")")
}

build_target() {
    local target=$1 tag=$2 base started took previous current
    base=$(base_image)
    previous=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
    started=$EPOCHREALTIME
    say "$tag: buildah bud --target $target (base $base)"
    buildah bud --layers --pull=never --network host \
        --volume "$ca_bundle:$ca_bundle:ro" \
        --volume "$wheelhouse:/tmp/ascend-hybrid-wheels" --build-arg WHEELHOUSE=/tmp/ascend-hybrid-wheels \
        --build-arg "PYTHON_IMAGE=$base" --build-arg "TRAINER_BASE=$base" \
        --target "$target" --tag "$tag" --file "$repo/Dockerfile" "$repo" \
        || die "building $tag failed"
    took=$(since "$started")
    # The image this tag named before, now untagged: removed unless something still uses it (the layers it
    # shares with the new one stay).
    current=$(podman image inspect --format '{{.Id}}' "$tag")
    if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
        podman rmi "$previous" >/dev/null 2>&1 || true
    fi
    local how=built
    [ "$previous" = "$current" ] && how=unchanged
    say "$tag: $how in ${took} s ($(human_size "$(image_size "$tag")"))"
    timings+=("$tag $how $took $(image_size "$tag")")
}

summary() {
    local line name how took size
    printf '%-40s %-9s %8s %10s\n' image status seconds size
    for line in "${timings[@]}"; do
        read -r name how took size <<<"$line"
        printf '%-40s %-9s %8s %10s\n' "$name" "$how" "$took" "$(human_size "$size")"
    done
    printf 'wheelhouse %s: %s; image storage %s: %s\n' "$wheelhouse" "$(du -sh "$wheelhouse" | cut -f1)" \
        "$conf_dir/storage" "$(du -sh "$conf_dir/storage" | cut -f1)"
}

command=${1:-build}
case "$command" in
    env)
        printf 'export CONTAINERS_CONF=%q\nexport CONTAINERS_STORAGE_CONF=%q\n' "$CONTAINERS_CONF" \
            "$CONTAINERS_STORAGE_CONF"
        exit 0
        ;;
    tags)
        printf 'localhost/%s\nlocalhost/%s\n' "$operator_tag" "$trainer_tag"
        exit 0
        ;;
    build) shift || true ;;
    operator | trainer) ;;
    *) die "unknown command $command (build [operator] [trainer] | env | tags)" ;;
esac
targets=("$@")
[ "${#targets[@]}" -eq 0 ] && targets=(operator trainer)
for target in "${targets[@]}"; do
    case "$target" in operator | trainer) ;; *) die "unknown target $target (operator, trainer)" ;; esac
done

[ "$(id -u)" -eq 0 ] || die "needs root: the images are built with rootful podman (run it as root or with sudo)"
[ -n "$version" ] || die "no version in $repo/pyproject.toml"
mkdir -p "$conf_dir"
# One build at a time per cache (two `make test` runs on one machine share it).
exec 9>"$conf_dir/build.lock"
flock 9
write_config
ensure_tools
timings=()
total_started=$EPOCHREALTIME
build_base
for target in "${targets[@]}"; do
    case "$target" in
        operator) build_target operator "$operator_tag" ;;
        trainer) build_target trainer "$trainer_tag" ;;
    esac
done
summary
say "done in $(since "$total_started") s; list them with: eval \"\$($0 env)\"; podman images"
