#!/usr/bin/env bash
# Runs a command as root inside a cgroup v2 guest (ADR 0021) and exits with its exit code:
#
#   scripts/guest/run.sh <command> [args...]
#
# The guest is Debian's cloud kernel under QEMU (KVM when /dev/kvm works, else software emulation) booting a
# small initramfs; its root is the host's own filesystem shared read-only over virtiofs with a tmpfs stacked on
# top, so node, runc, bwrap, the toolchains and this repository are at the same paths, and nothing the guest
# writes reaches the host. /tmp, /var/tmp and /var/lib/hangar are on a fresh ext4 scratch disk. The command runs
# in the caller's working directory with PATH, HOME, CI, TERM, LANG, NO_COLOR/FORCE_COLOR and every HANGAR_*
# variable (127.0.0.1/localhost in HANGAR_TEST_*_URL become the host, 10.0.2.2); its standard output and error
# are streamed to the caller's; standard input is empty.
#
#   HANGAR_GUEST_CACHE   kernel + initramfs cache (default /var/cache/hangar-guest)
#   HANGAR_GUEST_MEM     guest memory (default 4G)          HANGAR_GUEST_CPUS  vCPUs (default: host's count)
#   HANGAR_GUEST_DISK    scratch disk size, sparse (default 32G)
#   HANGAR_GUEST_ACCEL   kvm | tcg (default: kvm when it works, else tcg)
#   HANGAR_GUEST_SHARE   a host directory shared read-write at the same path (e.g. for result files)
#   HANGAR_GUEST_TIMEOUT seconds before the guest is stopped (default 1800); exit code 124 then
#   HANGAR_GUEST_LOG     where the guest's console log is kept (default: printed on failure, then removed)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HANGAR_GUEST_CACHE:-/var/cache/hangar-guest}
die() { echo "hangar guest: $*" >&2; exit 125; }
[ $# -gt 0 ] || die "usage: scripts/guest/run.sh <command> [args...]"
[ "$(id -u)" -eq 0 ] || die "must run as root (virtiofsd shares the host's filesystem)"
bash "$here/prepare.sh" || die "preparing the guest failed"
kdir=$(readlink -f "$cache/current")

run=$(mktemp -d /tmp/hangar-guest.XXXXXX)
xchg="$run/xchg"
mkdir -p "$xchg"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The command and its environment, read by guest-init.sh.
{
  printf 'export HANGAR_GUEST_CWD=%q\n' "$PWD"
  printf 'export HANGAR_GUEST=1\n'
  for v in PATH HOME CI TERM LANG LC_ALL TZ NO_COLOR FORCE_COLOR NODE_OPTIONS $(compgen -e | grep '^HANGAR_' || true); do
    [ -n "${!v+x}" ] || continue
    val=${!v}
    case $v in HANGAR_TEST_*_URL) val=${val//127.0.0.1/10.0.2.2}; val=${val//localhost/10.0.2.2} ;; esac
    printf 'export %s=%q\n' "$v" "$val"
  done
} >"$xchg/env"
# %q quoting is bash's: guest-init.sh reads both files with bash.
{ printf 'exec'; printf ' %q' "$@"; printf '\n'; } >"$xchg/cmd"

# virtiofsd: one daemon per share; each exits when QEMU disconnects.
# The root share uses sandbox=chroot: the default namespace sandbox pivot_roots into the shared directory, which
# fails with EBUSY when that directory is / itself.
share() { # tag dir cache sandbox
  /usr/lib/qemu/virtiofsd --socket-path="$run/$1.sock" -o source="$2" -o cache="$3" -o sandbox="$4" -o no_posix_lock \
    >>"$run/virtiofsd.log" 2>&1 &
  pids+=($!)
}
share hostroot / always chroot
share xchg "$xchg" none namespace
[ -n "${HANGAR_GUEST_SHARE:-}" ] && share share "$(readlink -f "$HANGAR_GUEST_SHARE")" none namespace
for _ in $(seq 1 100); do
  ok=1
  [ -S "$run/hostroot.sock" ] && [ -S "$run/xchg.sock" ] || ok=0
  [ -z "${HANGAR_GUEST_SHARE:-}" ] || [ -S "$run/share.sock" ] || ok=0
  [ $ok -eq 1 ] && break
  sleep 0.05
done
[ -S "$run/hostroot.sock" ] || { cat "$run/virtiofsd.log" >&2; die "virtiofsd did not start"; }

# Formatted here, natively: under software emulation mkfs in the guest costs seconds.
truncate -s "${HANGAR_GUEST_DISK:-32G}" "$run/scratch.img"
mkfs.ext4 -q -F -m 0 -E lazy_itable_init=1,lazy_journal_init=1,nodiscard -L scratch "$run/scratch.img" >/dev/null \
  || die "mkfs.ext4 of the scratch disk failed"

# KVM only with hardware virtualization (kvm_intel/kvm_amd). A /dev/kvm served by kvm_pvm (PVM, as on Firecracker
# hosts like the one this was written on) runs only PVM-enabled guest kernels; Debian's hangs there at boot.
accel=${HANGAR_GUEST_ACCEL:-}
if [ -z "$accel" ]; then
  accel=tcg
  if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then accel=kvm; fi
fi
case $accel in kvm) cpu=host ;; tcg) cpu=max; accel=tcg,thread=multi,tb-size=1024 ;; *) die "HANGAR_GUEST_ACCEL must be kvm or tcg" ;; esac
mem=${HANGAR_GUEST_MEM:-4G}
cpus=${HANGAR_GUEST_CPUS:-$(nproc)}

