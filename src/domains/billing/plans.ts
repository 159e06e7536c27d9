/**
 * Plans (ADR 0028): the built-in `free` plan plus the operator's `HANGAR_BILLING_PLANS_FILE`, checked once per app
 * (a bad file stops start-up naming the setting and the plan), and the billing period (the calendar month, UTC).
 *
 * Prices are in micro-dollars (1 cent = 10,000 micros) except model prices, which are USD per million tokens as
 * model providers publish them. A model's price is its plan's price for the model's class when the plan names
 * one, else the model's own catalogue price (HANGAR_MODELS_FILE), else zero.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { ConfigError } from '../../config.js';
import type { Deps } from '../../platform/context.js';
import { stateKey } from '../../platform/state.js';

const PerMTok = z
  .object({
    inputPerMTok: z.number().min(0).max(1_000_000),
    outputPerMTok: z.number().min(0).max(1_000_000),
    cachedInputPerMTok: z.number().min(0).max(1_000_000).optional(),
  })
  .strict();

const micros = z.number().min(0).max(1e12);

export const Plan = z
  .object({
    id: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,62}$/, 'a plan id: lower-case letters, digits, "_" and "-"'),
    name: z.string().min(1).max(200),
    /** Credits granted at the start of each billing period, in cents. */
    includedMonthlyCents: z.number().int().min(0).max(1e10).default(0),
    prices: z
      .object({
        /** USD per million tokens by model class (the `class` of a models-file entry). */
        modelClasses: z.record(z.string().min(1).max(100), PerMTok).default({}),
        /** Micro-dollars per vCPU-second and per GiB-second of memory while a sandbox runs. */
        sandboxVcpuSecondMicros: micros.default(14),
        sandboxGibSecondMicros: micros.default(4.5),
        /** Micro-dollars per GiB-month (30 days) of workspace storage. */
        storageGibMonthMicros: micros.default(100_000),
        /** Micro-dollars per tool call, and per tool slug where a tool costs otherwise. */
        toolExecutionMicros: micros.default(1_000),
        tools: z.record(z.string().min(1).max(200), micros).default({}),
        /** Micro-dollars per CPU-second of one-shot code execution (POST /v1/execute). */
        codeCpuSecondMicros: micros.default(50),
      })
      .strict()
      .default({
        modelClasses: {},
        sandboxVcpuSecondMicros: 14,
        sandboxGibSecondMicros: 4.5,
        storageGibMonthMicros: 100_000,
        toolExecutionMicros: 1_000,
        tools: {},
        codeCpuSecondMicros: 50,
      }),
    limits: z
      .object({
        /** Running sandboxes at once (default: HANGAR_SANDBOX_MAX_RUNNING). */
        runningSandboxes: z.number().int().min(0).max(100_000).optional(),
      })
      .strict()
      .default({}),
  })
  .strict();
export type Plan = z.infer<typeof Plan>;

const PlansFile = z.object({ plans: z.array(Plan).max(1000) }).strict();

export const FREE_PLAN: Plan = Plan.parse({ id: 'free', name: 'Free' });

const PLANS_STATE = stateKey('billing-plans', () => ({ plans: null as ReadonlyMap<string, Plan> | null }));

/** Reads and checks the plans once per app; throws a ConfigError naming the setting and the plan. */
export function loadPlans(deps: Pick<Deps, 'config' | 'state'>): ReadonlyMap<string, Plan> {
  const slot = deps.state.get(PLANS_STATE);
  if (slot.plans) return slot.plans;
  const plans = new Map<string, Plan>([[FREE_PLAN.id, FREE_PLAN]]);
  const file = deps.config.billing.plansFile;
  if (file) {
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new ConfigError('HANGAR_BILLING_PLANS_FILE', `${file} could not be read as JSON (${(err as Error).message})`);
    }
    const parsed = PlansFile.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const index = typeof issue.path[1] === 'number' ? issue.path[1] : -1;
      const id = index >= 0 ? ((json as { plans: { id?: unknown }[] }).plans[index]?.id ?? `#${index}`) : '';
      throw new ConfigError('HANGAR_BILLING_PLANS_FILE', `${id ? `plan ${String(id)}: ` : ''}${issue.path.join('.')}: ${issue.message}`);
    }
    for (const p of parsed.data.plans) plans.set(p.id, p);
  }
  if (!plans.has(deps.config.billing.defaultPlan))
    throw new ConfigError(
      'HANGAR_BILLING_DEFAULT_PLAN',
      `no plan "${deps.config.billing.defaultPlan}" (the plans are: ${[...plans.keys()].join(', ')})`,
    );
  slot.plans = plans;
  return plans;
}

export function planById(deps: Pick<Deps, 'config' | 'state'>, id: string): Plan {
  const plans = loadPlans(deps);
  // A plan removed from the file since an organization was put on it: the default plan's prices apply.
  return plans.get(id) ?? plans.get(deps.config.billing.defaultPlan)!;
}

/** The billing period holding `at`: the calendar month, UTC. */
export function periodOf(at: Date = new Date()): { key: string; start: string; end: string } {
  const start = new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), 1));
  const end = new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + 1, 1));
  return { key: start.toISOString().slice(0, 7), start: start.toISOString(), end: end.toISOString() };
}

/** Micro-dollars, rounded to whole micros (the ledger's unit). */
export const roundMicros = (v: number): number => Math.round(v);

export const GIB = 1024 ** 3;
export const MONTH_SECONDS = 30 * 86_400;
