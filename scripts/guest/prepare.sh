#!/usr/bin/env bash
# Prepares the cgroup v2 test guest (ADR 0021): Debian's cloud kernel unpacked into a cache directory (never
# installed on the host: `apt-get download` + `dpkg-deb -x`), its module index, and a small initramfs (static
# busybox + the modules that mount the shared host filesystem). Idempotent: a second run only compares mtimes.
# Prints nothing on success unless HANGAR_GUEST_VERBOSE is set; exits non-zero with a reason when it cannot.
#
#   HANGAR_GUEST_CACHE   cache directory (default /var/cache/hangar-guest); kept out of git
#   HANGAR_GUEST_KERNEL  Debian package giving the kernel (default linux-image-cloud-amd64, a meta package
#                        that names the current linux-image-<version>-cloud-amd64)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HANGAR_GUEST_CACHE:-/var/cache/hangar-guest}
meta=${HANGAR_GUEST_KERNEL:-linux-image-cloud-amd64}
say() { [ -z "${HANGAR_GUEST_VERBOSE:-}" ] || echo "hangar guest: $*" >&2; }
die() { echo "hangar guest: $*" >&2; exit 1; }

for tool in qemu-system-x86_64 /usr/lib/qemu/virtiofsd busybox depmod modprobe cpio; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (run scripts/setup.sh as root: it installs qemu-system-x86, busybox-static, kmod, cpio)"
done
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

# 1. The kernel: once per cache. `current` points at the unpacked tree of the version in use.
if [ ! -e "$cache/current/vmlinuz" ]; then
  resolve() { apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}'; }
  pkg=$(resolve)
  if [ -z "$pkg" ]; then
    say "apt-get update (no candidate for $meta)"
    apt-get update -q >/dev/null 2>&1 || true
    pkg=$(resolve)
  fi
  [ -n "$pkg" ] || die "cannot resolve a kernel package from $meta (apt-cache depends $meta)"
  ver=${pkg#linux-image-}
  dir="$cache/$ver"
  if [ ! -e "$dir/vmlinuz" ]; then
    say "downloading $pkg"
    tmp=$(mktemp -d "$cache/.dl.XXXXXX")
    (cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1) || { rm -rf "$tmp"; die "apt-get download $pkg failed"; }
    dpkg-deb -x "$tmp"/*.deb "$tmp/x"
    depmod -b "$tmp/x" "$ver"
    # Debian ships /lib/modules; keep both layouts reachable from one path.
    [ -d "$tmp/x/lib/modules/$ver" ] && mods="$tmp/x/lib/modules/$ver" || mods="$tmp/x/usr/lib/modules/$ver"
    rm -rf "$dir"; mkdir -p "$dir"
    mv "$tmp/x/boot/vmlinuz-$ver" "$dir/vmlinuz"
    mv "$tmp/x/boot/config-$ver" "$dir/config"
    mv "$mods" "$dir/modules"
    echo "$ver" >"$dir/version"
    rm -rf "$tmp"
  fi
  ln -sfn "$ver" "$cache/current.tmp" && mv -T "$cache/current.tmp" "$cache/current"
fi
kdir=$(readlink -f "$cache/current")
ver=$(cat "$kdir/version")

# 2. The initramfs: busybox, /init, and the modules needed before the host filesystem is mounted (virtio PCI,
# virtiofs, overlayfs, virtio console and block). Everything else is loaded later from the cache through the
# shared filesystem. Rebuilt when /init or busybox is newer than it.
out="$kdir/initramfs.cpio.gz"
if [ ! -e "$out" ] || [ "$here/initramfs-init.sh" -nt "$out" ] || [ "$(command -v busybox)" -nt "$out" ]; then
  say "building $out"
  root=$(mktemp -d "$cache/.initramfs.XXXXXX")
  mkdir -p "$root"/{bin,dev,proc,sys,newroot,lib/modules}
  cp "$(command -v busybox)" "$root/bin/busybox"
  ln -s busybox "$root/bin/sh"
  cp "$here/initramfs-init.sh" "$root/init"
  chmod 755 "$root/init"
  : >"$root/modules.order"
  # modprobe -d wants <base>/lib/modules/<ver>: the cache keeps modules/ flat, so give it that layout.
  base="$kdir/modbase"; mkdir -p "$base/lib/modules"; ln -sfn ../../../modules "$base/lib/modules/$ver"
  for m in virtio_pci virtio_console virtio_blk virtio_rng virtiofs overlay; do
    modprobe -d "$base" -S "$ver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
  done >"$root/deps.txt"
  [ -s "$root/deps.txt" ] || die "cannot resolve module dependencies in $kdir/modules"
  while read -r ko; do
    name=$(basename "$ko")
    grep -qx "$name" "$root/modules.order" && continue
    cp "$ko" "$root/lib/modules/$name"
    echo "$name" >>"$root/modules.order"
  done <"$root/deps.txt"
  rm "$root/deps.txt"
  (cd "$root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$out.tmp"
  mv -f "$out.tmp" "$out"
  rm -rf "$root"
fi
say "kernel $ver ready in $kdir"
