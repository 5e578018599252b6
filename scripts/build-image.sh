#!/usr/bin/env bash
# Builds the runtime image without pulling anything: the binary on this machine (release,
# --static-swift-stdlib, stripped), a base made from Debian's packages with mmdebstrap (only the
# shared libraries the binary links, CA certificates and a user; no shell, no apt), and the image
# with podman from Deploy/Containerfile, which only copies. Installs podman, runc and mmdebstrap
# if missing (sudo when not root). Works offline except for Debian's package mirror.
#
#   bash scripts/build-image.sh                      # -> localhost/activitycast:dev
#   IMAGE=localhost/activitycast:1.2 bash scripts/build-image.sh
#   BIN=/path/to/activitycast bash scripts/build-image.sh   # that binary (release, static stdlib), not built here
#
# Prints how long each step took and the image's size. Deploy/Dockerfile is the same image for
# builders that can pull swift:6.x-bookworm and debian:bookworm-slim.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
image=${IMAGE:-localhost/activitycast:dev}
base=${BASE_IMAGE:-localhost/activitycast-base:bookworm}
suite=bookworm
mirrors=("deb http://deb.debian.org/debian $suite main" "deb http://deb.debian.org/debian $suite-updates main"
         "deb http://deb.debian.org/debian-security $suite-security main")
# Everything `ldd activitycast` names, as Debian packages, and the CA certificates.
base_packages=libc6,libgcc-s1,libstdc++6,libjemalloc2,libssl3,libnghttp2-14,libhiredis0.14,ca-certificates

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
pm() { $sudo env CONTAINERS_CONF="$repo/Deploy/podman/containers.conf" podman "$@"; }
now() { date +%s.%N; }
took() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

# The images these tags name now: replaced below, then removed (by ID) so rebuilds don't pile up.
old_ids=$(pm image inspect --format '{{.Id}}' "$image" "$base" 2>/dev/null || true)
work=$(mktemp -d)
trap '$sudo rm -rf "$work"' EXIT

t=$(now)
bash scripts/install-deps.sh podman runc mmdebstrap binutils
t_deps=$(took "$t")

t=$(now)
if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  swift build -c release --product activitycast --static-swift-stdlib 2>&1 | tail -1
  bin=$(swift build -c release --show-bin-path)/activitycast
fi
t_build=$(took "$t")

# The base: the packages unpacked (never configured: nothing of theirs runs), then trimmed by
# scripts/image-base-hook.sh. About 4 s.
t=$(now)
$sudo mmdebstrap --quiet --variant=extract --include="$base_packages" \
  --extract-hook="$repo/scripts/image-base-hook.sh" "$suite" "$work/rootfs" "${mirrors[@]}"
$sudo env MMDEBSTRAP_HOOK=customize sh scripts/image-base-hook.sh "$work/rootfs"
certs=$(grep -c 'BEGIN CERTIFICATE' "$work/rootfs/etc/ssl/certs/ca-certificates.crt")
[ "$certs" -gt 100 ] || { echo "the base's CA bundle has $certs certificates" >&2; exit 1; }
$sudo tar --numeric-owner -C "$work/rootfs" -cf "$work/base.tar" .
pm import --quiet "$work/base.tar" "$base" >/dev/null
t_base=$(took "$t")

# The image: the stripped binary and the example configuration on the base.
mkdir "$work/context"
strip --strip-all -o "$work/context/activitycast" "$bin"
cp Deploy/activitycast.yaml "$work/context/activitycast.yaml"
t=$(now)
pm build --quiet --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1000:1000 \
  --build-arg BASE="$base" -f Deploy/Containerfile -t "$image" "$work/context" >/dev/null
t_image=$(took "$t")

# It runs: the dynamic loader finds every library, as user 10001, on a read-only root.
pm run --rm --read-only --network none "$image" routes show sports >/dev/null
[ "$(pm run --rm --read-only --network none --entrypoint /usr/local/bin/activitycast "$image" --help | head -1)" != "" ]

keep=$(pm image inspect --format '{{.Id}}' "$image" "$base")
for id in $old_ids; do
  grep -q "$id" <<<"$keep" || pm rmi "$id" >/dev/null 2>&1 || true   # still used by a container: kept
done

size=$(pm image inspect --format '{{.Size}}' "$image")
base_size=$(pm image inspect --format '{{.Size}}' "$base")
echo "image: $image $((size / 1000000)) MB (base $((base_size / 1000000)) MB, binary $(( $(stat -c %s "$work/context/activitycast") / 1000000 )) MB stripped, $(( $(stat -c %s "$bin") / 1000000 )) MB unstripped)"
echo "timing: packages ${t_deps} s, release build ${t_build} s, mmdebstrap + import ${t_base} s, podman build ${t_image} s"
