#!/usr/bin/env bash
# Installs the system packages ActivityCast builds and tests with (Debian 12), plus any packages
# named as arguments (scripts/build-image.sh adds podman, runc, mmdebstrap). Idempotent: does
# nothing when everything is present.
set -euo pipefail
packages=(pkg-config libhiredis-dev libssl-dev libnghttp2-dev libjemalloc-dev redis-server nghttp2-client nghttp2-server openssl python3 curl tmux "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
