/**
 * `billing`: the meter's charging path and the usage report, each against a bare baseline in the same run, on the
 * embedded SQLite and, when HANGAR_TEST_DATABASE_URL is set (the suite's and `forwarding`'s convention), on
 * PostgreSQL as well.
 *   (a) charging throughput: --events (20,000) due usage events charged by billing's `settleUsage` (src/domains/billing/
 *       meter.ts) in batches of 500 (one transaction each: the due events read, a ledger entry per event, the balance
 *       cache moved, the events marked settled), against a bare insert of the same number of ledger rows into
 *       `credit_ledger` (another organization), 500 per transaction, on the same database. Half of each in two ABBA
 *       rounds; events per second pooled, ratio = settle / bare insert.
 *   (b) report latency: GET /v1/billing/my-usage?all=true (an admin, X-API-Key, over loopback) on an organization with
 *       --usage-events (100,000) events of --members (20) members in the current billing period, against
 *       GET /v1/billing/credits on the same app (authentication and the envelope, one row read). --samples (60)
 *       sequential requests per target after a warm-up, ABBA; median, p90, p99, and the CPU time of this process
 *       (Hangar and the client) per request, which moves far less than wall time on a shared machine.
 * Hangar is built in this process as test/harness.ts builds it (temp data dir, silent log), with response validation
 * off as in production and the billing sweep held off. The events are bulk-inserted in transactions of 1,000 rows.
 */
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { createUser } from '../src/domains/identity/index.js';
import { addMember } from '../src/domains/organizations/index.js';
import { settleUsage } from '../src/domains/billing/index.js';
import { rollUp, type FinalEvent } from '../src/domains/billing/meter.js';
import { periodOf } from '../src/domains/billing/plans.js';
import { systemCtx, withTx } from '../src/platform/context.js';
import { ROLE_SCOPES } from '../src/platform/scopes.js';
import type { Insertable } from 'kysely';
import type { UsageEventsTable } from '../src/database.js';
import { createHarness, createOrgAdmin, testDatabaseUrl, type Actor, type Harness } from '../test/harness.js';
import { table } from './lib/load.js';

export const description =
  'Billing: settleUsage throughput vs bare ledger inserts; GET /v1/billing/my-usage?all=true latency on 100k events vs GET /v1/billing/credits';

const BATCH = 500;

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

