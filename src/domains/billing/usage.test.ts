import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { securitySuite } from '../../../test/security.js';
import { exec, systemCtx, withTx } from '../../platform/context.js';
import { recordUsage, settleUsage, type UsageInput } from './meter.js';
import { finishRuntime } from './runtime.js';
import { GIB, periodOf } from './plans.js';

const GPT = { inputPerMTok: 3, outputPerMTok: 15, cachedInputPerMTok: 0.3 };
const tokens = (inputTokens: number, outputTokens: number, cachedInputTokens = 0, reasoningTokens = 0) => ({
  inputTokens,
  outputTokens,
  cachedInputTokens,
  reasoningTokens,
});
let n = 0;
const src = () => `src_${++n}`;

/** A metered record without its owner and source (distributed over the kinds). */
type Metered = UsageInput extends infer U ? (U extends UsageInput ? Omit<U, 'orgId' | 'userId' | 'sourceId'> : never) : never;
type Seed = { u: Metered; settle?: boolean; daysAgo?: number; forgive?: boolean };

/**
 * Meters through billing's own verbs, as the domains do: recordUsage in a transaction (an event moved into the
 * past is moved before it is final, as time would have it), a forgiven interval through finishRuntime, and
 * settleUsage after the commit.
 */
async function seed(h: Harness, orgId: string, userId: string | null, seeds: Seed[]) {
  const ctx = systemCtx(h.deps, { userId: 'system', orgId, role: null, scopes: new Set(), apiKeyId: null });
  const ids = await withTx(ctx, async (tx) => {
    const out: string[] = [];
    for (const s of seeds) {
      const sourceId = src();
      const id = (await recordUsage(tx, { ...s.u, orgId, userId, sourceId } as UsageInput))!;
      out.push(id);
      if (s.daysAgo)
        await exec(tx)
          .updateTable('usage_events')
          .set({ created_at: new Date(Date.now() - s.daysAgo * 86_400_000).toISOString() })
          .where('id', '=', id)
          .execute();
      if (s.forgive && s.u.kind === 'sandbox_runtime') {
        const endedAt = new Date(Date.parse(s.u.startedAt) + s.u.seconds * 1000).toISOString();
        expect(await finishRuntime(tx, orgId, sourceId, { endedAt, outcome: 'forgiven' })).toBe(id);
      }
    }
    return out;
  });
  await settleUsage(h.deps, { ids: ids.filter((_, i) => seeds[i]!.settle !== false) });
}

const model = (m: string, tier: 'platform' | 'byok', t: ReturnType<typeof tokens>, pricing = GPT) => ({
  kind: 'model_tokens' as const,
  model: m,
  tier,
  modelClass: null,
  pricing,
  tokens: t,
});
const tool = (slug: string, succeeded = true) => ({ kind: 'tool_execution' as const, tool: slug, succeeded });
const runtime = (sandboxId: string, seconds: number, cpu: number, memoryMb: number, state: 'due' | 'pending', startedAgoS = seconds) => ({
  kind: 'sandbox_runtime' as const,
  sandboxId,
  cpu,
  memoryMb,
  seconds,
  startedAt: new Date(Date.now() - startedAgoS * 1000).toISOString(),
  endedAt: state === 'due' ? new Date().toISOString() : null,
  state,
});

const zero = { costMicros: 0, costCents: 0 };
const emptyRuntime = { intervals: 0, seconds: 0, ...zero };

