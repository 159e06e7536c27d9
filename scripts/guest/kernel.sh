#!/usr/bin/env bash
# Prints the path of the test guest's kernel (ADR 0021), building it first when it is not in the cache: Debian's
# User-Mode Linux configuration (/usr/share/doc/user-mode-linux/config.gz) with the options of kernel.config set
# over it (sandbox networking: nftables' ip/ip6/inet families, NAT, fib; overlay, loop, veth, bridge built in),
# compiled from Debian's linux-source-6.1 (scripts/setup.sh installs it with bc, flex, bison, libelf-dev).
# Idempotent, and named by what goes in: the same sources and options are built once per machine (about 12
# minutes on two cores; `make linux` only, no modules). Exits non-zero with the reason when it cannot.
#
#   HANGAR_GUEST_CACHE   cache directory (default /var/cache/hangar-guest)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HANGAR_GUEST_CACHE:-/var/cache/hangar-guest}
die() { echo "hangar guest: $*" >&2; exit 1; }

src=$(ls /usr/src/linux-source-6.1.tar.* 2>/dev/null | head -n1 || true)
[ -n "$src" ] || die "the kernel sources are missing (scripts/setup.sh installs linux-source-6.1 as root)"
[ -r /usr/share/doc/user-mode-linux/config.gz ] || die "Debian's UML configuration is missing (package user-mode-linux)"
for tool in make gcc bc flex bison; do command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (scripts/setup.sh installs it)"; done

key=$( (dpkg-query -W -f='${Version}' linux-source-6.1 user-mode-linux 2>/dev/null; cat "$here/kernel.config"; zcat /usr/share/doc/user-mode-linux/config.gz) | sha256sum | cut -c1-12)
out="$cache/linux-hangar-$key"
if [ -x "$out" ]; then echo "$out"; exit 0; fi

mkdir -p "$cache"
exec 8>"$cache/.kernel.lock"
flock 8
if [ -x "$out" ]; then echo "$out"; exit 0; fi
build=$(mktemp -d "$cache/.kbuild.XXXXXX")
trap 'rm -rf "$build"' EXIT
echo "hangar guest: building the guest kernel once ($out; about 12 minutes on two cores)" >&2
tar -C "$build" -xaf "$src"
tree=$(ls -d "$build"/linux-source-6.1)
zcat /usr/share/doc/user-mode-linux/config.gz >"$tree/.config"
(cd "$tree" && ARCH=um scripts/kconfig/merge_config.sh -m .config "$here/kernel.config" >/dev/null \
  && make ARCH=um olddefconfig >/dev/null) || die "configuring the guest kernel failed"
if ! (cd "$tree" && make ARCH=um -j"$(nproc)" linux >"$build/build.log" 2>&1); then
  tail -n 30 "$build/build.log" >&2
  die "building the guest kernel failed"
fi
cp "$tree/linux" "$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
echo "$out"
