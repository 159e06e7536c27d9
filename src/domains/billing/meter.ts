/**
 * The meter and the one charging path (ADR 0028).
 *
 * A domain meters in its own transaction, beside its own record: `recordUsage` writes one `usage_events` row,
 * unique by (kind, source_id), priced by the organization's plan, `due` (a finished call) or `pending` (a
 * sandbox still running). After its commit the domain calls `settleUsage`, which moves due events into the
 * ledger: one `usage_charge` entry per event, whose id and idempotency key are the event's, so a retry, two
 * replicas or a sweep after a crash charge it once. The sweep (`jobs.ts`) settles what a crash left due.
 *
 * With HANGAR_BILLING=off everything is metered and priced the same (usage rows show it), and settling marks
 * events settled without a ledger entry.
 */
import { sql } from 'kysely';
import type { UsageKind, UsageRollupsTable } from '../../database.js';
import { recordActivity } from '../activity/index.js';
import { exec, systemCtx, type Ctx, type Deps } from '../../platform/context.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { accountRow, ensureAccount, MICROS_PER_CENT, postEntries, type AccountAfter, type LedgerEntryInput } from './ledger.js';
import { GIB, MONTH_SECONDS, periodOf, planById, roundMicros, type Plan } from './plans.js';

type UsageRollupsRow = UsageRollupsTable;

export interface ModelPricing {
  inputPerMTok: number;
  outputPerMTok: number;
  cachedInputPerMTok: number;
}

export interface TokenCounts {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  reasoningTokens: number;
}

/** What a domain meters; each kind carries what its price needs. */
export type UsageInput = {
  orgId: string;
  userId: string | null;
  /** The metered record's id (the model_usage row, the sandbox_runtime interval, ...). */
  sourceId: string;
  metadata?: Record<string, unknown>;
} & (
  | {
      kind: 'model_tokens';
      model: string;
      tier: 'platform' | 'byok';
      /** The model's class (models file), looked up in the plan's `modelClasses`. */
      modelClass: string | null;
      /** The model's own catalogue price, used when the plan has none for its class. */
      pricing: ModelPricing | null;
      tokens: TokenCounts;
    }
  | { kind: 'tool_execution'; tool: string; succeeded: boolean }
  | { kind: 'code_execution'; language: string; cpuSeconds: number }
  | {
      kind: 'sandbox_runtime';
      sandboxId: string;
      cpu: number;
      memoryMb: number;
      /** Seconds run so far (an estimate while pending). */
      seconds: number;
      startedAt: string;
      endedAt: string | null;
      /** pending while the sandbox runs; due once the interval is closed. */
      state: 'pending' | 'due';
    }
  | { kind: 'storage'; byteSeconds: number; startedAt: string; endedAt: string }
);

/** Price of one metered record on a plan, in micro-dollars (unrounded). */
export function priceOf(plan: Plan, u: UsageInput): number {
  const p = plan.prices;
  switch (u.kind) {
    case 'model_tokens': {
      if (u.tier !== 'platform') return 0;
      const price = (u.modelClass ? p.modelClasses[u.modelClass] : undefined) ?? u.pricing;
      if (!price) return 0;
      const cachedPrice = price.cachedInputPerMTok ?? price.inputPerMTok;
      const uncached = Math.max(0, u.tokens.inputTokens - u.tokens.cachedInputTokens);
      // USD per million tokens x tokens = micro-dollars.
      return uncached * price.inputPerMTok + u.tokens.cachedInputTokens * cachedPrice + u.tokens.outputTokens * price.outputPerMTok;
    }
    case 'tool_execution':
      return u.succeeded ? (p.tools[u.tool] ?? p.toolExecutionMicros) : 0;
    case 'code_execution':
      return u.cpuSeconds * p.codeCpuSecondMicros;
    case 'sandbox_runtime':
      return u.seconds * (u.cpu * p.sandboxVcpuSecondMicros + (u.memoryMb / 1024) * p.sandboxGibSecondMicros);
    case 'storage':
      return (u.byteSeconds / GIB / MONTH_SECONDS) * p.storageGibMonthMicros;
  }
}