describe('GET /v1/billing/my-usage', () => {
  let h: Harness;
  let admin: Actor;
  let member: Actor;
  let other: Actor;
  const tenDaysAgoInPeriod = Date.now() - 10 * 86_400_000 >= Date.parse(periodOf().start);
  beforeAll(async () => {
    h = await createHarness({ HANGAR_BILLING_SETTLE_MS: '3600000' });
    admin = await createOrgAdmin(h);
    member = await addOrgMember(h, admin, 'member');
    other = await createOrgAdmin(h);
    await seed(h, admin.orgId, admin.userId, [
      { u: model('gpt-x', 'platform', tokens(1000, 500, 200, 50)) }, // 800*3 + 200*0.3 + 500*15 = 9960
      { u: model('gpt-x', 'platform', tokens(100, 100)) }, // 300 + 1500 = 1800
      { u: model('claude-y', 'byok', tokens(400, 100)) },
      { u: tool('weather') },
      { u: tool('weather') },
      { u: tool('search', false) },
      { u: { kind: 'code_execution', language: 'python', cpuSeconds: 2 } }, // 100
      { u: runtime('sbx_1', 100, 1, 1024, 'due') }, // 100 * (14 + 4.5) = 1850
      { u: runtime('sbx_2', 10, 1, 1024, 'due'), settle: false }, // 185, awaiting the charge
      { u: runtime('sbx_3', 60, 2, 2048, 'pending', 120) }, // 60 * (28 + 9) = 2220 so far, running for 120 s
      { u: runtime('sbx_4', 20, 1, 1024, 'pending'), settle: false, forgive: true }, // 370, forgiven
      { u: tool('weather'), daysAgo: 40 },
    ]);
    await seed(h, admin.orgId, member.userId, [
      { u: model('gpt-x', 'platform', tokens(100, 100)) },
      { u: tool('weather') },
      { u: tool('weather'), daysAgo: 10 },
    ]);
    await seed(h, admin.orgId, null, [
      {
        u: {
          kind: 'storage',
          byteSeconds: GIB * 86_400,
          startedAt: new Date(Date.now() - 86_400_000).toISOString(),
          endedAt: new Date().toISOString(),
        },
      },
    ]);
    await seed(h, other.orgId, other.userId, [{ u: model('gpt-x', 'platform', tokens(5000, 5000)) }, { u: tool('secret-tool') }]);
  });
  afterAll(() => h.close());

  const get = async (actor: Actor | Record<string, string>, query = '') => {
    const headers = 'headers' in actor ? (actor as Actor).headers : (actor as Record<string, string>);
    return h.app.inject({ method: 'GET', url: `/v1/billing/my-usage${query}`, headers });
  };

  const adminRows = {
    tokens: { inputTokens: 1100, outputTokens: 600, totalTokens: 1700 },
    modelUsage: [
      {
        model: 'claude-y',
        tier: 'byok',
        calls: 1,
        inputTokens: 400,
        outputTokens: 100,
        cachedInputTokens: 0,
        reasoningTokens: 0,
        totalTokens: 500,
        ...zero,
      },
      {
        model: 'gpt-x',
        tier: 'platform',
        calls: 2,
        inputTokens: 1100,
        outputTokens: 600,
        cachedInputTokens: 200,
        reasoningTokens: 50,
        totalTokens: 1700,
        costMicros: 11_760,
        costCents: 1,
      },
    ],
    sandboxRuntime: {
      settled: { intervals: 1, seconds: 100, costMicros: 1850, costCents: 0 },
      pending: { intervals: 1, seconds: 10, costMicros: 185, costCents: 0 },
      forgiven: { intervals: 1, seconds: 20, costMicros: 370, costCents: 0 },
      active: {
        sandboxes: 1,
        recordedSeconds: 60,
        recordedCostMicros: 2220,
        estimatedSeconds: expect.any(Number),
        estimatedCostMicros: expect.any(Number),
        estimatedCostCents: 0,
      },
    },
    storageUsage: { byteSeconds: 0, gibHours: 0, charges: 0, ...zero },
    toolExecutions: {
      count: 3,
      costMicros: 2000,
      costCents: 0,
      byTool: [
        { tool: 'search', count: 1, ...zero },
        { tool: 'weather', count: 2, costMicros: 2000, costCents: 0 },
      ],
    },
    resourceCharges: [{ kind: 'code_execution', subject: 'python', count: 1, quantity: 2, unit: 'cpu_seconds', costMicros: 100, costCents: 0 }],
    // 11,760 + 2,000 + 100 + 1,850 + 185 + 2,220 (running, as recorded); not the forgiven 370 nor the BYOK call.
    totalCostMicros: 18_115,
    totalCostCents: 2,
  };

  const memberRows = (tenDays: boolean) => ({
    tokens: { inputTokens: 100, outputTokens: 100, totalTokens: 200 },
    modelUsage: [
      {
        model: 'gpt-x',
        tier: 'platform',
        calls: 1,
        inputTokens: 100,
        outputTokens: 100,
        cachedInputTokens: 0,
        reasoningTokens: 0,
        totalTokens: 200,
        costMicros: 1800,
        costCents: 0,
      },
    ],
    sandboxRuntime: {
      settled: emptyRuntime,
      pending: emptyRuntime,
      forgiven: emptyRuntime,
      active: { sandboxes: 0, recordedSeconds: 0, recordedCostMicros: 0, estimatedSeconds: 0, estimatedCostMicros: 0, estimatedCostCents: 0 },
    },
    storageUsage: { byteSeconds: 0, gibHours: 0, charges: 0, ...zero },
    toolExecutions: {
      count: tenDays ? 2 : 1,
      costMicros: tenDays ? 2000 : 1000,
      costCents: 0,
      byTool: [{ tool: 'weather', count: tenDays ? 2 : 1, costMicros: tenDays ? 2000 : 1000, costCents: 0 }],
    },
    resourceCharges: [],
    totalCostMicros: tenDays ? 3800 : 2800,
    totalCostCents: 0,
  });

  it('an admin sees their own usage for the billing period by default, row by row', async () => {
    const res = await get(admin);
    expect(res.statusCode).toBe(200);
    const body = json(res).data;
    const p = periodOf();
    expect(body).toEqual({ period: { name: 'current', start: p.start, end: p.end }, userId: admin.userId, ...adminRows });
    // The running sandbox: 120 s since it started, at the rate recorded so far (2,220 micros for 60 s).
    const active = body.sandboxRuntime.active;
    expect(active.estimatedSeconds).toBeGreaterThanOrEqual(120);
    expect(active.estimatedSeconds).toBeLessThan(150);
    expect(active.estimatedCostMicros).toBeGreaterThanOrEqual(4440);
    expect(active.estimatedCostMicros).toBeLessThan(5550);
  });

  it('calls with the customer’s own key count their tokens but cost nothing', async () => {
    const body = json(await get(admin)).data;
    const byok = body.modelUsage.find((m: { tier: string }) => m.tier === 'byok');
    expect(byok).toMatchObject({ model: 'claude-y', inputTokens: 400, outputTokens: 100, costMicros: 0, costCents: 0 });
    expect(body.tokens.inputTokens).toBe(1100); // platform tokens only
  });

  it('a member sees only their own usage', async () => {
    const res = await get(member, '?period=30d');
    expect(res.statusCode).toBe(200);
    const body = json(res).data;
    expect(body).toEqual({ period: { name: '30d', start: expect.any(String), end: expect.any(String) }, userId: member.userId, ...memberRows(true) });
    expect(Date.parse(body.period.end) - Date.parse(body.period.start)).toBe(30 * 86_400_000);
    // By session token too.
    const bySession = json(await get({ authorization: `Bearer ${member.token}` }, '?period=30d')).data;
    expect(bySession.userId).toBe(member.userId);
    expect(bySession.totalCostMicros).toBe(3800);
  });

  it('the period filters by when the usage was recorded', async () => {
    const memberTools = async (period: string) => json(await get(member, `?period=${period}`)).data.toolExecutions.count;
    expect(await memberTools('7d')).toBe(1);
    expect(await memberTools('30d')).toBe(2);
    expect(await memberTools('current')).toBe(tenDaysAgoInPeriod ? 2 : 1);
    expect(await memberTools('all_time')).toBe(2);

    const adminTools = async (period: string) => json(await get(admin, `?period=${period}`)).data.toolExecutions;
    for (const p of ['current', '7d', '30d']) expect((await adminTools(p)).count, p).toBe(3);
    const all = await adminTools('all_time');
    expect(all).toEqual({
      count: 4,
      costMicros: 3000,
      costCents: 0,
      byTool: [
        { tool: 'search', count: 1, ...zero },
        { tool: 'weather', count: 3, costMicros: 3000, costCents: 0 },
      ],
    });
    const allTime = json(await get(admin, '?period=all_time')).data;
    expect(allTime.period).toEqual({ name: 'all_time', start: null, end: expect.any(String) });
    expect(allTime.totalCostMicros).toBe(19_115);
  });

  it('a member may not ask for everyone’s usage', async () => {
    for (const headers of [member.headers, { authorization: `Bearer ${member.token}` }]) {
      const res = await get(headers, '?all=true');
      expect(res.statusCode).toBe(403);
      expect(json(res).error.code).toBe('forbidden');
      expect(json(res).error.message).toContain('billing:read');
    }
    // all=false is the member's own view.
    expect((await get(member, '?all=false')).statusCode).toBe(200);
  });

  it('an admin key without billing:read reads its own usage but not everyone’s', async () => {
    const key = await keyFor(h, admin, ['usage:read']);
    expect(json(await get({ 'x-api-key': key })).data.totalCostMicros).toBe(18_115);
    expect((await get({ 'x-api-key': key }, '?all=true')).statusCode).toBe(403);
  });

  it('all=true: each member’s rows and the organization’s totals, which add up', async () => {
    const res = await get(admin, '?all=true&period=30d');
    expect(res.statusCode).toBe(200);
    const body = json(res).data;
    expect(body.period.name).toBe('30d');
    const members = [
      { userId: admin.userId, email: expect.stringContaining('@example.test'), ...adminRows },
      { userId: member.userId, email: expect.stringContaining('@example.test'), ...memberRows(true) },
    ].sort((a, b) => (a.userId < b.userId ? -1 : 1));
    expect(body.members).toEqual(members);
    const [a, m] = [
      body.members.find((x: { userId: string }) => x.userId === admin.userId),
      body.members.find((x: { userId: string }) => x.userId === member.userId),
    ];
    // The members' rows equal their own views.
    const { period: _p, ...ownView } = json(await get(admin, '?period=30d')).data;
    const steady = (r: typeof a) => ({
      ...r,
      sandboxRuntime: { ...r.sandboxRuntime, active: { ...r.sandboxRuntime.active, estimatedSeconds: 0, estimatedCostMicros: 0 } },
    });
    expect(steady(a)).toEqual(steady({ email: a.email, ...ownView }));
    const org = body.organization;
    // Storage belongs to the organization: 1 GiB for a day = 24 GiB-hours, 100,000 micros a GiB-month / 30.
    expect(org.storageUsage).toEqual({ byteSeconds: GIB * 86_400, gibHours: 24, charges: 1, costMicros: 3333, costCents: 0 });
    expect(org.totalCostMicros).toBe(a.totalCostMicros + m.totalCostMicros + 3333);
    expect(org.tokens).toEqual({ inputTokens: 1200, outputTokens: 700, totalTokens: 1900 });
    expect(org.modelUsage).toEqual([
      adminRows.modelUsage[0],
      {
        model: 'gpt-x',
        tier: 'platform',
        calls: 3,
        inputTokens: 1200,
        outputTokens: 700,
        cachedInputTokens: 200,
        reasoningTokens: 50,
        totalTokens: 1900,
        costMicros: 13_560,
        costCents: 1,
      },
    ]);
    expect(org.toolExecutions).toEqual({
      count: 5,
      costMicros: 4000,
      costCents: 0,
      byTool: [
        { tool: 'search', count: 1, ...zero },
        { tool: 'weather', count: 4, costMicros: 4000, costCents: 0 },
      ],
    });
    expect(org.sandboxRuntime).toEqual(adminRows.sandboxRuntime);
    expect(org.resourceCharges).toEqual(adminRows.resourceCharges);
  });

  it('another organization’s usage never appears', async () => {
    // Control: the other organization's owner sees their own usage.
    const own = json(await get(other)).data;
    expect(own.userId).toBe(other.userId);
    expect(own.tokens).toEqual({ inputTokens: 5000, outputTokens: 5000, totalTokens: 10_000 });
    expect(own.toolExecutions.byTool).toEqual([{ tool: 'secret-tool', count: 1, costMicros: 1000, costCents: 0 }]);
    const ownAll = json(await get(other, '?all=true')).data;
    expect(ownAll.members.map((x: { userId: string }) => x.userId)).toEqual([other.userId]);
    expect(ownAll.organization.storageUsage.byteSeconds).toBe(0);

    const mine = json(await get(admin, '?all=true&period=all_time')).data;
    expect(mine.members.map((x: { userId: string }) => x.userId).sort()).toEqual([admin.userId, member.userId].sort());
    expect(JSON.stringify(mine)).not.toContain('secret-tool');
    expect(mine.organization.tokens.inputTokens).toBe(1200);
  });

  it('a rolling window counts its first, partial day exactly (final events there are read one by one), and unsettled events too', async () => {
    const fresh = await createOrgAdmin(h);
    const minutes = 60_000 / 86_400_000; // one minute in days
    await seed(h, fresh.orgId, fresh.userId, [
      { u: tool('weather'), daysAgo: 7 - 15 * minutes }, // inside 7d, on the window's first day (or the next)
      { u: tool('weather'), daysAgo: 7 + 15 * minutes }, // just outside 7d
      { u: tool('weather'), daysAgo: 3 }, // a whole day inside: from the daily sums
      { u: tool('weather'), settle: false }, // due: not final yet
    ]);
    const count = async (period: string) => json(await get(fresh, `?period=${period}`)).data.toolExecutions.count;
    expect(await count('all_time')).toBe(4);
    expect(await count('7d')).toBe(3);
    expect(await count('30d')).toBe(4);
  });

  it('an organization with no usage has zero rows', async () => {
    const fresh = await createOrgAdmin(h);
    const body = json(await get(fresh, '?all=true')).data;
    expect(body.members).toEqual([]);
    expect(body.organization).toEqual({
      ...memberRows(false),
      tokens: { inputTokens: 0, outputTokens: 0, totalTokens: 0 },
      modelUsage: [],
      toolExecutions: { count: 0, ...zero, byTool: [] },
      totalCostMicros: 0,
      totalCostCents: 0,
    });
  });

  it('daily=true: the same usage by UTC day, every day of the window up to today, adding up to the rows', async () => {
    expect(json(await get(member, '?period=30d')).data.days).toBeUndefined();
    const body = json(await get(member, '?period=30d&daily=true')).data;
    const days = body.days as { day: string; totalTokens: number; toolExecutions: number; costMicros: number; sandboxSeconds: number }[];
    expect(days).toHaveLength(31);
    expect(days.at(-1)!.day).toBe(new Date().toISOString().slice(0, 10));
    expect(days[0]!.day).toBe(body.period.start.slice(0, 10));
    const sum = (k: 'totalTokens' | 'toolExecutions' | 'costMicros') => days.reduce((n, d) => n + d[k], 0);
    expect(sum('toolExecutions')).toBe(body.toolExecutions.count);
    expect(sum('totalTokens')).toBe(body.tokens.totalTokens);
    expect(sum('costMicros')).toBe(body.totalCostMicros);
    // The tool call made ten days ago is on its own day.
    const tenAgo = new Date(Date.now() - 10 * 86_400_000).toISOString().slice(0, 10);
    expect(days.find((d) => d.day === tenAgo)?.toolExecutions).toBe(1);

    // The organization's, for an admin: tokens add up to the organization's, and the running sandbox counts today.
    const org = json(await get(admin, '?all=true&daily=true')).data;
    expect(org.days.reduce((n: number, d: { totalTokens: number }) => n + d.totalTokens, 0)).toBe(org.organization.tokens.totalTokens);
    expect(org.days.at(-1).sandboxSeconds).toBeGreaterThanOrEqual(120);
    // Another organization's usage is in none of it (its owner's own days hold it: the control).
    const others = json(await get(other, '?daily=true')).data.days;
    expect(others.reduce((n: number, d: { totalTokens: number }) => n + d.totalTokens, 0)).toBe(10_000);
    expect(org.organization.tokens.totalTokens).toBeLessThan(10_000);
  });

  it('validates the query', async () => {
    for (const q of ['?period=month', '?period=', '?all=yes', '?all=1', '?daily=1']) {
      const res = await get(admin, q);
      expect(res.statusCode, q).toBe(400);
      expect(json(res).error.code).toBe('invalid_request');
    }
  });
});

securitySuite('billing usage', [{ method: 'GET', url: () => '/v1/billing/my-usage', scope: 'usage:read' }]);
