// Run by test/billing-crash.test.ts as its own process: meters `count` tool calls for an organization through
// billing's real verb, commits, and is then killed with SIGKILL before anything charges them, which is exactly
// a crash between metering and charging.
import { createDeps } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { recordUsage } from '../src/domains/billing/index.js';
import { systemCtx, withTx } from '../src/platform/context.js';

const [org, user, count] = process.argv.slice(2);
const deps = await createDeps(loadConfig(process.env), { isolation: false });
const ctx = systemCtx(deps, { userId: user!, orgId: org!, role: 'admin', scopes: new Set(), apiKeyId: null });
await withTx(ctx, async (tx) => {
  for (let i = 0; i < Number(count); i++) {
    await recordUsage(tx, { kind: 'tool_execution', orgId: org!, userId: user!, sourceId: `crash-${i}`, tool: 'http_request', succeeded: true });
  }
});
process.stdout.write('metered\n');
process.kill(process.pid, 'SIGKILL');
