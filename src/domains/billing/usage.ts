/**
 * Usage rows (GET /v1/billing/my-usage): what the meter (`usage_events`) recorded for the caller, or for every
 * member and the organization, over a period. One GROUP BY over the organization's events in the period (by user,
 * kind, model/tool/language, tier and state), folded into the rows here: the rows themselves are never loaded.
 */
import { sql } from 'kysely';
import type { z } from 'zod';
import { exec, orgId, requireScope, type Ctx } from '../../platform/context.js';
import { userProfiles } from '../identity/index.js';
import { MICROS_PER_CENT } from './ledger.js';
import { GIB, periodOf } from './plans.js';
import type { UsageDay, UsagePeriodName, UsageReport, UsageRows } from './usage-schemas.js';

const DAY_MS = 86_400_000;

/** The period's window: the billing period (calendar month, UTC), the last 7 or 30 days, or everything. */
export function usageWindow(name: UsagePeriodName, now = new Date()): { name: UsagePeriodName; start: string | null; end: string } {
  switch (name) {
    case 'current': {
      const p = periodOf(now);
      return { name, start: p.start, end: p.end };
    }
    case '7d':
    case '30d':
      return { name, start: new Date(now.getTime() - (name === '7d' ? 7 : 30) * DAY_MS).toISOString(), end: now.toISOString() };
    case 'all_time':
      return { name, start: null, end: now.toISOString() };
  }
}

const cents = (micros: number) => Math.round(micros / MICROS_PER_CENT);
const money = (micros: number) => ({ costMicros: micros, costCents: cents(micros) });

interface Group {
  user_id: string | null;
  kind: string;
  subject: string;
  tier: string;
  state: string;
  events: number | string;
  input_tokens: number | string;
  output_tokens: number | string;
  cached_input_tokens: number | string;
  reasoning_tokens: number | string;
  quantity: number | string;
  cost_micros: number | string;
}

/** Sums in micro-dollars and counts, built up from groups, then shaped as the API's rows. */
class RowsBuilder {
  private tokens = { inputTokens: 0, outputTokens: 0 };
  private models = new Map<
    string,
    {
      model: string;
      tier: 'platform' | 'byok';
      calls: number;
      inputTokens: number;
      outputTokens: number;
      cachedInputTokens: number;
      reasoningTokens: number;
      micros: number;
    }
  >();
  private sandbox = {
    settled: { intervals: 0, seconds: 0, micros: 0 },
    pending: { intervals: 0, seconds: 0, micros: 0 },
    forgiven: { intervals: 0, seconds: 0, micros: 0 },
    active: { sandboxes: 0, recordedSeconds: 0, recordedMicros: 0, estimatedSeconds: 0, estimatedMicros: 0 },
  };
  private storage = { byteSeconds: 0, micros: 0, charges: 0 };
  private tools = new Map<string, { count: number; micros: number }>();
  private resources = new Map<string, { kind: 'code_execution'; subject: string; count: number; quantity: number; micros: number }>();
  private total = 0;

  add(g: Group): void {
    const n = Number(g.events);
    // Forgiven events are never charged; the meter prices a customer's own key at zero, and the rows say so whatever.
    const micros = g.state === 'forgiven' || (g.kind === 'model_tokens' && g.tier === 'byok') ? 0 : Number(g.cost_micros);
    const quantity = Number(g.quantity);
    this.total += micros;
    switch (g.kind) {
      case 'model_tokens': {
        const tier = g.tier === 'byok' ? 'byok' : 'platform';
        const input = Number(g.input_tokens);
        const output = Number(g.output_tokens);
        if (tier === 'platform') {
          this.tokens.inputTokens += input;
          this.tokens.outputTokens += output;
        }
        const k = `${g.subject}\n${tier}`;
        const m = this.models.get(k) ?? {
          model: g.subject,
          tier,
          calls: 0,
          inputTokens: 0,
          outputTokens: 0,
          cachedInputTokens: 0,
          reasoningTokens: 0,
          micros: 0,
        };
        m.calls += n;
        m.inputTokens += input;
        m.outputTokens += output;
        m.cachedInputTokens += Number(g.cached_input_tokens);
        m.reasoningTokens += Number(g.reasoning_tokens);
        m.micros += micros;
        this.models.set(k, m);
        return;
      }
      case 'sandbox_runtime': {
        if (g.state === 'pending') {
          const a = this.sandbox.active;
          a.sandboxes += n;
          a.recordedSeconds += quantity;
          a.recordedMicros += micros;
          return;
        }
        const bucket = g.state === 'settled' ? this.sandbox.settled : g.state === 'forgiven' ? this.sandbox.forgiven : this.sandbox.pending;
        bucket.intervals += n;
        bucket.seconds += quantity;
        // Forgiven intervals show what they would have cost.
        bucket.micros += Number(g.cost_micros);
        return;
      }
      case 'storage':
        this.storage.byteSeconds += quantity;
        this.storage.micros += micros;
        this.storage.charges += n;
        return;
      case 'tool_execution': {
        const t = this.tools.get(g.subject) ?? { count: 0, micros: 0 };
        t.count += n;
        t.micros += micros;
        this.tools.set(g.subject, t);
        return;
      }
      case 'code_execution': {
        const r = this.resources.get(g.subject) ?? { kind: 'code_execution' as const, subject: g.subject, count: 0, quantity: 0, micros: 0 };
        r.count += n;
        r.quantity += quantity;
        r.micros += micros;
        this.resources.set(g.subject, r);
        return;
      }
    }
  }

