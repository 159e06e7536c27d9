import { z } from 'zod';
import { envelope, errorResponses, ok, page, pageEnvelope } from '../../platform/http/envelope.js';
import { limitParam } from '../../platform/http/pagination.js';
import type { App } from '../../platform/http/server.js';
import { promoRoutes } from './routes-promo.js';
import { usageRoutes } from './routes-usage.js';
import type { Deps } from '../../platform/context.js';
import {
  AutoTopupBody,
  AutoTopupSettings,
  CreditBalance,
  CreditEntry,
  PlanSummary,
  TopupBody,
  TopupCheckout,
  TopupCompletion,
  WebhookAck,
} from './schemas.js';
import { getBalance, getPlan, listLedger } from './service.js';
import { completeCheckout, getAutoTopup, putAutoTopup, receivePaymentEvent, startTopup } from './topups.js';

export async function billingRoutes(app: App, deps: Deps) {
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

  app.post(
    '/v1/billing/topup',
    {
      config: { scope: 'billing:write' },
      schema: {
        tags: ['billing'],
        summary: 'Buy credits',
        description:
          'Organization admins only. Starts a checkout at the payment provider for `amountCents` and answers its URL; the credits are added once it is paid (the provider’s webhook or the return to `/v1/billing/success`, whichever comes first). Paying saves the card for auto top-up. An `Idempotency-Key` header makes a retry answer the same checkout. 409 `payments_not_configured` when the server has no payment provider.',
        body: TopupBody,
        response: { 201: envelope(TopupCheckout), ...errorResponses },
      },
    },
    async (req, reply) => {
      const key = req.headers['idempotency-key'];
      const idempotencyKey = typeof key === 'string' ? key : undefined;
      return reply.status(201).send(ok(req, await startTopup(req.ctx, { amountCents: req.body.amountCents, idempotencyKey })));
    },
  );

  app.get(
    '/v1/billing/success',
    {
      config: { scope: 'billing:write' },
      schema: {
        tags: ['billing'],
        summary: 'Return from a paid checkout',
        description:
          'Organization admins only. Where the checkout sends the browser back: the session is read from the payment provider, must be this organization’s and paid (409 `invalid_state` with its payment status otherwise), and is credited once.',
        querystring: z.object({
          session_id: z
            .string()
            .regex(/^[A-Za-z0-9_-]{1,255}$/, 'must be a checkout session id')
            .describe('The checkout session id'),
          cancelled: z.string().max(10).optional().describe('Set on the return from a cancelled checkout'),
        }),
        response: { 200: envelope(TopupCompletion), ...errorResponses },
      },
    },
    async (req) => ok(req, await completeCheckout(req.ctx, req.query.session_id)),
  );

  app.get(
    '/v1/billing/auto-topup',
    {
      config: { scope: 'billing:read' },
      schema: {
        tags: ['billing'],
        summary: 'Auto top-up settings',
        description: 'Organization admins only.',
        response: { 200: envelope(AutoTopupSettings), ...errorResponses },
      },
    },
    async (req) => ok(req, await getAutoTopup(req.ctx)),
  );

  app.put(
    '/v1/billing/auto-topup',
    {
      config: { scope: 'billing:write' },
      schema: {
        tags: ['billing'],
        summary: 'Set auto top-up',
        description:
          'Organization admins only. When on, a charge that leaves the balance at or below `thresholdCents` charges `topupAmountCents` to the card saved by a paid top-up (409 without one). Turning it on resets the failures in a row; three declines in a row turn it off.',
        body: AutoTopupBody,
        response: { 200: envelope(AutoTopupSettings), ...errorResponses },
      },
    },
    async (req) => ok(req, await putAutoTopup(req.ctx, req.body)),
  );

  // The provider's webhook is signed over its exact bytes: this route alone takes the JSON body raw.
  await app.register(async (scoped: App) => {
    scoped.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
    scoped.post(
      '/v1/billing/webhooks/payments',
      {
        config: { auth: 'none' },
        schema: {
          tags: ['billing'],
          summary: 'Payment provider webhook',
          description:
            'Called by the payment provider (Stripe), not by API clients: the `Stripe-Signature` header is verified over the raw body and its timestamp must be recent (400 otherwise). An event already handled is acknowledged and does nothing.',
          security: [],
          response: { 200: envelope(WebhookAck), ...errorResponses },
        },
      },
      async (req) => {
        const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
        const signature = req.headers['stripe-signature'];
        const res = await receivePaymentEvent(deps, raw, typeof signature === 'string' ? signature : undefined);
        return ok(req, { received: true as const, duplicate: res.duplicate });
      },
    );
  });

  await promoRoutes(app);
  await usageRoutes(app);
}