function columnsOf(u: UsageInput) {
  switch (u.kind) {
    case 'model_tokens':
      return {
        subject: u.model,
        tier: u.tier,
        input_tokens: u.tokens.inputTokens,
        output_tokens: u.tokens.outputTokens,
        cached_input_tokens: u.tokens.cachedInputTokens,
        reasoning_tokens: u.tokens.reasoningTokens,
        quantity: u.tokens.inputTokens + u.tokens.outputTokens,
      };
    case 'tool_execution':
      return { subject: u.tool, tier: 'platform' as const, quantity: 1 };
    case 'code_execution':
      return { subject: u.language, tier: 'platform' as const, quantity: u.cpuSeconds };
    case 'sandbox_runtime':
      // The size is kept with the event: re-estimating and finishing it (runtime.ts) price it again.
      return {
        subject: u.sandboxId,
        tier: 'platform' as const,
        quantity: u.seconds,
        started_at: u.startedAt,
        ended_at: u.endedAt,
        metadata: JSON.stringify({ ...u.metadata, cpu: u.cpu, memoryMb: u.memoryMb }),
      };
    case 'storage':
      return { subject: 'workspace', tier: 'platform' as const, quantity: u.byteSeconds, started_at: u.startedAt, ended_at: u.endedAt };
  }
}

/** The organization's plan (its account is opened on the default plan if it has none yet). */
export async function planOf(ctx: Ctx, org: string): Promise<Plan> {
  let row = await accountRow(ctx, org);
  if (!row) {
    await ensureAccount(ctx, org);
    row = await accountRow(ctx, org);
  }
  return planById(ctx.deps, row?.plan ?? ctx.deps.config.billing.defaultPlan);
}

/**
 * Meters one record inside the caller's transaction. Returns the event's id, or null when this record was
 * metered already (the same kind and source id). Call `settleUsage` after the commit.
 */
export async function recordUsage(ctx: Ctx, u: UsageInput): Promise<string | null> {
  const plan = await planOf(ctx, u.orgId);
  const now = nowIso();
  const id = prefixedId('use');
  const cols = columnsOf(u);
  const state = u.kind === 'sandbox_runtime' ? u.state : 'due';
  const res = await exec(ctx)
    .insertInto('usage_events')
    .values({
      id,
      org_id: u.orgId,
      user_id: u.userId,
      kind: u.kind,
      source_id: u.sourceId,
      input_tokens: 0,
      output_tokens: 0,
      cached_input_tokens: 0,
      reasoning_tokens: 0,
      cost_micros: roundMicros(priceOf(plan, u)),
      state,
      ledger_entry_id: null,
      metadata: u.metadata ? JSON.stringify(u.metadata) : null,
      started_at: now,
      ended_at: state === 'due' ? now : null,
      created_at: now,
      updated_at: now,
      ...cols,
    })
    .onConflict((oc) => oc.columns(['kind', 'source_id']).doNothing())
    .executeTakeFirst();
  return Number(res.numInsertedOrUpdatedRows ?? 0) > 0 ? id : null;
}

/** Finds the event metering a record (kind and source id), within the organization. */
export async function usageEventOf(ctx: Ctx, org: string, kind: UsageKind, sourceId: string) {
  return exec(ctx)
    .selectFrom('usage_events')
    .selectAll()
    .where('org_id', '=', org)
    .where('kind', '=', kind)
    .where('source_id', '=', sourceId)
    .executeTakeFirst();
}

const SETTLE_STATE = stateKey('billing-settle', () => ({
  /** `${org}:${period}:${plan}` whose plan grant this process has posted (the ledger's key makes a repeat a no-op anyway). */
  granted: new Set<string>(),
  /** Called after a commit that changed balances: exhaustion activity, auto top-up (registered by app.ts/billing). */
  afterCharge: [] as ((deps: Deps, accounts: AccountAfter[]) => Promise<void>)[],
}));

/** Registers work to do after a charge changed balances (auto top-up, exhaustion handling). */
export function onAfterCharge(deps: Deps, fn: (deps: Deps, accounts: AccountAfter[]) => Promise<void>): void {
  deps.state.get(SETTLE_STATE).afterCharge.push(fn);
}

/** Posts the plan's included credits for the current period, once per organization and period. */
export async function grantPeriodCredits(ctx: Ctx, org: string, at = new Date()): Promise<AccountAfter[]> {
  const period = periodOf(at);
  const slot = ctx.deps.state.get(SETTLE_STATE);
  const plan = await planOf(ctx, org);
  // Per plan in the cache (an organization moved from `free` to a paid plan mid-period gets that plan's credits);
  // once per period in the ledger (moving back and forth does not pay twice).
  const k = `${org}:${period.key}:${plan.id}`;
  if (slot.granted.has(k)) return [];
  let accounts: AccountAfter[] = [];
  if (plan.includedMonthlyCents > 0) {
    const res = await postEntries(ctx, [
      {
        id: prefixedId('led'),
        orgId: org,
        kind: 'plan_grant',
        amountMicros: plan.includedMonthlyCents * MICROS_PER_CENT,
        idempotencyKey: `plan:${org}:${period.key}`,
        description: `${plan.name} plan credits for ${period.key}`,
        metadata: { plan: plan.id, period: period.key },
      },
    ]);
    accounts = res.accounts;
  }
  slot.granted.add(k);
  return accounts;
}

