#!/bin/sh
# The runtime image's base (scripts/build-image.sh): mmdebstrap's `extract` variant only unpacks
# the packages, so nothing of theirs ever runs; this does the little their maintainer scripts
# would have done, and removes what nothing in the image uses. $1 is the root directory.
#   extract:   run by mmdebstrap as its --extract-hook (MMDEBSTRAP_HOOK=extract, while the .debs
#              are at hand): a dpkg status file naming the packages whose files stay, for scanners
#   customize: run by build-image.sh on the finished tree (mmdebstrap runs no customize hooks in
#              the extract variant): the CA bundle, the users, and the removal of docs, tools and
#              package tooling
set -eu
root=$1
case "${MMDEBSTRAP_HOOK:-}" in
extract)
  # MMDEBSTRAP_ESSENTIAL lists the .deb files (paths inside the root) that were unpacked.
  mkdir -p "$root/var/lib/dpkg"
  : >"$root/var/lib/dpkg/status"
  for deb in $MMDEBSTRAP_ESSENTIAL; do
    pkg=$(dpkg-deb -f "$root$deb" Package)
    case "$pkg" in debconf) continue ;; esac   # removed below: only ca-certificates' scripts use it
    dpkg-deb -f "$root$deb" Package Version Architecture Source Maintainer Description \
      | sed '2i Status: install ok installed' >>"$root/var/lib/dpkg/status"
    echo >>"$root/var/lib/dpkg/status"
  done
  ;;
customize)
  # What update-ca-certificates makes from Debian's default selection (every certificate of
  # the package): the bundle OpenSSL's default paths read (/usr/lib/ssl/cert.pem links to it).
  mkdir -p "$root/etc/ssl/certs"
  for crt in "$root"/usr/share/ca-certificates/mozilla/*.crt; do
    cat "$crt"
    tail -c1 "$crt" | od -An -c | grep -q '\\n' || echo
  done >"$root/etc/ssl/certs/ca-certificates.crt"
  # The image's only user besides root: uid/gid 10001, the one the manifests run as.
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nactivitycast:x:10001:10001:activitycast:/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nactivitycast:x:10001:\n' >"$root/etc/group"
  # Nothing here runs a shell, perl, debconf, the openssl CLI or apt: keep the shared libraries,
  # OpenSSL's configuration and the bundle, and drop the rest.
  rm -rf "$root/usr/share" "$root/usr/bin" "$root/usr/sbin" "$root/bin" "$root/sbin" \
    "$root/etc/apt" "$root/etc/debconf.conf" "$root/etc/ca-certificates" "$root/etc/ca-certificates.conf" \
    "$root/var/cache" "$root/var/log" "$root/var/lib/apt" "$root/var/lib/dpkg/info" \
    "$root/usr/lib/ssl/misc" "$root/usr/lib/x86_64-linux-gnu/gconv" "$root/usr/lib/x86_64-linux-gnu/engines-3" \
    "$root/etc/ssl/private"
  mkdir -p "$root/tmp" "$root/var/lib/dpkg"
  chmod 1777 "$root/tmp"
  ;;
*)
  echo "image-base-hook.sh: unexpected stage '${MMDEBSTRAP_HOOK:-}'" >&2
  exit 1
  ;;
esac
