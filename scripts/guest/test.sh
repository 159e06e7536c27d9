#!/usr/bin/env bash
# Runs the isolation suites inside the cgroup v2 guest (scripts/guest/run.sh, ADR 0021): boots it once, runs
# vitest there on the suites below, prints vitest's report and then one line `guest: N passed, N failed`.
# Exits non-zero on any failure, and when the guest cannot boot or produces no results (counted as 1 failed):
# nothing here is skipped silently. Inside the guest CI=true, so a suite whose need is missing fails there.
#
#   scripts/guest/test.sh [extra vitest args...]
#   HANGAR_GUEST_JSON=path   also keep vitest's JSON report of the guest run there (.ci/run counts from it)
set -uo pipefail
cd "$(dirname "$0")/../.."

# The suites that need a cgroup v2 host: the one list (also what docs/guest.md names).
SUITES=(
  src/platform/isolation/isolation.test.ts
  src/domains/execute/execute-isolation.test.ts
  src/domains/sandboxes/sandboxes-isolation.test.ts
  src/domains/sandboxes/sandboxes.test.ts
)

share=$(mktemp -d /tmp/hangar-guest-test.XXXXXX)
trap 'rm -rf "$share"' EXIT
start=$(date +%s)
# Longer time-outs than vitest.config.ts: system calls cost more in the guest (ptrace), so creating a sandbox takes
# seconds; the suites assert behaviour, not speed.
CI=true HANGAR_GUEST_SHARE=$share scripts/guest/run.sh node_modules/.bin/vitest run "${SUITES[@]}" \
  --testTimeout=120000 --hookTimeout=180000 \
  --reporter=default --reporter=json --outputFile.json="$share/guest.json" "$@"
rc=$?
secs=$(($(date +%s) - start))

read -r passed failed < <(node -e '
  const fs = require("fs");
  try {
    const r = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    const failedFiles = (r.testResults || []).filter((f) => f.status === "failed" && (f.assertionResults || []).length === 0).length;
    console.log(`${r.numPassedTests} ${r.numFailedTests + failedFiles}`);
  } catch { console.log("0 1"); }
' "$share/guest.json")
[ -z "${HANGAR_GUEST_JSON:-}" ] || cp "$share/guest.json" "$HANGAR_GUEST_JSON" 2>/dev/null || true
if [ ! -s "$share/guest.json" ]; then
  echo "guest: the cgroup v2 guest produced no test results (exit $rc); see the messages above (scripts/guest/run.sh, docs/guest.md)"
fi
[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "guest: $passed passed, $failed failed (${secs}s)"
[ "$failed" -eq 0 ]
