#!/bin/sh
# PID 1 of the cgroup v2 test guest (ADR 0021), run from the host's own filesystem after the initramfs made an
# overlay root (host / read-only underneath over hostfs, tmpfs on top). Sets up what a cgroup v2 host has: cgroup2 with
# nsdelegate at /sys/fs/cgroup, /proc, /sys, /dev/pts, a fresh /run, an ext4 scratch disk for /tmp, /var/tmp and
# /var/lib/hangar (overlayfs upper dirs and loop images need a real filesystem, not the overlay root), the kernel's
# modules of the user-mode-linux package, loopback; then runs the command written by scripts/guest/run.sh
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
ver=$(uname -r)

# Kernel modules: the package's tree at the usual place, so modprobe and the kernel's module autoloading work.
if [ -d "/usr/lib/uml/modules/$ver" ]; then
  mkdir -p "/lib/modules/$ver"
  mount --bind "/usr/lib/uml/modules/$ver" "/lib/modules/$ver"
fi
# loop now (/dev/loop-control exists only once it is loaded); the rest of what sandboxes use is loaded in the
# background meanwhile, and the kernel autoloads anything else.
modprobe loop || log "modprobe loop failed"
( modprobe -a veth bridge br_netfilter nf_tables nft_ct nft_masq nft_reject \
    nf_nat nf_conntrack tun dummy || log "modprobe failed for some modules" ) &
mods=$!

# The exchange directory (command, environment, exit code) and an optional read-write share, both at their host paths.
mkdir -p /run/hangar-guest
mount -t hostfs -o "$xchg" hostfs /run/hangar-guest || { log "cannot mount the exchange share"; off; }

# Scratch disk: a sparse file on the host, formatted there for every boot.
mkdir -p /run/scratch
mount -o noatime /dev/ubda /run/scratch || { log "cannot mount the scratch disk"; }
for d in tmp var/tmp var/lib/hangar; do
  mkdir -p "/run/scratch/$d" "/$d"
  mount --bind "/run/scratch/$d" "/$d"
done
chmod 1777 /tmp /var/tmp
mkdir -p "$xchg" && mount --bind /run/hangar-guest "$xchg"
# A working directory under one of those (a CI clone in /tmp) would now be hidden by the scratch disk: show the
# host's directory there again, read-only underneath with the scratch disk on top, as the root is.
cwd=$(bash -c '. /run/hangar-guest/env && printf %s "$HANGAR_GUEST_CWD"')
case "$cwd/" in
  /tmp/* | /var/tmp/* | /var/lib/hangar/*)
    mkdir -p /run/scratch/.cwd/lower /run/scratch/.cwd/upper /run/scratch/.cwd/work "$cwd"
    { mount -r -t hostfs -o "$cwd" hostfs /run/scratch/.cwd/lower \
      && mount -t overlay -o lowerdir=/run/scratch/.cwd/lower,upperdir=/run/scratch/.cwd/upper,workdir=/run/scratch/.cwd/work \
        cwd "$cwd"; } || log "cannot show the working directory $cwd over the scratch disk"
    ;;
esac
if [ -n "$share" ]; then mkdir -p "$share" && mount -t hostfs -o "$share" hostfs "$share" || log "cannot mount the share $share"; fi

# Networking: loopback, and a LAN-like interface eth0 (a dummy: what is sent there is dropped) with an address and
# the default route, so the guest looks like a host on a network (sandboxes' rules keep them from the host's own
# addresses and networks). Sandboxes get their bridge and NAT from Hangar itself; nothing leaves the guest.
hostname hangar-guest
ip link set lo up
if ip link add eth0 type dummy 2>/dev/null; then
  ip addr add 192.168.100.2/24 dev eth0
  ip link set eth0 up
  ip route add default via 192.168.100.1 dev eth0
fi
printf '127.0.0.1 localhost\n::1 localhost\n127.0.1.1 hangar-guest\n' >/etc/hosts
echo hangar-guest >/etc/hostname

# Standard output and error: consoles 1 and 2, which run.sh attached to its own, set raw (no CR/LF translation).
# The command writes to pipes copied to them, so it sees a pipe as the caller's output would be, not a terminal.
stty -F /dev/tty1 raw -echo 2>/dev/null; stty -F /dev/tty2 raw -echo 2>/dev/null
mkfifo /run/hangar-guest.out /run/hangar-guest.err
cat /run/hangar-guest.out >/dev/tty1 &
c1=$!
cat /run/hangar-guest.err >/dev/tty2 &
c2=$!
wait "$mods"
log "ready"
# run.sh wrote env (exports) and cmd (the command, quoted); the command runs in a session of its own.
setsid /bin/bash -c '. /run/hangar-guest/env && cd "$HANGAR_GUEST_CWD" && . /run/hangar-guest/cmd' \
  </dev/null >/run/hangar-guest.out 2>/run/hangar-guest.err &
wait $!
rc=$?
wait "$c1" "$c2"
echo "$rc" >/run/hangar-guest/rc.tmp && mv /run/hangar-guest/rc.tmp /run/hangar-guest/rc
log "exit $rc"
off
