#!/usr/bin/env bash
# Runs a command as root inside a cgroup v2 guest (ADR 0021) and exits with its exit code:
#
#   scripts/guest/run.sh <command> [args...]
#
# The guest is Debian's User-Mode Linux kernel (package user-mode-linux) booting a small initramfs; its root is
# the host's own filesystem mounted read-only (hostfs) with a tmpfs stacked on top by overlayfs, so node, runc,
# bwrap, the toolchains and this repository are at the same paths and nothing the guest writes reaches the host.
# /tmp, /var/tmp and /var/lib/hangar are on a fresh ext4 scratch disk. cgroup2 is mounted at /sys/fs/cgroup with
# nsdelegate (cgroup v1 is off: cgroup_no_v1=all). The command runs in the caller's working directory with PATH,
# HOME, CI, TERM, LANG, NO_COLOR/FORCE_COLOR and the HANGAR_* variables (not HANGAR_TEST_DATABASE_URL or
# HANGAR_TEST_REDIS_URL: the guest has no network to the host, so it runs on SQLite and the in-process bus); its
# standard output and error are streamed to the caller's; standard input is empty.
#
#   HANGAR_GUEST_CACHE   initramfs cache (default /var/cache/hangar-guest)
#   HANGAR_GUEST_KERNEL  the UML kernel binary (default: Debian's UML configuration with sandbox networking built in,
#                        compiled once by scripts/guest/kernel.sh; /usr/bin/linux.uml boots Debian's own, without it)
#   HANGAR_GUEST_MEM     guest memory (default 4G)
#   HANGAR_GUEST_DISK    scratch disk size, sparse (default 32G)
#   HANGAR_GUEST_SHARE   a host directory mounted read-write at the same path in the guest (e.g. for result files)
#   HANGAR_GUEST_TIMEOUT seconds before the guest is stopped (default 1800); exit code 124 then
#   HANGAR_GUEST_LOG     file to copy the guest's console log to (it is printed anyway when the guest fails)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "hangar guest: $*" >&2; exit 125; }
[ $# -gt 0 ] || die "usage: scripts/guest/run.sh <command> [args...]"
[ "$(id -u)" -eq 0 ] || die "must run as root"
initrd=$(bash "$here/prepare.sh") || die "preparing the guest failed"
if [ -n "${HANGAR_GUEST_KERNEL:-}" ]; then
  kernel=$HANGAR_GUEST_KERNEL
else
  kernel=$(bash "$here/kernel.sh") || die "no guest kernel (scripts/guest/kernel.sh builds it once; HANGAR_GUEST_KERNEL=/usr/bin/linux.uml boots Debian's, whose sandboxes have no network)"
fi
[ -x "$kernel" ] || die "the guest kernel $kernel is not an executable User-Mode Linux kernel"

run=$(mktemp -d /tmp/hangar-guest.XXXXXX)
xchg="$run/xchg"
mkdir -p "$xchg"
uml_pid=
cleanup() {
  [ -z "$uml_pid" ] || kill "$uml_pid" 2>/dev/null
  rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The command and its environment, read by guest-init.sh with bash (%q quoting is bash's).
{
  printf 'export HANGAR_GUEST_CWD=%q\n' "$PWD"
  printf 'export HANGAR_GUEST=1\n'
  for v in PATH HOME CI TERM LANG LC_ALL TZ NO_COLOR FORCE_COLOR NODE_OPTIONS $(compgen -e | grep '^HANGAR_' || true); do
    case $v in HANGAR_TEST_DATABASE_URL | HANGAR_TEST_REDIS_URL | HANGAR_GUEST_*) continue ;; esac
    [ -n "${!v+x}" ] && printf 'export %s=%q\n' "$v" "${!v}"
  done
} >"$xchg/env"
{ printf 'exec'; printf ' %q' "$@"; printf '\n'; } >"$xchg/cmd"
# The guest's PID 1 runs a copy, so editing guest-init.sh never changes a guest that is already running.
cp "$here/guest-init.sh" "$xchg/init"

# Formatted here, natively, for every run.
truncate -s "${HANGAR_GUEST_DISK:-32G}" "$run/scratch.img"
mkfs.ext4 -q -F -m 0 -E lazy_itable_init=1,lazy_journal_init=1,nodiscard -L scratch "$run/scratch.img" >/dev/null \
  || die "mkfs.ext4 of the scratch disk failed"

share=
[ -z "${HANGAR_GUEST_SHARE:-}" ] || share=$(readlink -f "$HANGAR_GUEST_SHARE")
args=(mem="${HANGAR_GUEST_MEM:-4G}" initrd="$initrd" ubd0="$run/scratch.img" umid="hangar-guest-$$" uml_dir="$run"
  con=null ssl=null con0=null,fd:5 con1=null,fd:6 con2=null,fd:7
  loglevel=4 panic=-1 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1
  hangar.init="$xchg/init" hangar.xchg="$xchg")
[ -z "$share" ] || args+=(hangar.share="$share")

# UML keeps the guest's memory in a file it creates (and unlinks) under TMPDIR: on tmpfs (/dev/shm) when there is
# one, so the guest's memory is never written back to disk. Its own start-up chatter (on its stdout and stderr)
# goes to the console log; the guest's consoles 1 and 2 are this script's stdout and stderr.
memdir=$run
[ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ -w /dev/shm ] && memdir=/dev/shm
TMPDIR=$memdir timeout --foreground -k 10 "${HANGAR_GUEST_TIMEOUT:-1800}" "$kernel" "${args[@]}" \
  </dev/null 6>&1 7>&2 5>"$run/console.log" >>"$run/console.log" 2>&1 &
uml_pid=$!
wait "$uml_pid"
urc=$?
uml_pid=
[ -z "${HANGAR_GUEST_LOG:-}" ] || cp "$run/console.log" "$HANGAR_GUEST_LOG" 2>/dev/null
if [ -f "$xchg/rc" ]; then
  exit "$(cat "$xchg/rc")"
fi
{
  echo "hangar guest: the guest ended without the command's exit code (kernel exit $urc)"
  [ $urc -eq 124 ] && echo "hangar guest: stopped after HANGAR_GUEST_TIMEOUT=${HANGAR_GUEST_TIMEOUT:-1800}s"
  echo "--- guest console (last 60 lines)"; tail -n 60 "$run/console.log"
} >&2
[ $urc -eq 124 ] && exit 124
exit 125
