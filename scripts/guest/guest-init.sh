#!/bin/sh
# PID 1 of the cgroup v2 test guest (ADR 0021), run from the host's own filesystem after the initramfs made an
# overlay root (host / read-only underneath, tmpfs on top). Sets up what a cgroup v2 host has: cgroup2 with
# nsdelegate at /sys/fs/cgroup, /proc, /sys, /dev/pts, a fresh /run, an ext4 scratch disk for /tmp, /var/tmp and
# /var/lib/hangar (overlayfs upper dirs and loop images need a real filesystem, not the overlay root), the kernel's
# modules from the cache, loopback + user-mode networking; then runs the command written by scripts/guest/run.sh
# and powers off. Its exit code goes back to the host through the exchange share.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
arg() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" /proc/cmdline; }
off() { sync; busybox poweroff -f; sleep 10; }
log() { echo "<3>hangar guest: $*" >/dev/kmsg; }

mount -t proc proc /proc
mount -t sysfs sys /sys
log "init"
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
mount -t mqueue mqueue /dev/mqueue 2>/dev/null || true
ln -sf /proc/self/fd /dev/fd; ln -sf /proc/self/fd/0 /dev/stdin; ln -sf /proc/self/fd/1 /dev/stdout; ln -sf /proc/self/fd/2 /dev/stderr
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup 2>/dev/null \
  || mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
# Like systemd: every available controller enabled for the children of the root cgroup.
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || log "cannot enable $c"; done
mount -t debugfs none /sys/kernel/debug 2>/dev/null || true

log "cgroup done"
xchg=$(arg hangar.xchg)
share=$(arg hangar.share)
modules=$(arg hangar.modules)
ver=$(uname -r)

# Kernel modules: the cache's unpacked tree, reachable over the shared filesystem, at the usual place, so
# modprobe and the kernel's own module autoloading work.
mkdir -p "/lib/modules/$ver"
mount --bind "$modules" "/lib/modules/$ver"
# virtio_net and loop now (the network is set up below; /dev/loop-control exists only once loop is loaded); the
# rest of what sandboxes use is loaded in the background meanwhile, and the kernel autoloads anything else.
modprobe -a virtio_net loop || log "modprobe virtio_net loop failed"
( modprobe -a veth bridge br_netfilter nf_tables nft_chain_nat nft_ct nft_nat nft_masq nft_reject_inet nft_fib_inet \
    nf_nat nf_conntrack tun dummy || log "modprobe failed for some modules" ) &
mods=$!

# The exchange directory (command, environment, exit code) and an optional read-write share, both at their host paths.
mkdir -p /run/hangar-guest
mount -t virtiofs xchg /run/hangar-guest || { log "cannot mount the exchange share"; off; }

# Scratch disk: a sparse file on the host, formatted there for every boot.
mkdir -p /run/scratch
mount -o discard,noatime /dev/vda /run/scratch || { log "cannot mount the scratch disk"; }
for d in tmp var/tmp var/lib/hangar; do
  mkdir -p "/run/scratch/$d" "/$d"
  mount --bind "/run/scratch/$d" "/$d"
done
chmod 1777 /tmp /var/tmp
mkdir -p "$xchg" && mount --bind /run/hangar-guest "$xchg"
if [ -n "$share" ]; then mkdir -p "$share" && mount -t virtiofs share "$share" || log "cannot mount the share $share"; fi

log "net"
# Networking: loopback, and QEMU's user-mode network (the host is 10.0.2.2, its DNS forwarder 10.0.2.3).
hostname hangar-guest
ip link set lo up
eth=$(ls /sys/class/net | grep -v -e '^lo$' | head -n1)
if [ -n "$eth" ]; then
  ip link set "$eth" up
  ip addr add 10.0.2.15/24 dev "$eth"
  ip route add default via 10.0.2.2
  rm -f /etc/resolv.conf; echo "nameserver 10.0.2.3" >/etc/resolv.conf
fi
printf '127.0.0.1 localhost\n::1 localhost\n127.0.1.1 hangar-guest\n' >/etc/hosts
echo hangar-guest >/etc/hostname

# Standard output and error: virtio serial ports named by run.sh, streamed by QEMU to the caller's own.
out=/dev/null; err=/dev/null
for p in /sys/class/virtio-ports/*; do
  case $(cat "$p/name" 2>/dev/null) in
    hangar.stdout) out=/dev/$(basename "$p") ;;
    hangar.stderr) err=/dev/$(basename "$p") ;;
  esac
done
wait "$mods"
log "ready"
# run.sh wrote env (exports) and cmd (the command, quoted); the command runs in a session of its own.
setsid /bin/bash -c '. /run/hangar-guest/env && cd "$HANGAR_GUEST_CWD" && . /run/hangar-guest/cmd' </dev/null >"$out" 2>"$err" &
wait $!
rc=$?
echo "$rc" >/run/hangar-guest/rc.tmp && mv /run/hangar-guest/rc.tmp /run/hangar-guest/rc
log "exit $rc"
off