  /** The running sandboxes' estimate to now (`activeByUser`). */
  addActive(a: { seconds: number; micros: number } | undefined): void {
    if (!a) return;
    this.sandbox.active.estimatedSeconds += a.seconds;
    this.sandbox.active.estimatedMicros += a.micros;
  }

  rows(): UsageRows {
    const s = this.sandbox;
    const byName = <T>(a: [string, T][]) => a.sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0));
    const tools = byName([...this.tools]);
    return {
      tokens: { ...this.tokens, totalTokens: this.tokens.inputTokens + this.tokens.outputTokens },
      modelUsage: byName([...this.models]).map(([, m]) => ({
        model: m.model,
        tier: m.tier,
        calls: m.calls,
        inputTokens: m.inputTokens,
        outputTokens: m.outputTokens,
        cachedInputTokens: m.cachedInputTokens,
        reasoningTokens: m.reasoningTokens,
        totalTokens: m.inputTokens + m.outputTokens,
        ...money(m.micros),
      })),
      sandboxRuntime: {
        settled: { intervals: s.settled.intervals, seconds: s.settled.seconds, ...money(s.settled.micros) },
        pending: { intervals: s.pending.intervals, seconds: s.pending.seconds, ...money(s.pending.micros) },
        forgiven: { intervals: s.forgiven.intervals, seconds: s.forgiven.seconds, ...money(s.forgiven.micros) },
        active: {
          sandboxes: s.active.sandboxes,
          recordedSeconds: s.active.recordedSeconds,
          recordedCostMicros: s.active.recordedMicros,
          estimatedSeconds: Math.round(s.active.estimatedSeconds),
          estimatedCostMicros: Math.round(s.active.estimatedMicros),
          estimatedCostCents: cents(Math.round(s.active.estimatedMicros)),
        },
      },
      storageUsage: {
        byteSeconds: this.storage.byteSeconds,
        gibHours: Math.round((this.storage.byteSeconds / GIB / 3600) * 1000) / 1000,
        charges: this.storage.charges,
        ...money(this.storage.micros),
      },
      toolExecutions: {
        count: tools.reduce((a, [, t]) => a + t.count, 0),
        ...money(tools.reduce((a, [, t]) => a + t.micros, 0)),
        byTool: tools.map(([tool, t]) => ({ tool, count: t.count, ...money(t.micros) })),
      },
      resourceCharges: byName([...this.resources]).map(([, r]) => ({
        kind: r.kind,
        subject: r.subject,
        count: r.count,
        quantity: r.quantity,
        unit: 'cpu_seconds' as const,
        ...money(r.micros),
      })),
      totalCostMicros: this.total,
      totalCostCents: cents(this.total),
    };
  }
}

/** Seconds since `started_at` at `now` (dialect SQL: ISO text times in both). */
function elapsedSince(ctx: Ctx, now: string) {
  return ctx.deps.db.dialect === 'postgres'
    ? sql<number>`greatest(0, extract(epoch from (${now}::timestamptz - started_at::timestamptz)))`
    : sql<number>`max(0.0, (julianday(${now}) - julianday(started_at)) * 86400.0)`;
}

type Scope = { org: string; start: string | null; userId: string | null };

const SUMS = [
  sql<number>`sum(input_tokens)`.as('input_tokens'),
  sql<number>`sum(output_tokens)`.as('output_tokens'),
  sql<number>`sum(cached_input_tokens)`.as('cached_input_tokens'),
  sql<number>`sum(reasoning_tokens)`.as('reasoning_tokens'),
  sql<number>`sum(quantity)`.as('quantity'),
  sql<number>`sum(cost_micros)`.as('cost_micros'),
];

/** The start of the UTC day after `iso` (itself when it is a day's start). */
function nextDay(iso: string): string {
  const d = new Date(iso);
  const day = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
  return new Date(day === d.getTime() ? day : day + DAY_MS).toISOString();
}

/**
 * The meter's events grouped as the rows need them, from three reads that never touch every event:
 * final events (settled, forgiven) of whole days from the daily sums (`usage_rollups`); final events of the window's
 * first, partial day (7d, 30d) from the events themselves; and events not final yet (pending, due: few) through
 * the (org_id, state, created_at) index.
 */
