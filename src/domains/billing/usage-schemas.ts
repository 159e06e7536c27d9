import { z } from 'zod';

export const UsagePeriodName = z.enum(['current', '7d', '30d', 'all_time']);
export type UsagePeriodName = z.infer<typeof UsagePeriodName>;

const int = () => z.number().int();
const cost = { costMicros: int().describe('Micro-dollars (1 cent = 10,000)'), costCents: int().describe('Whole cents, rounded') };

const RuntimeBucket = z.object({
  intervals: int().describe('Closed running intervals'),
  seconds: z.number().describe('Seconds run'),
  ...cost,
});

export const UsageRows = z.object({
  tokens: z
    .object({ inputTokens: int(), outputTokens: int(), totalTokens: int().describe('input + output') })
    .describe('Platform model tokens (calls with the platform key; calls with your own provider key are not counted here)'),
  modelUsage: z
    .array(
      z.object({
        model: z.string().describe('The model id'),
        tier: z.enum(['platform', 'byok']).describe('`byok`: called with the customer’s own provider key, never charged (cost 0)'),
        calls: int(),
        inputTokens: int().describe('Prompt tokens, cached ones included'),
        outputTokens: int(),
        cachedInputTokens: int(),
        reasoningTokens: int().describe('Part of the output tokens'),
        totalTokens: int().describe('input + output'),
        ...cost,
      }),
    )
    .describe('By model id and tier, sorted by model id'),
  sandboxRuntime: z
    .object({
      settled: RuntimeBucket.describe('Charged'),
      pending: RuntimeBucket.describe('Stopped, awaiting the charge (seconds later, at the next settle)'),
      forgiven: RuntimeBucket.describe('Never charged (what they would have cost is shown)'),
      active: z
        .object({
          sandboxes: int().describe('Sandboxes running now'),
          recordedSeconds: z.number().describe('Seconds the meter has recorded for them so far'),
          recordedCostMicros: int(),
          estimatedSeconds: int().describe('Seconds since each started, to now'),
          estimatedCostMicros: int().describe('Their cost to now at the rate recorded so far'),
          estimatedCostCents: int(),
        })
        .describe('Running sandboxes: an estimate to now, not charged yet'),
    })
    .describe('Persistent sandboxes’ running time, by state'),
  storageUsage: z
    .object({
      byteSeconds: z.number(),
      gibHours: z.number().describe('byteSeconds / 2^30 / 3600, 3 decimals'),
      charges: int().describe('Storage charges (one per accounting interval)'),
      ...cost,
    })
    .describe('Workspace storage. It belongs to the organization: shown in the organization totals (all=true), 0 in a member’s own rows'),
  toolExecutions: z
    .object({
      count: int(),
      ...cost,
      byTool: z.array(z.object({ tool: z.string().describe('The tool slug'), count: int(), ...cost })).describe('Sorted by slug'),
    })
    .describe('Server-side tool calls'),
  resourceCharges: z
    .array(
      z.object({
        kind: z.enum(['code_execution']),
        subject: z.string().describe('The language'),
        count: int(),
        quantity: z.number(),
        unit: z.enum(['cpu_seconds']),
        ...cost,
      }),
    )
    .describe('Other resource-level charges: one-shot code executions (POST /v1/execute) by language'),
  totalCostMicros: int().describe('Everything above except forgiven runtime and BYOK calls; running sandboxes at their recorded cost'),
  totalCostCents: int(),
});
export type UsageRows = z.infer<typeof UsageRows>;

const Period = z
  .object({
    name: UsagePeriodName,
    start: z.string().nullable().describe('Inclusive; null for all_time'),
    end: z.string().describe('The billing period’s end for `current`; now otherwise'),
  })
  .describe('Events count by the time they were recorded');

export const UsageDay = z
  .object({
    day: z.string().describe('The UTC day, YYYY-MM-DD'),
    inputTokens: z.number().int().describe('Platform model input tokens'),
    outputTokens: z.number().int().describe('Platform model output tokens'),
    totalTokens: z.number().int(),
    sandboxSeconds: z
      .number()
      .describe('Sandbox runtime recorded that day (intervals charged, awaiting the charge or forgiven; a running sandbox’s so far)'),
    toolExecutions: z.number().int(),
    codeExecutions: z.number().int(),
    costMicros: z.number().int().describe('What that day’s usage costs (forgiven events and your own keys’ calls count 0)'),
  })
  .meta({ id: 'UsageDay' });

const Days = z
  .array(UsageDay)
  .optional()
  .describe(
    'With `daily=true` (beyond the spec): the same usage by UTC day, oldest first, one entry for every day of the period up to today (days with no usage are zeros); a 7d or 30d period starts with the whole of its first day',
  );

export const MyUsage = z.object({ period: Period, userId: z.string() }).extend(UsageRows.shape).extend({ days: Days }).meta({ id: 'MyUsage' });
export const OrgUsage = z
  .object({
    period: Period,
    days: Days,
    members: z
      .array(z.object({ userId: z.string(), email: z.string().nullable() }).extend(UsageRows.shape))
      .describe('Every user with usage in the period (former members included), sorted by user id'),
    organization: UsageRows.describe('Totals: the members’ sums plus what no member caused (workspace storage)'),
  })
  .meta({ id: 'OrgUsage' });

export type UsageReport = z.infer<typeof MyUsage> | z.infer<typeof OrgUsage>;