/** What the daily sums need of an event. */
export const ROLLED_COLUMNS = [
  'id',
  'org_id',
  'user_id',
  'kind',
  'subject',
  'tier',
  'input_tokens',
  'output_tokens',
  'cached_input_tokens',
  'reasoning_tokens',
  'quantity',
  'cost_micros',
  'created_at',
] as const;

export interface FinalEvent {
  org_id: string;
  user_id: string | null;
  kind: UsageKind;
  subject: string;
  tier: 'platform' | 'byok';
  state: 'settled' | 'forgiven';
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  reasoning_tokens: number;
  quantity: number;
  cost_micros: number;
  created_at: string;
}

/** How the usage rows group a kind's events: by model, tool or language; sandbox runtime and storage as one. */
export const groupSubject = (kind: UsageKind, subject: string): string =>
  kind === 'model_tokens' || kind === 'tool_execution' || kind === 'code_execution' ? subject : '';

/**
 * Adds events that just became final (settled or forgiven: they never change again) to the daily sums, in the
 * transaction that made them final, so the sums hold each final event exactly once.
 */
export async function rollUp(ctx: Ctx, events: readonly FinalEvent[]): Promise<void> {
  if (events.length === 0) return;
  const buckets = new Map<string, UsageRollupsRow>();
  for (const e of events) {
    const row: UsageRollupsRow = {
      org_id: e.org_id,
      day: e.created_at.slice(0, 10),
      user_id: e.user_id ?? '',
      kind: e.kind,
      subject: groupSubject(e.kind, e.subject),
      tier: e.tier,
      state: e.state,
      events: 0,
      input_tokens: 0,
      output_tokens: 0,
      cached_input_tokens: 0,
      reasoning_tokens: 0,
      quantity: 0,
      cost_micros: 0,
    };
    const key = [row.org_id, row.day, row.user_id, row.kind, row.subject, row.tier, row.state].join('\u0000');
    const b = buckets.get(key) ?? row;
    buckets.set(key, b);
    b.events += 1;
    b.input_tokens += Number(e.input_tokens);
    b.output_tokens += Number(e.output_tokens);
    b.cached_input_tokens += Number(e.cached_input_tokens);
    b.reasoning_tokens += Number(e.reasoning_tokens);
    b.quantity += Number(e.quantity);
    b.cost_micros += Number(e.cost_micros);
  }
  const rows = [...buckets.values()];
  for (let i = 0; i < rows.length; i += 200) {
    await exec(ctx)
      .insertInto('usage_rollups')
      .values(rows.slice(i, i + 200))
      .onConflict((oc) =>
        oc.columns(['org_id', 'day', 'user_id', 'kind', 'subject', 'tier', 'state']).doUpdateSet({
          events: sql<number>`usage_rollups.events + excluded.events`,
          input_tokens: sql<number>`usage_rollups.input_tokens + excluded.input_tokens`,
          output_tokens: sql<number>`usage_rollups.output_tokens + excluded.output_tokens`,
          cached_input_tokens: sql<number>`usage_rollups.cached_input_tokens + excluded.cached_input_tokens`,
          reasoning_tokens: sql<number>`usage_rollups.reasoning_tokens + excluded.reasoning_tokens`,
          quantity: sql<number>`usage_rollups.quantity + excluded.quantity`,
          cost_micros: sql<number>`usage_rollups.cost_micros + excluded.cost_micros`,
        }),
      )
      .execute();
  }
}

const DESCRIBE: Record<UsageKind, (subject: string) => string> = {
  model_tokens: (s) => `Model tokens: ${s}`,
  tool_execution: (s) => `Tool call: ${s}`,
  code_execution: (s) => `Code execution: ${s}`,
  sandbox_runtime: (s) => `Sandbox runtime: ${s}`,
  storage: () => 'Workspace storage',
};

/**
 * Charges due events: by id, by organization, or the oldest `limit` of all. In one transaction: a ledger entry
 * per event with a cost (id and key from the event), the balances moved, the events marked settled. Then, after
 * the commit, the after-charge work. Returns how many events were settled.
 */