const positive = (name: string, v: string | undefined, min = 1) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min}`);
  return n;
};

let seq = 0;
const uid = (p: string) => `${p}_bench${(++seq).toString(36).padStart(8, '0')}`;

async function insertEvents(h: Harness, rows: Insertable<UsageEventsTable>[]) {
  for (let i = 0; i < rows.length; i += 1000) {
    await h.deps.db.kysely.transaction().execute(async (trx) => {
      // Statement size: 19 columns x 250 rows stays under both databases' parameter limits.
      for (let j = i; j < Math.min(i + 1000, rows.length); j += 250)
        await trx
          .insertInto('usage_events')
          .values(rows.slice(j, Math.min(j + 250, i + 1000)))
          .execute();
    });
  }
}

function event(org: string, user: string | null, at: string, over: Partial<Insertable<UsageEventsTable>>): Insertable<UsageEventsTable> {
  return {
    id: uid('use'),
    org_id: org,
    user_id: user,
    kind: 'tool_execution',
    source_id: uid('src'),
    subject: 'weather',
    tier: 'platform',
    input_tokens: 0,
    output_tokens: 0,
    cached_input_tokens: 0,
    reasoning_tokens: 0,
    quantity: 1,
    cost_micros: 1000,
    state: 'due',
    ledger_entry_id: null,
    metadata: null,
    started_at: at,
    ended_at: at,
    created_at: at,
    updated_at: at,
    ...over,
  };
}

/** (a) One round of each target: settle `n` due events, or insert `n` ledger rows bare. Returns seconds. */
async function settleRound(h: Harness, org: Actor, n: number): Promise<number> {
  const now = new Date().toISOString();
  await insertEvents(
    h,
    Array.from({ length: n }, () => event(org.orgId, org.userId, now, {})),
  );
  const t0 = performance.now();
  let settled = 0;
  for (;;) {
    const k = await settleUsage(h.deps, { orgId: org.orgId, limit: BATCH });
    if (k === 0) break;
    settled += k;
  }
  const s = (performance.now() - t0) / 1000;
  if (settled !== n) throw new Error(`settled ${settled} events, expected ${n}`);
  return s;
}

async function bareRound(h: Harness, org: Actor, n: number): Promise<number> {
  const now = new Date().toISOString();
  const rows = Array.from({ length: n }, () => {
    const id = uid('use');
    return {
      id: `chg_${id}`,
      org_id: org.orgId,
      kind: 'usage_charge',
      amount_cents: 0,
      amount_micros: -1000,
      idempotency_key: `usage:${id}`,
      description: 'Tool call: weather',
      actor_user_id: org.userId,
      metadata: JSON.stringify({ usageEventId: id, kind: 'tool_execution' }),
      created_at: now,
    };
  });
  const t0 = performance.now();
  for (let i = 0; i < n; i += BATCH) {
    await h.deps.db.kysely.transaction().execute(async (trx) => {
      // postEntries's statement size (400 rows), so both send the same statements' shapes.
      for (let j = i; j < Math.min(i + BATCH, n); j += 400)
        await trx
          .insertInto('credit_ledger')
          .values(rows.slice(j, Math.min(j + 400, i + BATCH)))
          .execute();
    });
  }
  return (performance.now() - t0) / 1000;
}

/** (b) The organization: `members` users (the admin included) and `total` events spread over the current period. */
async function seedReport(h: Harness, admin: Actor, members: number, total: number) {
  const ctx = systemCtx(h.deps, { userId: admin.userId, orgId: admin.orgId, role: 'admin', scopes: ROLE_SCOPES.admin, apiKeyId: null });
  const users = [admin.userId];
  for (let i = 1; i < members; i++) {
    const u = await createUser(h.deps, { email: `bench-member-${uid('m')}@example.test`, name: `Member ${i}` });
    await addMember(ctx, admin.orgId, u.id, 'member');
    users.push(u.id);
  }
  const now = Date.now();
  const from = Math.max(Date.parse(periodOf().start), now - 30 * 86_400_000);
  const models = ['gpt-4.1', 'gpt-4.1-mini', 'claude-sonnet', 'llama-70b'];
  const tools = ['weather', 'search', 'github_issue', 'slack_post', 'calendar', 'translate', 'stocks', 'maps'];
  const langs = ['python', 'javascript', 'c'];
  const rows: Insertable<UsageEventsTable>[] = [];
  for (let i = 0; i < total; i++) {
    const at = new Date(from + ((now - from - 1000) * i) / total).toISOString();
    const user = users[Math.floor(i / 20) % users.length]!;
    const r = i % 20;
    if (r < 10) {
      const tier = r === 0 ? 'byok' : 'platform';
      const input = 200 + (i % 1000);
      const output = 50 + (i % 300);
      rows.push(
        event(admin.orgId, user, at, {
          kind: 'model_tokens',
          subject: models[i % models.length]!,
          tier,
          input_tokens: input,
          output_tokens: output,
          cached_input_tokens: i % 100,
          reasoning_tokens: i % 50,
          quantity: input + output,
          cost_micros: tier === 'byok' ? 0 : input * 3 + output * 15,
          state: 'settled',
        }),
      );
    } else if (r < 15) rows.push(event(admin.orgId, user, at, { subject: tools[i % tools.length]!, state: 'settled' }));
    else if (r < 17)
      rows.push(
        event(admin.orgId, user, at, { kind: 'code_execution', subject: langs[i % langs.length]!, quantity: 0.2, cost_micros: 10, state: 'settled' }),
      );
    else if (r < 19) {
      const state = i % 997 === 0 ? 'pending' : i % 101 === 0 ? 'forgiven' : 'settled';
      rows.push(
        event(admin.orgId, user, at, {
          kind: 'sandbox_runtime',
          subject: `sbx_${i % 2000}`,
          quantity: 300,
          cost_micros: 5550,
          state,
          ended_at: state === 'pending' ? null : at,
        }),
      );
    } else
      rows.push(
        event(admin.orgId, null, at, {
          kind: 'storage',
          user_id: null,
          subject: 'workspace',
          quantity: 2 ** 30 * 3600,
          cost_micros: 139,
          state: 'settled',
        }),
      );
  }
  await insertEvents(h, rows);
  // The final events' daily sums, as the settling (or forgiving) transaction writes them in the product.
  const final = rows.filter((r) => r.state === 'settled' || r.state === 'forgiven') as FinalEvent[];
  for (let i = 0; i < final.length; i += 5000) await withTx({ ...ctx }, (tx) => rollUp(tx, final.slice(i, i + 5000)));
}

/** CPU ms of this process (Hangar and the client) per request, by URL. */
const cpuMs = new Map<string, number[]>();

async function timeGet(url: string, key: string): Promise<number> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const res = await fetch(url, { headers: { 'x-api-key': key } });
  const body = await res.text();
  const ms = performance.now() - t0;
  const c = process.cpuUsage(c0);
  cpuMs.set(url, [...(cpuMs.get(url) ?? []), (c.user + c.system) / 1000]);
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${body.slice(0, 300)}`);
  return ms;
}

