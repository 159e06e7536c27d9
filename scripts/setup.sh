#!/usr/bin/env bash
# Machine setup for code execution and sandboxes: installs bubblewrap, runc and the language toolchains from
# Debian, then builds the native isolation helpers and the sandbox agent (native/ -> native/build/). Idempotent and non-interactive; a second
# run checks installed packages with one dpkg-query call and rebuilds nothing, so it costs well under a
# second. Wired to `npm install` (postinstall) and `npm test` (pretest).
#
# It never fails the install: what cannot be done is reported as a warning and the isolation layer then
# reports itself unavailable with the reason (code execution answers a clear error, never runs unisolated).
set -uo pipefail
cd "$(dirname "$0")/.."

warn() { echo "hangar setup: warning: $*" >&2; }
info() { [ -n "${HANGAR_SETUP_QUIET:-}" ] || echo "hangar setup: $*"; }

# Debian packages (package name -> why). Java 17 and Node are expected under /usr already; the JDK is
# checked like the rest and installed if missing. Debian's python3 is /usr/bin/python3: the sandbox user
# cannot read a pyenv under /root (0700), so only /usr toolchains are usable inside the sandbox.
PACKAGES=(
  bubblewrap              # the sandbox
  python3                 # /usr/bin/python3
  golang-go               # go
  ruby                    # ruby
  mono-mcs mono-runtime   # C#: mcs + mono
  rustc                   # Debian's rustc (the one in /root/.cargo is unreadable by the sandbox user)
  gcc g++ libc6-dev       # C, C++ (libc6-dev also gives libc.a for the static reaper)
  openjdk-17-jdk-headless # java, javac
  runc                    # persistent sandboxes (OCI containers)
  nftables iproute2       # sandbox networking: bridge, veth, NAT and the host-protecting rules
  e2fsprogs util-linux mount # sandbox disks: mkfs.ext4, losetup, mount (a sized ext4 image per sandbox and build)
  mmdebstrap              # OS images of templates (debian-12, ubuntu-22.04/24.04) built from the configured mirrors (ADR 0022)
  user-mode-linux busybox-static cpio kmod # the cgroup v2 test guest (scripts/guest, ADR 0021)
  linux-source-6.1 bc flex bison # the guest's kernel with sandbox networking, built once (scripts/guest/kernel.sh)
  wireguard-tools         # wg-quick: the device mesh's tests check generated peer configs with `wg-quick strip` (ADR 0029)
  chromium                # the web console's browser tests (playwright-core drives /usr/bin/chromium; ADR 0047)
)

