/**
 * Stripe behind billing's PaymentProvider, through the official SDK. HANGAR_STRIPE_API_URL points the SDK
 * elsewhere (a test double speaking Stripe's wire format); requests time out and transient failures are retried
 * by the SDK with an idempotency key, so a retried create makes one object.
 */
import Stripe from 'stripe';
import type { BillingConfig } from '../../config.js';
import { AppError } from '../../platform/http/errors.js';
import type { CheckoutSession, OffSessionCharge, PaymentEvent, PaymentIntentInfo, PaymentProvider } from './payments.js';

type PaymentsConfig = NonNullable<BillingConfig['payments']>;

const TIMEOUT_MS = 20_000;
const RETRIES = 2;

const idOf = (v: string | { id: string } | null | undefined): string | null => (v == null ? null : typeof v === 'string' ? v : v.id);
const meta = (m: Record<string, string> | null | undefined, k: string): string | null => (m && typeof m[k] === 'string' ? m[k] : null);

function sessionOf(s: Stripe.Checkout.Session): CheckoutSession {
  return {
    id: s.id,
    url: s.url ?? null,
    status: s.status ?? 'open',
    paymentStatus: s.payment_status,
    amountTotal: s.amount_total ?? null,
    currency: s.currency ?? null,
    orgId: meta(s.metadata, 'org_id'),
    topupId: meta(s.metadata, 'topup_id'),
    paymentIntentId: idOf(s.payment_intent),
    expiresAt: s.expires_at ? new Date(s.expires_at * 1000).toISOString() : null,
  };
}

function intentOf(p: Stripe.PaymentIntent): PaymentIntentInfo {
  return {
    id: p.id,
    status: p.status,
    amount: p.amount,
    currency: p.currency,
    paymentMethodId: idOf(p.payment_method),
    customerId: idOf(p.customer),
    orgId: meta(p.metadata, 'org_id'),
    topupId: meta(p.metadata, 'topup_id'),
    failureMessage: p.last_payment_error?.message ?? null,
  };
}

/** The provider's failures as Hangar's errors: an unreachable or failing provider is a 502, never a raw SDK error. */
function providerError(err: unknown, what: string): AppError {
  if (err instanceof AppError) return err;
  const e = err as { type?: string; message?: string; statusCode?: number };
  if (e.type === 'StripeConnectionError') return new AppError('provider_error', `the payment provider could not be reached to ${what}; try again`);
  if (e.type === 'StripeAuthenticationError')
    return new AppError('provider_error', `the payment provider refused this server's key (HANGAR_STRIPE_SECRET_KEY) to ${what}`);
  return new AppError('provider_error', `the payment provider failed to ${what}: ${e.message ?? 'unknown error'}`);
}

export function createStripeProvider(cfg: PaymentsConfig): PaymentProvider {
  const api = cfg.apiUrl ? new URL(cfg.apiUrl) : null;
  const stripe = new Stripe(cfg.secretKey, {
    timeout: TIMEOUT_MS,
    maxNetworkRetries: RETRIES,
    appInfo: { name: 'Hangar' },
    ...(api
      ? {
          host: api.hostname,
          port: api.port || (api.protocol === 'http:' ? 80 : 443),
          protocol: api.protocol === 'http:' ? ('http' as const) : ('https' as const),
        }
      : {}),
  });

  return {
    async createCustomer({ orgId, idempotencyKey }) {
      try {
        const c = await stripe.customers.create({ description: `Hangar organization ${orgId}`, metadata: { org_id: orgId } }, { idempotencyKey });
        return c.id;
      } catch (err) {
        throw providerError(err, 'create the customer');
      }
    },

    async createCheckout(input) {
      try {
        const s = await stripe.checkout.sessions.create(
          {
            mode: 'payment',
            customer: input.customerId,
            client_reference_id: input.orgId,
            line_items: [{ quantity: 1, price_data: { currency: 'usd', unit_amount: input.amountCents, product_data: { name: 'Hangar credits' } } }],
            metadata: { org_id: input.orgId, topup_id: input.topupId },
            payment_intent_data: { setup_future_usage: 'off_session', metadata: { org_id: input.orgId, topup_id: input.topupId } },
            success_url: input.successUrl,
            cancel_url: input.cancelUrl,
          },
          { idempotencyKey: input.idempotencyKey },
        );
        return sessionOf(s);
      } catch (err) {
        throw providerError(err, 'start the checkout');
      }
    },

    async getCheckout(id) {
      try {
        return sessionOf(await stripe.checkout.sessions.retrieve(id));
      } catch (err) {
        if ((err as { statusCode?: number }).statusCode === 404) return null;
        throw providerError(err, 'read the checkout session');
      }
    },

    async getPaymentIntent(id) {
      try {
        return intentOf(await stripe.paymentIntents.retrieve(id));
      } catch (err) {
        throw providerError(err, 'read the payment');
      }
    },

    async chargeOffSession(input): Promise<OffSessionCharge> {
      try {
        const p = await stripe.paymentIntents.create(
          {
            amount: input.amountCents,
            currency: 'usd',
            customer: input.customerId,
            payment_method: input.paymentMethodId,
            off_session: true,
            confirm: true,
            description: 'Hangar credits (auto top-up)',
            metadata: { org_id: input.orgId, topup_id: input.topupId },
          },
          { idempotencyKey: input.idempotencyKey },
        );
        const intent = intentOf(p);
        if (p.status === 'succeeded') return { outcome: 'succeeded', intent };
        if (p.status === 'canceled' || p.status === 'requires_payment_method')
          return { outcome: 'declined', reason: intent.failureMessage ?? `the payment ended ${p.status}`, intentId: p.id };
        return { outcome: 'pending', intent };
      } catch (err) {
        if (err instanceof Stripe.errors.StripeCardError) {
          return { outcome: 'declined', reason: err.message, intentId: err.payment_intent?.id ?? null };
        }
        throw providerError(err, 'charge the saved payment method');
      }
    },

    verifyWebhook(rawBody, signature): PaymentEvent {
      if (!signature) throw new AppError('invalid_request', 'the Stripe-Signature header is missing');
      let event: Stripe.Event;
      try {
        event = stripe.webhooks.constructEvent(rawBody, signature, cfg.webhookSecret, cfg.toleranceSeconds);
      } catch (err) {
        throw new AppError('invalid_request', `the webhook's signature does not verify: ${(err as Error).message}`);
      }
      switch (event.type) {
        case 'checkout.session.completed':
        case 'checkout.session.async_payment_succeeded':
        case 'checkout.session.expired':
          return { id: event.id, type: event.type, session: sessionOf(event.data.object) };
        case 'payment_intent.succeeded':
        case 'payment_intent.payment_failed':
          return { id: event.id, type: event.type, intent: intentOf(event.data.object) };
        default:
          return { id: event.id, type: 'other', providerType: event.type };
      }
    },
  };
}