interface DbResult {
  db: string;
  settleRate: number;
  bareRate: number;
  report: number[];
  credits: number[];
  reportCpu: number[];
  creditsCpu: number[];
  reportMembers: number;
}

async function runOn(
  label: string,
  env: Record<string, string | undefined>,
  o: { events: number; usageEvents: number; members: number; samples: number },
): Promise<DbResult> {
  const h = await createHarness({ HANGAR_VALIDATE_RESPONSES: 'false', HANGAR_BILLING_SETTLE_MS: '3600000', ...env });
  const onExit = () => void h.close().catch(() => undefined);
  process.once('SIGINT', onExit);
  try {
    // ---- (a) charging throughput ----
    const charged = await createOrgAdmin(h, 'Charged');
    const bare = await createOrgAdmin(h, 'Bare');
    await settleRound(h, charged, BATCH); // warm-up: statements prepared, the period's plan grant posted
    await bareRound(h, bare, BATCH);
    const half = Math.ceil(o.events / 2);
    let settleS = 0;
    let bareS = 0;
    bareS += await bareRound(h, bare, half);
    settleS += await settleRound(h, charged, half);
    settleS += await settleRound(h, charged, o.events - half);
    bareS += await bareRound(h, bare, o.events - half);
    const settleRate = o.events / settleS;
    const bareRate = o.events / bareS;
    console.log(`${label} (a): settled ${o.events} events in ${settleS.toFixed(2)} s, bare ledger insert ${bareS.toFixed(2)} s`);

    // ---- (b) report latency ----
    const admin = await createOrgAdmin(h, 'Reported');
    const t0 = performance.now();
    await seedReport(h, admin, o.members, o.usageEvents);
    console.log(`${label} (b): seeded ${o.usageEvents} usage events for ${o.members} members in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    await h.app.listen({ host: '127.0.0.1', port: 0 });
    const base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    const reportUrl = `${base}/v1/billing/my-usage?all=true`;
    const creditsUrl = `${base}/v1/billing/credits`;
    const check = await (await fetch(reportUrl, { headers: { 'x-api-key': admin.key } })).json();
    const org = check.data.organization;
    const counted =
      org.modelUsage.reduce((a: number, m: { calls: number }) => a + m.calls, 0) +
      org.toolExecutions.count +
      org.resourceCharges.reduce((a: number, r: { count: number }) => a + r.count, 0) +
      org.storageUsage.charges +
      org.sandboxRuntime.settled.intervals +
      org.sandboxRuntime.forgiven.intervals +
      org.sandboxRuntime.pending.intervals +
      org.sandboxRuntime.active.sandboxes;
    if (counted !== o.usageEvents || check.data.members.length !== o.members)
      throw new Error(`the report counts ${counted} events of ${check.data.members.length} members, expected ${o.usageEvents} of ${o.members}`);
    for (let i = 0; i < 5; i++) {
      await timeGet(reportUrl, admin.key);
      await timeGet(creditsUrl, admin.key);
    }
    const report: number[] = [];
    const credits: number[] = [];
    cpuMs.clear();
    for (let i = 0; i < o.samples; i++) {
      if (i % 2 === 0) {
        report.push(await timeGet(reportUrl, admin.key));
        credits.push(await timeGet(creditsUrl, admin.key));
      } else {
        credits.push(await timeGet(creditsUrl, admin.key));
        report.push(await timeGet(reportUrl, admin.key));
      }
    }
    return {
      db: label,
      settleRate,
      bareRate,
      report,
      credits,
      reportCpu: cpuMs.get(reportUrl)!,
      creditsCpu: cpuMs.get(creditsUrl)!,
      reportMembers: check.data.members.length,
    };
  } finally {
    process.removeListener('SIGINT', onExit);
    await h.close();
  }
}

export async function run(argv: string[]): Promise<string> {
  const { values } = parseArgs({
    args: argv,
    options: {
      events: { type: 'string', default: '20000' },
      'usage-events': { type: 'string', default: '100000' },
      members: { type: 'string', default: '20' },
      samples: { type: 'string', default: '60' },
    },
    strict: true,
  });
  const o = {
    events: positive('events', values.events, BATCH),
    usageEvents: positive('usage-events', values['usage-events'], 100),
    members: positive('members', values.members),
    samples: positive('samples', values.samples),
  };
  const results: DbResult[] = [await runOn('sqlite', { DATABASE_URL: undefined }, o)];
  if (testDatabaseUrl) results.push(await runOn('postgres', {}, o));
  else console.log('(PostgreSQL skipped: set HANGAR_TEST_DATABASE_URL to measure it too)');

  console.log('');
  console.log(
    table(
      ['(a) charging', 'events', 'settleUsage ev/s', 'bare insert rows/s', 'ratio', 'aim', 'result'],
      results.map((r) => [
        r.db,
        o.events,
        r.settleRate.toFixed(0),
        r.bareRate.toFixed(0),
        (r.settleRate / r.bareRate).toFixed(2),
        '>= 0.3',
        r.settleRate / r.bareRate >= 0.3 ? 'aim met' : 'aim NOT met',
      ]),
    ),
  );
  console.log('');
  const rows: (string | number)[][] = [];
  for (const r of results) {
    rows.push([
      `${r.db}: GET /v1/billing/credits`,
      r.credits.length,
      percentile(r.credits, 50).toFixed(2),
      percentile(r.credits, 90).toFixed(2),
      percentile(r.credits, 99).toFixed(2),
      percentile(r.creditsCpu, 50).toFixed(2),
      '',
      '',
    ]);
    const med = percentile(r.report, 50);
    rows.push([
      `${r.db}: GET /v1/billing/my-usage?all=true`,
      r.report.length,
      med.toFixed(2),
      percentile(r.report, 90).toFixed(2),
      percentile(r.report, 99).toFixed(2),
      percentile(r.reportCpu, 50).toFixed(2),
      '< 50 ms',
      med < 50 ? 'aim met' : 'aim NOT met',
    ]);
  }
  console.log(`(b) ${o.usageEvents} usage events, ${o.members} members`);
  console.log(table(['target', 'n', 'median ms', 'p90 ms', 'p99 ms', 'CPU ms (median)', 'aim (median)', 'result'], rows));
  return `billing: ${results
    .map(
      (r) =>
        `${r.db} settle ${r.settleRate.toFixed(0)} ev/s vs bare ${r.bareRate.toFixed(0)} rows/s (ratio ${(r.settleRate / r.bareRate).toFixed(2)}), my-usage?all=true median ${percentile(r.report, 50).toFixed(1)} ms p99 ${percentile(r.report, 99).toFixed(1)} ms (CPU ${percentile(r.reportCpu, 50).toFixed(1)} ms) vs credits ${percentile(r.credits, 50).toFixed(1)} ms`,
    )
    .join('; ')}`;
}