export async function settleUsage(deps: Deps, opts: { ids?: readonly string[]; orgId?: string; limit?: number } = {}): Promise<number> {
  if (opts.ids && opts.ids.length === 0) return 0;
  const ctx = systemCtx(deps, { userId: 'system', orgId: null, role: null, scopes: new Set(), apiKeyId: null });
  const charging = deps.config.billing.enabled;
  const { settled, accounts } = await deps.db.kysely.transaction().execute(async (trx) => {
    const tx: Ctx = { ...ctx, trx };
    let q = trx.selectFrom('usage_events').select(ROLLED_COLUMNS).where('state', '=', 'due');
    if (opts.ids) q = q.where('id', 'in', opts.ids as string[]);
    if (opts.orgId) q = q.where('org_id', '=', opts.orgId);
    const due = await q
      .orderBy('created_at')
      .limit(opts.limit ?? 500)
      .execute();
    if (due.length === 0) return { settled: 0, accounts: [] as AccountAfter[] };
    const changed = new Map<string, AccountAfter>();
    if (charging) {
      for (const org of new Set(due.map((d) => d.org_id))) for (const a of await grantPeriodCredits(tx, org)) changed.set(a.orgId, a);
    }
    const entries: LedgerEntryInput[] = [];
    const charged: string[] = [];
    const free: string[] = [];
    for (const d of due) {
      const cost = Number(d.cost_micros);
      if (!charging || cost <= 0) {
        free.push(d.id);
        continue;
      }
      charged.push(d.id);
      entries.push({
        id: `chg_${d.id}`,
        orgId: d.org_id,
        kind: 'usage_charge',
        amountMicros: -cost,
        idempotencyKey: `usage:${d.id}`,
        description: DESCRIBE[d.kind](d.subject),
        actorUserId: d.user_id,
        metadata: { usageEventId: d.id, kind: d.kind },
      });
    }
    const posted = await postEntries(tx, entries);
    for (const a of posted.accounts) changed.set(a.orgId, a);
    const now = nowIso();
    // RETURNING says which events this transaction moved (another replica may have settled some meanwhile):
    // exactly those go into the daily sums.
    const moved = new Set<string>();
    for (let i = 0; i < charged.length; i += 400) {
      const rows = await trx
        .updateTable('usage_events')
        .set({ state: 'settled', ledger_entry_id: sql<string>`'chg_' || id`, updated_at: now })
        .where('id', 'in', charged.slice(i, i + 400))
        .where('state', '=', 'due')
        .returning('id')
        .execute();
      for (const r of rows) moved.add(r.id);
    }
    for (let i = 0; i < free.length; i += 400) {
      const rows = await trx
        .updateTable('usage_events')
        .set({ state: 'settled', updated_at: now })
        .where('id', 'in', free.slice(i, i + 400))
        .where('state', '=', 'due')
        .returning('id')
        .execute();
      for (const r of rows) moved.add(r.id);
    }
    await rollUp(
      tx,
      due.filter((d) => moved.has(d.id)).map((d) => ({ ...d, state: 'settled' as const })),
    );
    for (const a of changed.values()) {
      if (!a.exhaustedNow) continue;
      await recordActivity(
        { ...tx, principal: { ...tx.principal, userId: 'system', orgId: a.orgId } },
        {
          resourceType: 'billing',
          resourceId: a.orgId,
          eventType: 'billing.credits.exhausted',
          status: 'exhausted',
          severity: 'warning',
          title: 'Credits exhausted',
          summary: `the balance is ${(a.balanceMicros / MICROS_PER_CENT).toFixed(2)} cents; new platform-model calls, runs, code executions and sandbox starts are refused until credits are added`,
        },
        a.orgId,
      );
    }
    return { settled: due.length, accounts: [...changed.values()] };
  });
  if (accounts.length > 0) await runAfterCharge(deps, accounts);
  return settled;
}

/** Runs the registered after-charge work; a failure there is logged, never undoes the charge. */
export async function runAfterCharge(deps: Deps, accounts: AccountAfter[]): Promise<void> {
  for (const fn of deps.state.get(SETTLE_STATE).afterCharge) {
    await fn(deps, accounts).catch((err) => deps.log.warn({ err }, 'after-charge work failed'));
  }
}

/** Settles what is due for an organization, logging instead of failing the caller (the sweep retries). */
export async function settleAfterCommit(deps: Deps, ids: readonly (string | null)[]): Promise<void> {
  const real = ids.filter((i): i is string => i !== null);
  if (real.length === 0) return;
  await settleUsage(deps, { ids: real }).catch((err) => deps.log.warn({ err }, 'charging usage failed; the billing sweep will retry'));
}
