#!/bin/sh
# /init of the test guest's initramfs (ADR 0021; built by scripts/guest/prepare.sh). Loads the modules needed to
# reach the host's filesystem, mounts it read-only over virtiofs, stacks a tmpfs over it with overlayfs (so the
# guest can write anywhere without touching the host) and hands over to scripts/guest/guest-init.sh on it.
export PATH=/bin
fail() { echo "hangar guest initramfs: $*" >&2; busybox poweroff -f; sleep 5; }
busybox mount -t proc proc /proc
busybox mount -t sysfs sys /sys
busybox mount -t devtmpfs dev /dev
echo "<3>hangar guest: initramfs" >/dev/kmsg
for m in $(busybox cat /modules.order); do busybox insmod "/lib/modules/$m" || fail "insmod $m"; done
arg() { busybox sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" /proc/cmdline; }
init=$(arg hangar.init)
busybox mkdir -p /host /rw
busybox mount -t virtiofs -o ro hostroot /host || fail "cannot mount the host filesystem (virtiofs tag hostroot)"
busybox mount -t tmpfs -o mode=755 rw /rw || fail "tmpfs"
busybox mkdir -p /rw/upper /rw/work
busybox mount -t overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work root /newroot || fail "overlay root"
busybox mount --move /dev /newroot/dev
busybox umount /proc /sys
[ -n "$init" ] && [ -f "/newroot$init" ] || fail "guest init script '$init' not found on the host filesystem"
echo "<3>hangar guest: switch_root" >/dev/kmsg
exec busybox switch_root /newroot /bin/sh "$init"
