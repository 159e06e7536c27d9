#!/usr/bin/env bash
# Prepares the cgroup v2 test guest (ADR 0021): a small initramfs (static busybox + /init) for Debian's
# User-Mode Linux kernel (package user-mode-linux: /usr/bin/linux.uml, modules in /usr/lib/uml/modules), kept in
# a cache directory out of git. Idempotent: built only when missing for the current /init and busybox.
# Prints the initramfs path; exits non-zero with the reason when something is missing.
#
#   HANGAR_GUEST_CACHE   cache directory (default /var/cache/hangar-guest)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HANGAR_GUEST_CACHE:-/var/cache/hangar-guest}
die() { echo "hangar guest: $*" >&2; exit 1; }

for tool in linux.uml busybox cpio gzip mkfs.ext4; do
  command -v "$tool" >/dev/null 2>&1 \
    || die "$tool is missing (scripts/setup.sh installs user-mode-linux, busybox-static, cpio, e2fsprogs as root)"
done
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
# Named by what goes in, so a changed /init never replaces the one a running guest booted from.
key=$(cat "$here/initramfs-init.sh" "$(command -v busybox)" | sha256sum | cut -c1-12)
out="$cache/initramfs-$key.cpio.gz"
if [ ! -e "$out" ]; then
  root=$(mktemp -d "$cache/.initramfs.XXXXXX")
  mkdir -p "$root"/{bin,dev,proc,sys,host,rw,newroot}
  cp "$(command -v busybox)" "$root/bin/busybox"
  ln -s busybox "$root/bin/sh"
  cp "$here/initramfs-init.sh" "$root/init"
  chmod 755 "$root/init"
  (cd "$root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$out.tmp.$$"
  mv -f "$out.tmp.$$" "$out"
  rm -rf "$root"
fi
echo "$out"