async function groups(ctx: Ctx, s: Scope): Promise<Group[]> {
  // Sandbox ids and storage are not grouped by subject: one group per state whatever the number of sandboxes.
  const subject = sql<string>`case when kind in ('model_tokens', 'tool_execution', 'code_execution') then subject else '' end`;
  const fromDay = s.start === null ? null : nextDay(s.start);
  let sums = exec(ctx)
    .selectFrom('usage_rollups')
    .select([
      sql<string | null>`case when user_id = '' then null else user_id end`.as('user_id'),
      'kind',
      'subject',
      'tier',
      'state',
      sql<number>`sum(events)`.as('events'),
      ...SUMS,
    ])
    .where('org_id', '=', s.org);
  if (s.userId !== null) sums = sums.where('user_id', '=', s.userId);
  if (fromDay !== null) sums = sums.where('day', '>=', fromDay.slice(0, 10));
  const events = (states: ('pending' | 'due' | 'settled' | 'forgiven')[], from: string | null, before: string | null) => {
    let q = exec(ctx)
      .selectFrom('usage_events')
      .select(['user_id', 'kind', subject.as('subject'), 'tier', 'state', sql<number>`count(*)`.as('events'), ...SUMS])
      .where('org_id', '=', s.org)
      .where('state', 'in', states);
    if (s.userId !== null) q = q.where('user_id', '=', s.userId);
    if (from !== null) q = q.where('created_at', '>=', from);
    if (before !== null) q = q.where('created_at', '<', before);
    return q.groupBy(['user_id', 'kind', subject, 'tier', 'state']).execute();
  };
  const [rolled, open, edge] = await Promise.all([
    sums.groupBy([sql`case when user_id = '' then null else user_id end`, 'kind', 'subject', 'tier', 'state']).execute(),
    events(['pending', 'due'], s.start, null),
    s.start !== null && fromDay !== s.start ? events(['settled', 'forgiven'], s.start, fromDay) : Promise.resolve([]),
  ]);
  return [...rolled, ...open, ...edge] as Group[];
}

/**
 * Running sandboxes (pending runtime events), by user: seconds since each started, and its cost to now at the rate it
 * has recorded so far (cost / seconds; its recorded cost while it has no seconds yet). A query of its own, so the
 * main one does no per-row arithmetic.
 */
async function activeByUser(ctx: Ctx, s: Scope, now: string): Promise<Map<string | null, { seconds: number; micros: number }>> {
  const elapsed = elapsedSince(ctx, now);
  let q = exec(ctx)
    .selectFrom('usage_events')
    .select([
      'user_id',
      sql<number>`sum(${elapsed})`.as('seconds'),
      sql<number>`sum(case when quantity > 0 then cost_micros * ${elapsed} / quantity else cost_micros end)`.as('micros'),
    ])
    .where('org_id', '=', s.org)
    .where('state', '=', 'pending')
    .where('kind', '=', 'sandbox_runtime');
  if (s.userId !== null) q = q.where('user_id', '=', s.userId);
  if (s.start !== null) q = q.where('created_at', '>=', s.start);
  const rows = await q.groupBy('user_id').execute();
  return new Map(rows.map((r) => [r.user_id, { seconds: Number(r.seconds), micros: Number(r.micros) }]));
}

/**
 * Usage by UTC day over the window (`daily=true`): final events from the daily sums (`usage_rollups`, whole days),
 * events not final yet (pending, due: few) from the events themselves, and running sandboxes' time to now on the day
 * they started. Every day from the window's first (or the first with usage, for all_time) to today, zeros included.
 */
