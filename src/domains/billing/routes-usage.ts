import { z } from 'zod';
import { envelope, errorResponses, ok } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { MyUsage, OrgUsage, UsagePeriodName } from './usage-schemas.js';
import { getMyUsage } from './usage.js';

export async function usageRoutes(app: App) {
  app.get(
    '/v1/billing/my-usage',
    {
      config: { scope: 'usage:read' },
      schema: {
        tags: ['billing'],
        summary: 'Usage rows',
        description: [
          'The usage the meter recorded, over `period`: `current` (the billing period, the calendar month UTC; default), `7d`, `30d` or `all_time`, by the time each event was recorded.',
          'By default the caller’s own usage (`usage:read`, which members have): `{ period, userId, ...rows }`. With `all=true` (organization admins: `billing:read`): `{ period, members: [{ userId, email, ...rows }], organization: rows }`, where the organization totals are the members’ sums plus what no member caused.',
          'The rows: `tokens` (platform model input, output and total tokens), `modelUsage` (by model id and tier; calls with the customer’s own key are `byok` and cost 0), `sandboxRuntime` (`settled`, `pending` = stopped and awaiting the charge, `forgiven`, and `active` = running now with an estimate to now), `storageUsage` (workspace byte-seconds: organization-level, so 0 in a member’s own rows), `toolExecutions` (count and cost, by tool slug), `resourceCharges` (other resource charges: code executions by language, in CPU-seconds), and `totalCostMicros`/`totalCostCents`.',
          'Costs are in micro-dollars (`costMicros`, 1 cent = 10,000) and in whole cents rounded (`costCents`). They are reported whether or not billing is enabled.',
        ].join('\n\n'),
        querystring: z.object({
          period: UsagePeriodName.default('current').describe('`current` (default), `7d`, `30d` or `all_time`'),
          all: z.enum(['true', 'false']).default('false').describe('`true`: every member’s rows and the organization totals (organization admins)'),
          daily: z
            .enum(['true', 'false'])
            .default('false')
            .describe(
              '`true` (beyond the spec): also `days`, the usage by UTC day (the caller’s, or with `all=true` the organization’s), for charts',
            ),
        }),
        response: { 200: envelope(z.union([MyUsage, OrgUsage])), ...errorResponses },
      },
    },
    async (req) => ok(req, await getMyUsage(req.ctx, { period: req.query.period, all: req.query.all === 'true', daily: req.query.daily === 'true' })),
  );
}
