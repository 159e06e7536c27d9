#!/bin/sh
# /init of the test guest's initramfs (ADR 0021; built by scripts/guest/prepare.sh). Mounts the host's filesystem
# read-only (hostfs), stacks a tmpfs over it with overlayfs, so the guest can write anywhere without touching the
# host, and hands over to scripts/guest/guest-init.sh on that root.
export PATH=/bin
fail() { echo "hangar guest initramfs: $*" >/dev/kmsg; busybox poweroff -f; sleep 5; }
busybox mount -t proc proc /proc
busybox mount -t sysfs sys /sys
busybox mount -t devtmpfs dev /dev 2>/dev/null
arg() { busybox sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" /proc/cmdline; }
init=$(arg hangar.init)
ver=$(busybox uname -r)
busybox mount -r -t hostfs -o / hostfs /host || fail "cannot mount the host filesystem (hostfs)"
busybox grep -qw overlay /proc/filesystems \
  || busybox insmod "/host/usr/lib/uml/modules/$ver/kernel/fs/overlayfs/overlay.ko" || fail "cannot load overlay.ko"
busybox mount -t tmpfs -o mode=755 rw /rw || fail "tmpfs"
busybox mkdir -p /rw/upper /rw/work
busybox mount -t overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work root /newroot || fail "overlay root"
busybox mount --move /dev /newroot/dev
busybox umount /proc /sys
[ -n "$init" ] && [ -f "/newroot$init" ] || fail "guest init script '$init' not found on the host filesystem"
exec busybox switch_root /newroot /bin/sh "$init"
