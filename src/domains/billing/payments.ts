/**
 * The payment provider behind top-ups and auto top-up (ADR 0028), as billing sees it: Stripe's adapter
 * (`stripe.ts`) implements it with the official SDK. Amounts are US cents; ids are the provider's own.
 */

export interface CheckoutSession {
  id: string;
  /** Where the browser pays; null once the session is complete or expired. */
  url: string | null;
  /** `open`, `complete` or `expired`. */
  status: string;
  /** `paid`, `unpaid` or `no_payment_required`. */
  paymentStatus: string;
  amountTotal: number | null;
  currency: string | null;
  /** From the session's metadata, as Hangar set it. */
  orgId: string | null;
  topupId: string | null;
  paymentIntentId: string | null;
  expiresAt: string | null;
}

export interface PaymentIntentInfo {
  id: string;
  /** The provider's status: `succeeded`, `processing`, `requires_action`, `requires_payment_method`, ... */
  status: string;
  amount: number;
  currency: string;
  paymentMethodId: string | null;
  customerId: string | null;
  orgId: string | null;
  topupId: string | null;
  /** The last payment error's message, when the payment failed. */
  failureMessage: string | null;
}

/** What an off-session charge came to: paid now, still going (a webhook finishes it), or refused. */
export type OffSessionCharge =
  | { outcome: 'succeeded' | 'pending'; intent: PaymentIntentInfo }
  /** `declined`: the card was refused (a card error); it counts toward disabling auto top-up. */
  | { outcome: 'declined'; reason: string; intentId: string | null };

/** A verified webhook event, reduced to what billing handles. */
export type PaymentEvent =
  | {
      id: string;
      type: 'checkout.session.completed' | 'checkout.session.async_payment_succeeded' | 'checkout.session.expired';
      session: CheckoutSession;
    }
  | { id: string; type: 'payment_intent.succeeded' | 'payment_intent.payment_failed'; intent: PaymentIntentInfo }
  | { id: string; type: 'other'; providerType: string };

export interface CreateCheckoutInput {
  customerId: string;
  amountCents: number;
  orgId: string;
  topupId: string;
  successUrl: string;
  cancelUrl: string;
  /** Sent to the provider, so a retried or concurrent create makes one session. */
  idempotencyKey: string;
}

export interface ChargeOffSessionInput {
  customerId: string;
  paymentMethodId: string;
  amountCents: number;
  orgId: string;
  topupId: string;
  idempotencyKey: string;
}

export interface PaymentProvider {
  /** Creates the organization's customer at the provider; returns its id. */
  createCustomer(input: { orgId: string; idempotencyKey: string }): Promise<string>;
  createCheckout(input: CreateCheckoutInput): Promise<CheckoutSession>;
  /** The session as the provider has it now; null when it has no such session. */
  getCheckout(id: string): Promise<CheckoutSession | null>;
  getPaymentIntent(id: string): Promise<PaymentIntentInfo>;
  chargeOffSession(input: ChargeOffSessionInput): Promise<OffSessionCharge>;
  /** Checks the signature over the raw body (and its timestamp's age); throws a 400 AppError when it fails. */
  verifyWebhook(rawBody: Buffer, signature: string | undefined): PaymentEvent;
}
