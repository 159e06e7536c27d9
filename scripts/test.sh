#!/usr/bin/env bash
# `npm test`: vitest on this host (arguments passed through, exit code kept), then the isolation suites inside the
# cgroup v2 guest (scripts/guest/test.sh, ADR 0021). The guest part is left out, saying so, when:
#   - file filters are given (`npm test -- src/foo.test.ts`): a targeted run;
#   - HANGAR_GUEST_TESTS=0, outside CI only (under CI the value is ignored and the guest runs);
#   - HANGAR_GUEST_TESTS=done: .ci/run already ran it in this pipeline (its SQLite pass).
set -uo pipefail
cd "$(dirname "$0")/.."
node_modules/.bin/vitest run "$@"
rc=$?

filtered=
for a in "$@"; do
  case $a in -*) ;; *) filtered=1 ;; esac
done
ci=
case ${CI:-} in '' | false | 0) ;; *) ci=1 ;; esac
if [ -n "$filtered" ]; then
  echo "guest: not run (file filters given; run scripts/guest/test.sh for the cgroup v2 suites)"
elif [ "${HANGAR_GUEST_TESTS:-}" = done ]; then
  echo "guest: run once by .ci/run (SQLite pass)"
elif [ "${HANGAR_GUEST_TESTS:-}" = 0 ] && [ -z "$ci" ]; then
  echo "guest: not run (HANGAR_GUEST_TESTS=0)"
else
  [ "${HANGAR_GUEST_TESTS:-}" = 0 ] && echo "guest: HANGAR_GUEST_TESTS=0 is ignored under CI"
  echo "== cgroup v2 guest: scripts/guest/test.sh"
  bash scripts/guest/test.sh || rc=1
fi
exit "$rc"