async function dailyUsage(ctx: Ctx, s: Scope, now: Date, active: number): Promise<z.infer<typeof UsageDay>[]> {
  const firstDay = s.start?.slice(0, 10) ?? null;
  const cols = [
    'kind',
    sql<number>`sum(case when kind = 'model_tokens' and tier = 'platform' then input_tokens else 0 end)`.as('input_tokens'),
    sql<number>`sum(case when kind = 'model_tokens' and tier = 'platform' then output_tokens else 0 end)`.as('output_tokens'),
    sql<number>`sum(quantity)`.as('quantity'),
    sql<number>`sum(case when state = 'forgiven' or (kind = 'model_tokens' and tier = 'byok') then 0 else cost_micros end)`.as('cost_micros'),
  ] as const;
  let rolled = exec(ctx)
    .selectFrom('usage_rollups')
    .select(['day', sql<number>`sum(events)`.as('events'), ...cols])
    .where('org_id', '=', s.org);
  if (s.userId !== null) rolled = rolled.where('user_id', '=', s.userId);
  if (firstDay !== null) rolled = rolled.where('day', '>=', firstDay);
  const day = sql<string>`substr(created_at, 1, 10)`;
  // A running sandbox's pending event holds the seconds recorded so far: its time to now is `active`, added below.
  const openCols = [
    ...cols.slice(0, 3),
    sql<number>`sum(case when kind = 'sandbox_runtime' and state = 'pending' then 0 else quantity end)`.as('quantity'),
    cols[4],
  ] as const;
  let open = exec(ctx)
    .selectFrom('usage_events')
    .select([day.as('day'), sql<number>`count(*)`.as('events'), ...openCols])
    .where('org_id', '=', s.org)
    .where('state', 'in', ['pending', 'due']);
  if (s.userId !== null) open = open.where('user_id', '=', s.userId);
  if (firstDay !== null) open = open.where('created_at', '>=', `${firstDay}T00:00:00.000Z`);
  const [a, b] = await Promise.all([rolled.groupBy(['day', 'kind']).execute(), open.groupBy([day, 'kind']).execute()]);
  const byDay = new Map<string, z.infer<typeof UsageDay>>();
  const entry = (d: string) => {
    let e = byDay.get(d);
    if (!e) {
      e = { day: d, inputTokens: 0, outputTokens: 0, totalTokens: 0, sandboxSeconds: 0, toolExecutions: 0, codeExecutions: 0, costMicros: 0 };
      byDay.set(d, e);
    }
    return e;
  };
  for (const r of [...a, ...b]) {
    const e = entry(String(r.day));
    e.inputTokens += Number(r.input_tokens);
    e.outputTokens += Number(r.output_tokens);
    e.costMicros += Number(r.cost_micros);
    if (r.kind === 'sandbox_runtime') e.sandboxSeconds += Number(r.quantity);
    if (r.kind === 'tool_execution') e.toolExecutions += Number(r.events);
    if (r.kind === 'code_execution') e.codeExecutions += Number(r.events);
  }
  const today = now.toISOString().slice(0, 10);
  // Running sandboxes: their time so far beyond what they recorded, on today (the chart's "now").
  if (active > 0) entry(today).sandboxSeconds += active;
  const start = firstDay ?? [...byDay.keys()].sort()[0] ?? today;
  const days: z.infer<typeof UsageDay>[] = [];
  for (let t = Date.parse(`${start}T00:00:00Z`); t <= Date.parse(`${today}T00:00:00Z`); t += DAY_MS) {
    const e = entry(new Date(t).toISOString().slice(0, 10));
    e.totalTokens = e.inputTokens + e.outputTokens;
    e.sandboxSeconds = Math.round(e.sandboxSeconds);
    days.push(e);
  }
  return days;
}

/**
 * The caller's usage over the period, or (`all`, organization admins) every member's and the organization's
 * totals, which also hold what no member caused (workspace storage). Reads only the meter.
 */
export async function getMyUsage(ctx: Ctx, input: { period: UsagePeriodName; all: boolean; daily?: boolean }): Promise<UsageReport> {
  requireScope(ctx, 'usage:read');
  const org = orgId(ctx);
  // Everyone's usage is billing data: organization admins' `billing:read`.
  if (input.all) requireScope(ctx, 'billing:read');
  const now = new Date();
  const window = usageWindow(input.period, now);
  const period = { name: window.name, start: window.start, end: window.end };
  const me = ctx.principal.userId;
  const scope: Scope = { org, start: window.start, userId: input.all ? null : me };
  const [rows, active] = await Promise.all([groups(ctx, scope), activeByUser(ctx, scope, now.toISOString())]);
  const activeSeconds = input.all ? [...active.values()].reduce((n, a) => n + a.seconds, 0) : (active.get(me)?.seconds ?? 0);
  const days = input.daily ? { days: await dailyUsage(ctx, scope, now, activeSeconds) } : {};
  if (!input.all) {
    const mine = new RowsBuilder();
    for (const g of rows) mine.add(g);
    mine.addActive(active.get(me));
    return { period, userId: me, ...days, ...mine.rows() };
  }
  const organization = new RowsBuilder();
  const byUser = new Map<string, RowsBuilder>();
  for (const g of rows) {
    organization.add(g);
    if (g.user_id === null) continue;
    const b = byUser.get(g.user_id) ?? new RowsBuilder();
    byUser.set(g.user_id, b);
    b.add(g);
  }
  for (const [userId, a] of active) {
    organization.addActive(a);
    if (userId !== null) byUser.get(userId)?.addActive(a);
  }
  const profiles = await userProfiles(ctx, [...byUser.keys()]);
  const members = [...byUser.keys()].sort().map((userId) => ({ userId, email: profiles.get(userId)?.email ?? null, ...byUser.get(userId)!.rows() }));
  return { period, ...days, members, organization: organization.rows() };
}
