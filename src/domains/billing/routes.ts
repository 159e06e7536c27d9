import { z } from 'zod';
import { envelope, errorResponses, ok, page, pageEnvelope } from '../../platform/http/envelope.js';
import { limitParam } from '../../platform/http/pagination.js';
import type { App } from '../../platform/http/server.js';
import { promoRoutes } from './routes-promo.js';
import { CreditBalance, CreditEntry, PlanSummary } from './schemas.js';
import { getBalance, getPlan, listLedger } from './service.js';
import { usageRoutes } from './routes-usage.js';

export async function billingRoutes(app: App) {
  app.get(
    '/v1/billing/plan',
    {
      config: { scope: 'billing:read' },
      schema: {
        tags: ['billing'],
        summary: 'Current plan and credit summary',
        description:
          'Organization admins only. The plan (included monthly credits, prices, limits), the billing period (calendar month, UTC) and the credits: balance, granted, purchased, spent this period and pending runtime charges.',
        response: { 200: envelope(PlanSummary), ...errorResponses },
      },
    },
    async (req) => ok(req, await getPlan(req.ctx)),
  );

  app.get(
    '/v1/billing/credits',
    {
      config: { scope: 'billing:read' },
      schema: {
        tags: ['billing'],
        summary: 'Current credit balance',
        description: 'Organization admins only. The balance is the sum of the credit ledger.',
        response: { 200: envelope(CreditBalance), ...errorResponses },
      },
    },
    async (req) => ok(req, await getBalance(req.ctx)),
  );

  app.get(
    '/v1/billing/credits/history',
    {
      config: { scope: 'billing:read' },
      schema: {
        tags: ['billing'],
        summary: 'Credit ledger history',
        description: 'Organization admins only. Newest first; entries are append-only.',
        querystring: z.object({ limit: limitParam(50, 200), cursor: z.string().min(1).max(500).optional() }),
        response: { 200: pageEnvelope(z.array(CreditEntry)), ...errorResponses },
      },
    },
    async (req) => {
      const p = await listLedger(req.ctx, req.query);
      return page(req, p.items, p);
    },
  );

  await promoRoutes(app);
  await usageRoutes(app);
}
