#!/usr/bin/env bash
# Installs the system packages ActivityCast builds and tests with (Debian 12), plus any packages
# named as arguments (scripts/build-image.sh adds podman, runc, mmdebstrap). Idempotent: does
# nothing when everything is present.
#
# prometheus gives the tests /usr/bin/prometheus (a real server scrapes a worker) and
# /usr/bin/promtool (checks Deploy/prometheus/). Its package would start a daemon on :9090 (all
# interfaces) when installed: the install runs with a policy-rc.d that forbids starting services,
# and on a systemd machine the unit is stopped and disabled afterwards. The tests start their own
# prometheus on a free loopback port.
#
# gnuplot-nox draws scripts/bench-soak.sh's plot (PNG through cairo, no X libraries).
#
# chromium (headless) drives the console in a real browser (scripts/test-console-browser.sh).
set -euo pipefail
packages=(pkg-config libhiredis-dev libssl-dev libnghttp2-dev libjemalloc-dev redis-server nghttp2-client nghttp2-server openssl python3 curl tmux prometheus gnuplot-nox chromium "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
# No service may start during the install (exit 101: "action forbidden"). A policy-rc.d already
# in place (containers have one) is left as it is.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  trap '$sudo rm -f "$policy"' EXIT
fi
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# systemd honours policy-rc.d for starting, but enables the unit for the next boot: turn it off.
if [ -d /run/systemd/system ] && systemctl list-unit-files prometheus.service >/dev/null 2>&1; then
  $sudo systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
# Whatever started one anyway (an init script without policy-rc.d support): stop it by its PID file.
pidfile=/run/prometheus/prometheus.pid
if [ -s "$pidfile" ]; then
  pid=$(cat "$pidfile")
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = prometheus ]; then $sudo kill "$pid" || true; fi
fi