install_packages() {
  if [ "$(id -u)" -ne 0 ]; then
    warn "not root: skipping package installation (bubblewrap and the toolchains must be installed by root)"
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
    warn "apt is not available on this machine: skipping package installation"
    return 0
  fi
  local missing=() pkg status
  # One query for all packages; a package never installed makes dpkg-query print nothing for it.
  declare -A installed=()
  while read -r pkg status; do
    [ "$status" = "ii" ] && installed[$pkg]=1
  done < <(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${PACKAGES[@]}" 2>/dev/null)
  for pkg in "${PACKAGES[@]}"; do
    [ -n "${installed[$pkg]:-}" ] || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    info "packages: all present"
    return 0
  fi
  info "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  local apt_opts=(-y -q -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  if ! apt-get update -q </dev/null; then
    warn "apt-get update failed; trying to install from the current package lists"
  fi
  if ! apt-get install "${apt_opts[@]}" --no-install-recommends "${missing[@]}" </dev/null; then
    warn "apt-get install failed for: ${missing[*]} (code execution will report what is missing)"
  fi
}

check_present() {
  [ -x /usr/bin/node ] || warn "/usr/bin/node is missing: JavaScript cannot run in the sandbox"
  [ -x /usr/lib/jvm/java-17-openjdk-amd64/bin/java ] || warn "OpenJDK 17 is missing under /usr/lib/jvm"
  command -v bwrap >/dev/null 2>&1 || warn "bwrap is missing: code execution will be unavailable"
}

# build SRC OUT [extra gcc flags...]: compiles when OUT is missing or older than SRC or native/common.h;
# writes to a temporary file first so a concurrent run never sees a half-written binary.
build() {
  local src=$1 out=$2; shift 2
  if [ -x "$out" ] && [ "$out" -nt "$src" ] && [ "$out" -nt native/common.h ]; then return 0; fi
  local tmp="$out.tmp.$$"
  if gcc -O2 -Wall -Wextra -std=gnu11 -o "$tmp" "$src" "$@"; then
    mv -f "$tmp" "$out" && info "built $out"
  else
    rm -f "$tmp"
    return 1
  fi
}

# build_agent: the sandbox agent (PID 1 of every persistent sandbox), a static Go binary that uses the
# standard library only, so it builds offline. Rebuilt when missing or older than any *.go file or go.mod
# in native/sandbox-agent; written to a temporary file first, like build.
build_agent() {
  local dir=native/sandbox-agent out=native/build/hangar-agent
  if ! command -v go >/dev/null 2>&1; then
    warn "go is missing: cannot build the sandbox agent (persistent sandboxes will be unavailable)"
    return 0
  fi
  if [ -x "$out" ] && [ -z "$(find "$dir" -maxdepth 1 \( -name '*.go' -o -name go.mod \) -newer "$out" -print -quit)" ]; then
    return 0
  fi
  local tmp="$PWD/$out.tmp.$$"
  if (cd "$dir" && CGO_ENABLED=0 GOCACHE=/tmp/hangar-go-cache GOFLAGS=-mod=mod GOPROXY=off \
        go build -trimpath -ldflags='-s -w' -o "$tmp" .); then
    mv -f "$tmp" "$out" && info "built $out"
  else
    rm -f "$tmp"
    warn "building the sandbox agent failed: persistent sandboxes will be unavailable"
  fi
}

build_native() {
  mkdir -p native/build
  build_agent
  if ! command -v gcc >/dev/null 2>&1; then
    warn "gcc is missing: cannot build the native isolation helpers"
    return 0
  fi
  build native/launcher.c native/build/hangar-launcher \
    || warn "building the launcher failed: code execution will be unavailable"
  build native/spawner.c native/build/hangar-spawner \
    || warn "building the spawner failed: code execution will be unavailable"
  # The reaper runs inside the sandbox: static, so it needs nothing from the sandbox's /lib and adds
  # almost nothing to the peak RSS it measures. Falls back to a dynamic build without libc.a.
  build native/reaper.c native/build/hangar-reaper -static 2>/dev/null \
    || build native/reaper.c native/build/hangar-reaper \
    || warn "building the reaper failed: code execution will be unavailable"
}

# build_console: the web console (packages/console, Vite) into packages/console/dist, which `hangar serve` serves
# at /. Rebuilt when dist is missing or older than any of its sources or the SDK's (it bundles the SDK's sources).
build_console() {
  local dir=packages/console out=packages/console/dist/index.html vite=node_modules/.bin/vite
  if [ ! -x "$vite" ]; then
    warn "vite is missing (npm install not finished?): the web console is not built; / will say so"
    return 0
  fi
  if [ -f "$out" ] && [ -z "$(find "$dir/src" "$dir/public" "$dir/index.html" "$dir/vite.config.ts" "$dir/package.json" packages/sdk/src \
      -newer "$out" -print -quit 2>/dev/null)" ]; then
    return 0
  fi
  # vite.config.ts builds beside dist/ and swaps it in whole, so a running server or a concurrent run never sees half.
  if "$vite" build "$dir" --logLevel warn; then
    info "built the web console ($dir/dist)"
  else
    warn "building the web console failed: / will say it is not built"
  fi
}

install_packages
check_present
build_native
build_console
exit 0