append="console=ttyS0 loglevel=${HANGAR_GUEST_LOGLEVEL:-4} panic=-1 mitigations=off cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 random.trust_cpu=on"
append+=" hangar.init=$here/guest-init.sh hangar.modules=$kdir/modules hangar.xchg=$xchg"
[ -z "${HANGAR_GUEST_SHARE:-}" ] || append+=" hangar.share=$(readlink -f "$HANGAR_GUEST_SHARE")"

qemu=(qemu-system-x86_64 -accel "$accel" -M q35 -cpu "$cpu" -smp "$cpus" -m "$mem"
  -object "memory-backend-memfd,id=mem,size=$mem,share=on" -numa node,memdev=mem
  -kernel "$kdir/vmlinuz" -initrd "$kdir/initramfs.cpio.gz" -append "$append"
  -nodefaults -no-user-config -display none -vga none -no-reboot
  -serial "file:$run/console.log" -rtc base=utc,clock=host
  -chardev "socket,id=fs0,path=$run/hostroot.sock" -device vhost-user-fs-pci,chardev=fs0,tag=hostroot
  -chardev "socket,id=fs1,path=$run/xchg.sock" -device vhost-user-fs-pci,chardev=fs1,tag=xchg
  -drive "file=$run/scratch.img,if=virtio,format=raw,cache=unsafe,discard=unmap"
  -netdev user,id=n0 -device virtio-net-pci,netdev=n0
  -device virtio-rng-pci
  -device virtio-serial-pci
  -chardev "pipe,id=out,path=$run/stdout" -device virtserialport,chardev=out,name=hangar.stdout
  -chardev "pipe,id=err,path=$run/stderr" -device virtserialport,chardev=err,name=hangar.stderr)
[ -z "${HANGAR_GUEST_SHARE:-}" ] || qemu+=(-chardev "socket,id=fs2,path=$run/share.sock" -device vhost-user-fs-pci,chardev=fs2,tag=share)

# The guest's output ports are FIFOs copied by cat to this script's own stdout/stderr (so a caller's file offset
# and O_APPEND behave as with any child process); each cat ends when QEMU closes its end.
# QEMU writes to <path>.out and reads <path>.in, which nobody writes to.
mkfifo "$run/stdout.in" "$run/stdout.out" "$run/stderr.in" "$run/stderr.out"
cat "$run/stdout.out" &
cat_out=$!
cat "$run/stderr.out" >&2 &
cat_err=$!
timeout --foreground -k 10 "${HANGAR_GUEST_TIMEOUT:-1800}" "${qemu[@]}" </dev/null 2>>"$run/qemu.log"
qrc=$?
wait "$cat_out" "$cat_err" 2>/dev/null
[ -z "${HANGAR_GUEST_LOG:-}" ] || cp "$run/console.log" "$HANGAR_GUEST_LOG" 2>/dev/null
if [ -f "$xchg/rc" ]; then
  exit "$(cat "$xchg/rc")"
fi
{
  echo "hangar guest: the guest ended without the command's exit code (qemu exit $qrc, accel $accel)"
  [ $qrc -eq 124 ] && echo "hangar guest: stopped after HANGAR_GUEST_TIMEOUT=${HANGAR_GUEST_TIMEOUT:-1800}s"
  echo "--- qemu"; tail -n 20 "$run/qemu.log"
  echo "--- virtiofsd"; tail -n 20 "$run/virtiofsd.log"
  echo "--- console"; tail -n 60 "$run/console.log"
} >&2
[ $qrc -eq 124 ] && exit 124
exit 125
