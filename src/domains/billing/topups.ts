/**
 * Buying credits (ADR 0028): a top-up is a Checkout Session at the payment provider, credited once it is paid,
 * whichever of the browser's return (`completeCheckout`) and the provider's webhook comes first: the ledger entry's
 * idempotency key `topup:<session id>` makes the other a no-op, concurrently too. Paying saves the card for auto
 * top-up: when a charge leaves the balance at or below the threshold, one off-session payment is started (one
 * pending auto top-up per organization, checked and inserted under the account's lock) and credited the same way,
 * keyed `topup:<payment intent id>`. Three declines in a row turn auto top-up off.
 *
 * The provider is reached outside transactions; what it answers is written in one transaction with its activity.
 */
import { createHash } from 'node:crypto';
import { recordActivity } from '../activity/index.js';
import { exec, orgId, requireScope, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { accountRow, ensureAccount, MICROS_PER_CENT, postEntries } from './ledger.js';
import { AUTO_TOPUP_MAX_FAILURES, autoTopupCanRun } from './limits.js';
import { onAfterCharge } from './meter.js';
import type { CheckoutSession, PaymentEvent, PaymentIntentInfo, PaymentProvider } from './payments.js';
import { createStripeProvider } from './stripe.js';

const PAYMENTS = stateKey('billing-payments', () => ({ provider: null as PaymentProvider | null }));

/** The app's payment provider (made once per app from config.billing.payments); 409 when none is configured. */
export function paymentsOf(deps: Deps): PaymentProvider {
  const cfg = deps.config.billing.payments;
  if (!cfg)
    throw new AppError(
      'payments_not_configured',
      'payments are not configured on this server: the operator sets HANGAR_STRIPE_SECRET_KEY (and HANGAR_STRIPE_WEBHOOK_SECRET) to take top-ups and auto top-ups',
    );
  const slot = deps.state.get(PAYMENTS);
  slot.provider ??= createStripeProvider(cfg);
  return slot.provider;
}

/** Top-ups need billing on and a provider. */
function requirePayments(ctx: Ctx): PaymentProvider {
  if (!ctx.deps.config.billing.enabled)
    throw new AppError(
      'conflict',
      'billing is off on this server (HANGAR_BILLING=off): usage is reported but never charged, so there are no credits to buy',
    );
  return paymentsOf(ctx.deps);
}

const dollars = (cents: number) => `$${(cents / 100).toFixed(2)}`;

/** A context acting for billing itself in an organization (webhooks, auto top-up): its activity's actor is `system`. */
const billingCtx = (deps: Deps, org: string): Ctx => systemCtx(deps, { userId: 'system', orgId: org, role: null, scopes: new Set(), apiKeyId: null });

function checkAmount(ctx: Ctx, field: string, cents: number): void {
  const { topupMinCents: min, topupMaxCents: max } = ctx.deps.config.billing;
  if (!Number.isInteger(cents) || cents < min || cents > max)
    throw errors.invalidField(field, `must be a whole number of cents from ${min} (${dollars(min)}) to ${max} (${dollars(max)})`);
}

export interface TopupCheckout {
  id: string;
  checkoutUrl: string | null;
  sessionId: string;
  amountCents: number;
  status: 'pending' | 'completed' | 'failed' | 'expired';
  expiresAt?: string;
}

type TopupRow = { id: string; provider_ref: string | null; url: string | null; amount_cents: number | string; status: string };

const checkoutOf = (r: TopupRow): TopupCheckout => ({
  id: r.id,
  checkoutUrl: r.url,
  sessionId: r.provider_ref ?? '',
  amountCents: Number(r.amount_cents),
  status: r.status as TopupCheckout['status'],
});

function returnUrls(ctx: Ctx): { successUrl: string; cancelUrl: string } {
  const given = ctx.deps.config.billing.returnUrl;
  const base = given ?? `${ctx.deps.config.urls.billing.replace(/\/+$/, '')}/v1/billing/success`;
  const join = (extra: string) => {
    if (base.includes('{CHECKOUT_SESSION_ID}')) return extra ? `${base}${base.includes('?') ? '&' : '?'}${extra}` : base;
    return `${base}${base.includes('?') ? '&' : '?'}session_id={CHECKOUT_SESSION_ID}${extra ? `&${extra}` : ''}`;
  };
  return { successUrl: join(''), cancelUrl: join('cancelled=1') };
}

const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/**
 * Starts a top-up: a Checkout Session for `amountCents` at the provider and a pending `topups` row. The same
 * Idempotency-Key within the organization answers the same session (the row is unique by organization and key,
 * and the provider's own idempotency key makes concurrent creates one session).
 */
export async function startTopup(ctx: Ctx, input: { amountCents: number; idempotencyKey?: string | undefined }): Promise<TopupCheckout> {
  requireScope(ctx, 'billing:write');
  const org = orgId(ctx);
  const provider = requirePayments(ctx);
  checkAmount(ctx, 'body.amountCents', input.amountCents);
  const key = input.idempotencyKey ?? null;
  if (key !== null && !IDEMPOTENCY_KEY.test(key)) throw errors.invalidField('headers.idempotency-key', 'must be 1 to 255 printable ASCII characters');
  const byKey = (c: Ctx) =>
    exec(c)
      .selectFrom('topups')
      .selectAll()
      .where('org_id', '=', org)
      .where('idempotency_key', '=', key!)
      .where('kind', '=', 'checkout')
      .executeTakeFirst();
  if (key !== null) {
    const existing = await byKey(ctx);
    if (existing) return checkoutOf(existing);
  }
  const topupId = key !== null ? `top_${createHash('sha256').update(`${org}\n${key}`).digest('hex').slice(0, 32)}` : prefixedId('top');

  let customerId = (await accountRow(ctx, org))?.payment_customer_id ?? null;
  customerId ??= await provider.createCustomer({ orgId: org, idempotencyKey: `hangar-customer-${org}` });
  const session = await provider.createCheckout({
    customerId,
    amountCents: input.amountCents,
    orgId: org,
    topupId,
    ...returnUrls(ctx),
    idempotencyKey: `hangar-checkout-${topupId}-${input.amountCents}`,
  });

  return withTx(ctx, async (tx) => {
    const now = nowIso();
    await ensureAccount(tx, org);
    await exec(tx)
      .updateTable('billing_accounts')
      .set({ payment_customer_id: customerId, updated_at: now })
      .where('org_id', '=', org)
      .where('payment_customer_id', 'is', null)
      .execute();
    const inserted = await exec(tx)
      .insertInto('topups')
      .values({
        id: topupId,
        org_id: org,
        kind: 'checkout',
        provider_ref: session.id,
        amount_cents: input.amountCents,
        status: 'pending',
        idempotency_key: key,
        url: session.url,
        failure_reason: null,
        created_by_user_id: ctx.principal.userId,
        created_at: now,
        updated_at: now,
        completed_at: null,
      })
      .onConflict((oc) => oc.doNothing())
      .returning('id')
      .executeTakeFirst();
    if (!inserted) {
      // The same key, made concurrently: the first one's session is the answer.
      const first = key !== null ? await byKey(tx) : undefined;
      if (!first) throw errors.conflict('this top-up was started concurrently; retry with the same Idempotency-Key');
      return checkoutOf(first);
    }
    await recordActivity(tx, {
      resourceType: 'billing',
      resourceId: topupId,
      eventType: 'billing.topup.started',
      status: 'pending',
      title: `Top-up of ${dollars(input.amountCents)} started`,
      summary: 'credits are added once the checkout is paid',
      metadata: { topupId, sessionId: session.id, amountCents: input.amountCents },
    });
    return {
      id: topupId,
      checkoutUrl: session.url,
      sessionId: session.id,
      amountCents: input.amountCents,
      status: 'pending' as const,
      ...(session.expiresAt ? { expiresAt: session.expiresAt } : {}),
    };
  });
}

/** Records a webhook event's id in the caller's transaction: false when it was handled already (a replay). */
async function firstDelivery(tx: Ctx, eventId: string | null, type: string): Promise<boolean> {
  if (eventId === null) return true;
  const row = await exec(tx)
    .insertInto('payment_events')
    .values({ id: eventId, type, received_at: nowIso() })
    .onConflict((oc) => oc.column('id').doNothing())
    .returning('id')
    .executeTakeFirst();
  return row !== undefined;
}

/**
 * Credits a paid checkout session once (in the caller's transaction): the ledger entry keyed by the session, the
 * top-up completed, the card saved for auto top-up. Returns whether this call credited it.
 */
async function creditCheckoutTx(tx: Ctx, session: CheckoutSession, paymentMethodId: string | null): Promise<boolean> {
  const org = session.orgId!;
  const row = await exec(tx)
    .selectFrom('topups')
    .selectAll()
    .where('org_id', '=', org)
    .where('provider_ref', '=', session.id)
    .where('kind', '=', 'checkout')
    .executeTakeFirst();
  if (!row) return false;
  const cents = session.amountTotal ?? Number(row.amount_cents);
  const posted = await postEntries(tx, [
    {
      id: prefixedId('led'),
      orgId: org,
      kind: 'topup',
      amountMicros: cents * MICROS_PER_CENT,
      idempotencyKey: `topup:${session.id}`,
      description: `Top-up of ${dollars(cents)}`,
      actorUserId: row.created_by_user_id,
      metadata: { topupId: row.id, sessionId: session.id },
    },
  ]);
  if (posted.inserted.length === 0) return false;
  const now = nowIso();
  await exec(tx)
    .updateTable('topups')
    .set({ status: 'completed', completed_at: now, updated_at: now, url: null })
    .where('id', '=', row.id)
    .where('org_id', '=', org)
    .execute();
  if (paymentMethodId) {
    await exec(tx).updateTable('billing_accounts').set({ payment_method_id: paymentMethodId, updated_at: now }).where('org_id', '=', org).execute();
  }
  await recordActivity(
    tx,
    {
      resourceType: 'billing',
      resourceId: row.id,
      eventType: 'billing.topup.completed',
      status: 'completed',
      title: `Top-up of ${dollars(cents)} completed`,
      summary: `${dollars(cents)} of credits added${paymentMethodId ? '; the card is saved for auto top-up' : ''}`,
      metadata: { topupId: row.id, sessionId: session.id, amountCents: cents, kind: 'checkout' },
    },
    org,
  );
  return true;
}

/** The payment method a paid session's payment used (saved for auto top-up). */
async function paymentMethodOf(provider: PaymentProvider, session: CheckoutSession): Promise<string | null> {
  return session.paymentIntentId ? (await provider.getPaymentIntent(session.paymentIntentId)).paymentMethodId : null;
}

export interface TopupCompletion {
  id: string;
  sessionId: string;
  amountCents: number;
  status: 'completed';
  /** Whether this request added the credits (false: the webhook or an earlier return did). */
  creditedNow: boolean;
  balanceCents: number;
}

/**
 * The browser's return from the checkout: the session is read from the provider (the query is never trusted),
 * must be this organization's and paid, and is credited once.
 */
export async function completeCheckout(ctx: Ctx, sessionId: string): Promise<TopupCompletion> {
  requireScope(ctx, 'billing:write');
  const org = orgId(ctx);
  const provider = requirePayments(ctx);
  const row = await exec(ctx)
    .selectFrom('topups')
    .selectAll()
    .where('org_id', '=', org)
    .where('provider_ref', '=', sessionId)
    .where('kind', '=', 'checkout')
    .executeTakeFirst();
  if (!row) throw errors.notFound('checkout session', sessionId);
  const session = await provider.getCheckout(sessionId);
  if (!session || session.orgId !== org) throw errors.notFound('checkout session', sessionId);
  if (session.paymentStatus !== 'paid')
    throw errors.invalidState(
      `checkout session ${sessionId} is not paid (payment status ${session.paymentStatus}, session ${session.status}); credits are added once it is`,
      session.paymentStatus,
    );
  const pm = await paymentMethodOf(provider, session);
  const creditedNow = await withTx(ctx, (tx) => creditCheckoutTx(tx, session, pm));
  const acc = await accountRow(ctx, org);
  return {
    id: row.id,
    sessionId,
    amountCents: session.amountTotal ?? Number(row.amount_cents),
    status: 'completed',
    creditedNow,
    balanceCents: Math.floor(Number(acc?.balance_micros ?? 0) / MICROS_PER_CENT),
  };
}

/** A checkout that expired unpaid. */
async function expireCheckoutTx(tx: Ctx, session: CheckoutSession): Promise<void> {
  const org = session.orgId!;
  const now = nowIso();
  const row = await exec(tx)
    .updateTable('topups')
    .set({ status: 'expired', failure_reason: 'the checkout expired unpaid', url: null, updated_at: now })
    .where('org_id', '=', org)
    .where('provider_ref', '=', session.id)
    .where('kind', '=', 'checkout')
    .where('status', '=', 'pending')
    .returning(['id', 'amount_cents'])
    .executeTakeFirst();
  if (!row) return;
  await recordActivity(
    tx,
    {
      resourceType: 'billing',
      resourceId: row.id,
      eventType: 'billing.topup.failed',
      status: 'expired',
      severity: 'warning',
      title: `Top-up of ${dollars(Number(row.amount_cents))} expired`,
      summary: 'the checkout expired before it was paid; nothing was charged',
      metadata: { topupId: row.id, sessionId: session.id, reason: 'expired', kind: 'checkout' },
    },
    org,
  );
}

/** Credits a succeeded auto top-up's payment once: the ledger entry keyed by the payment, failures reset. */
async function completeAutoTopupTx(tx: Ctx, org: string, topupId: string, intent: PaymentIntentInfo): Promise<boolean> {
  const row = await exec(tx)
    .selectFrom('topups')
    .selectAll()
    .where('org_id', '=', org)
    .where('id', '=', topupId)
    .where('kind', '=', 'auto')
    .executeTakeFirst();
  if (!row) return false;
  const cents = intent.amount;
  const posted = await postEntries(tx, [
    {
      id: prefixedId('led'),
      orgId: org,
      kind: 'auto_topup',
      amountMicros: cents * MICROS_PER_CENT,
      idempotencyKey: `topup:${intent.id}`,
      description: `Auto top-up of ${dollars(cents)}`,
      metadata: { topupId, paymentIntentId: intent.id },
    },
  ]);
  if (posted.inserted.length === 0) return false;
  const now = nowIso();
  await exec(tx)
    .updateTable('topups')
    .set({ status: 'completed', provider_ref: intent.id, failure_reason: null, completed_at: now, updated_at: now })
    .where('id', '=', topupId)
    .where('org_id', '=', org)
    .execute();
  await exec(tx).updateTable('billing_accounts').set({ auto_topup_failures: 0, updated_at: now }).where('org_id', '=', org).execute();
  await recordActivity(
    tx,
    {
      resourceType: 'billing',
      resourceId: topupId,
      eventType: 'billing.topup.completed',
      status: 'completed',
      title: `Auto top-up of ${dollars(cents)} completed`,
      summary: `${dollars(cents)} of credits added from the saved card`,
      metadata: { topupId, paymentIntentId: intent.id, amountCents: cents, kind: 'auto' },
    },
    org,
  );
  return true;
}

/**
 * A failed auto top-up, once (only a pending one moves): `declined` counts toward the failures in a row, and the
 * third turns auto top-up off. A provider outage fails this attempt without counting.
 */
async function failAutoTopupTx(tx: Ctx, org: string, topupId: string, intentId: string | null, reason: string, declined: boolean): Promise<void> {
  const now = nowIso();
  const row = await exec(tx)
    .updateTable('topups')
    .set({ status: 'failed', failure_reason: reason.slice(0, 500), updated_at: now, ...(intentId ? { provider_ref: intentId } : {}) })
    .where('org_id', '=', org)
    .where('id', '=', topupId)
    .where('kind', '=', 'auto')
    .where('status', '=', 'pending')
    .returning(['id', 'amount_cents'])
    .executeTakeFirst();
  if (!row) return;
  let failures = 0;
  let enabled = false;
  if (declined) {
    const acc = await exec(tx)
      .updateTable('billing_accounts')
      .set((eb) => ({ auto_topup_failures: eb('auto_topup_failures', '+', 1), updated_at: now }))
      .where('org_id', '=', org)
      .returning(['auto_topup_failures', 'auto_topup_enabled'])
      .executeTakeFirst();
    failures = Number(acc?.auto_topup_failures ?? 0);
    enabled = acc?.auto_topup_enabled === 1;
  }
  const cents = Number(row.amount_cents);
  await recordActivity(
    tx,
    {
      resourceType: 'billing',
      resourceId: topupId,
      eventType: 'billing.topup.failed',
      status: 'failed',
      title: `Auto top-up of ${dollars(cents)} failed`,
      summary: declined ? `the saved card was declined (${failures} in a row): ${reason}` : `the payment provider failed: ${reason}`,
      metadata: { topupId, paymentIntentId: intentId, reason, kind: 'auto', declined, consecutiveFailures: failures },
    },
    org,
  );
  if (declined && enabled && failures >= AUTO_TOPUP_MAX_FAILURES) {
    await exec(tx).updateTable('billing_accounts').set({ auto_topup_enabled: 0, updated_at: now }).where('org_id', '=', org).execute();
    await recordActivity(
      tx,
      {
        resourceType: 'billing',
        resourceId: org,
        eventType: 'billing.auto_topup.disabled',
        status: 'disabled',
        severity: 'warning',
        title: 'Auto top-up turned off',
        summary: `the saved card was declined ${failures} times in a row; an admin can turn it back on with PUT /v1/billing/auto-topup after updating the card with a top-up`,
        metadata: { consecutiveFailures: failures },
      },
      org,
    );
  }
}

function orgOfEvent(e: PaymentEvent): string | null {
  if ('session' in e) return e.session.orgId;
  if ('intent' in e) return e.intent.orgId;
  return null;
}

/**
 * The provider's webhook: the signature is checked over the raw body, the event id is recorded in the same
 * transaction as what it changes (a replay is acknowledged and does nothing). Returns whether it was a replay.
 */
export async function receivePaymentEvent(deps: Deps, rawBody: Buffer, signature: string | undefined): Promise<{ duplicate: boolean }> {
  const provider = paymentsOf(deps);
  const event = provider.verifyWebhook(rawBody, signature);
  const seen = await deps.db.kysely.selectFrom('payment_events').select('id').where('id', '=', event.id).executeTakeFirst();
  if (seen) return { duplicate: true };
  const org = orgOfEvent(event);
  const ctx = billingCtx(deps, org ?? 'none');
  let work: (tx: Ctx) => Promise<unknown> = async () => undefined;
  switch (event.type) {
    case 'checkout.session.completed':
    case 'checkout.session.async_payment_succeeded': {
      const s = event.session;
      if (s.orgId && s.paymentStatus === 'paid') {
        const pm = await paymentMethodOf(provider, s);
        work = (tx) => creditCheckoutTx(tx, s, pm);
      }
      break;
    }
    case 'checkout.session.expired':
      if (event.session.orgId) work = (tx) => expireCheckoutTx(tx, event.session);
      break;
    case 'payment_intent.succeeded': {
      const i = event.intent;
      if (i.orgId && i.topupId) work = (tx) => completeAutoTopupTx(tx, i.orgId!, i.topupId!, i);
      break;
    }
    case 'payment_intent.payment_failed': {
      const i = event.intent;
      if (i.orgId && i.topupId) work = (tx) => failAutoTopupTx(tx, i.orgId!, i.topupId!, i.id, i.failureMessage ?? 'the payment failed', true);
      break;
    }
    case 'other':
      break;
  }
  const first = await withTx(ctx, async (tx) => {
    if (!(await firstDelivery(tx, event.id, event.type === 'other' ? event.providerType : event.type))) return false;
    await work(tx);
    return true;
  });
  return { duplicate: !first };
}

export interface AutoTopupSettings {
  enabled: boolean;
  thresholdCents: number;
  topupAmountCents: number;
  paymentMethodSaved: boolean;
  consecutiveFailures: number;
  pendingTopupId: string | null;
}

async function settingsOf(ctx: Ctx, org: string): Promise<AutoTopupSettings> {
  const acc = await accountRow(ctx, org);
  const pending = await exec(ctx)
    .selectFrom('topups')
    .select('id')
    .where('org_id', '=', org)
    .where('kind', '=', 'auto')
    .where('status', '=', 'pending')
    .executeTakeFirst();
  return {
    enabled: acc?.auto_topup_enabled === 1,
    thresholdCents: Number(acc?.auto_topup_threshold_cents ?? 0),
    topupAmountCents: Number(acc?.auto_topup_amount_cents ?? 0),
    paymentMethodSaved: Boolean(acc?.payment_method_id),
    consecutiveFailures: Number(acc?.auto_topup_failures ?? 0),
    pendingTopupId: pending?.id ?? null,
  };
}

export async function getAutoTopup(ctx: Ctx): Promise<AutoTopupSettings> {
  requireScope(ctx, 'billing:read');
  return settingsOf(ctx, orgId(ctx));
}

/**
 * Sets auto top-up. Turning it on needs payments configured and a saved card (a first top-up saves one), and
 * resets the failures in a row; if the balance is already at or below the threshold, a top-up starts at once.
 */
export async function putAutoTopup(
  ctx: Ctx,
  input: { enabled: boolean; thresholdCents: number; topupAmountCents: number },
): Promise<AutoTopupSettings> {
  requireScope(ctx, 'billing:write');
  const org = orgId(ctx);
  checkAmount(ctx, 'body.topupAmountCents', input.topupAmountCents);
  if (!Number.isInteger(input.thresholdCents) || input.thresholdCents < 0)
    throw errors.invalidField('body.thresholdCents', 'must be a whole number of cents, 0 or more');
  if (input.enabled) requirePayments(ctx);
  await withTx(ctx, async (tx) => {
    await ensureAccount(tx, org);
    const acc = await accountRow(tx, org);
    if (input.enabled && !acc?.payment_method_id)
      throw errors.conflict(
        'auto top-up needs a saved card: make a first top-up with POST /v1/billing/topup; paying it saves the card for auto top-up',
      );
    const now = nowIso();
    await exec(tx)
      .updateTable('billing_accounts')
      .set({
        auto_topup_enabled: input.enabled ? 1 : 0,
        auto_topup_threshold_cents: input.thresholdCents,
        auto_topup_amount_cents: input.topupAmountCents,
        ...(input.enabled ? { auto_topup_failures: 0 } : {}),
        updated_at: now,
      })
      .where('org_id', '=', org)
      .execute();
    await recordActivity(tx, {
      resourceType: 'billing',
      resourceId: org,
      eventType: 'billing.auto_topup.updated',
      status: input.enabled ? 'enabled' : 'disabled',
      title: input.enabled ? 'Auto top-up turned on' : 'Auto top-up turned off',
      summary: input.enabled
        ? `${dollars(input.topupAmountCents)} is charged to the saved card when the balance is at or below ${dollars(input.thresholdCents)}`
        : 'credits are no longer bought automatically',
      metadata: { ...input },
    });
  });
  if (input.enabled) await maybeAutoTopup(ctx.deps, org);
  return settingsOf(ctx, org);
}

/**
 * Starts an auto top-up for the organization if its balance is at or below the threshold, auto top-up can run
 * and none is pending (checked and inserted under the account row's lock: two racing charges start one), then
 * charges the saved card off-session. Returns the top-up's id, or null when none was started.
 */
export async function maybeAutoTopup(deps: Deps, org: string): Promise<string | null> {
  if (!deps.config.billing.enabled || !deps.config.billing.payments) return null;
  const ctx = billingCtx(deps, org);
  const started = await withTx(ctx, async (tx) => {
    let q = exec(tx).selectFrom('billing_accounts').selectAll().where('org_id', '=', org);
    if (deps.db.dialect === 'postgres') q = q.forUpdate();
    const acc = await q.executeTakeFirst();
    if (!acc || !autoTopupCanRun(acc) || !acc.payment_customer_id || !acc.payment_method_id) return null;
    const threshold = Number(acc.auto_topup_threshold_cents) * MICROS_PER_CENT;
    if (Number(acc.balance_micros) - Number(acc.pending_micros) > threshold) return null;
    const pending = await exec(tx)
      .selectFrom('topups')
      .select('id')
      .where('org_id', '=', org)
      .where('kind', '=', 'auto')
      .where('status', '=', 'pending')
      .executeTakeFirst();
    if (pending) return null;
    const id = prefixedId('top');
    const cents = Number(acc.auto_topup_amount_cents);
    const now = nowIso();
    await exec(tx)
      .insertInto('topups')
      .values({
        id,
        org_id: org,
        kind: 'auto',
        provider_ref: null,
        amount_cents: cents,
        status: 'pending',
        idempotency_key: null,
        url: null,
        failure_reason: null,
        created_by_user_id: null,
        created_at: now,
        updated_at: now,
        completed_at: null,
      })
      .execute();
    await recordActivity(tx, {
      resourceType: 'billing',
      resourceId: id,
      eventType: 'billing.auto_topup.triggered',
      status: 'pending',
      title: `Auto top-up of ${dollars(cents)} started`,
      summary: `the balance reached the ${dollars(Number(acc.auto_topup_threshold_cents))} threshold; the saved card is charged`,
      metadata: { topupId: id, amountCents: cents, balanceMicros: Number(acc.balance_micros) },
    });
    return { id, cents, customerId: acc.payment_customer_id, paymentMethodId: acc.payment_method_id };
  });
  if (!started) return null;
  await chargeAutoTopup(deps, org, started);
  return started.id;
}

/**
 * Charges a pending auto top-up's saved card off-session and records the outcome. The provider's idempotency key
 * is the top-up's, so charging the same top-up again (after a crash) answers the same payment, never a second one.
 */
async function chargeAutoTopup(deps: Deps, org: string, started: { id: string; cents: number; customerId: string; paymentMethodId: string }) {
  const ctx = billingCtx(deps, org);
  const provider = paymentsOf(deps);
  const charge = await provider
    .chargeOffSession({
      customerId: started.customerId,
      paymentMethodId: started.paymentMethodId,
      amountCents: started.cents,
      orgId: org,
      topupId: started.id,
      idempotencyKey: `hangar-auto-topup-${started.id}`,
    })
    .catch((err: Error) => ({ outcome: 'error' as const, reason: err.message }));
  switch (charge.outcome) {
    case 'succeeded':
      await withTx(ctx, (tx) => completeAutoTopupTx(tx, org, started.id, charge.intent));
      break;
    case 'declined':
      await withTx(ctx, (tx) => failAutoTopupTx(tx, org, started.id, charge.intentId, charge.reason, true));
      break;
    case 'error':
      deps.log.warn({ org, topupId: started.id, reason: charge.reason }, 'auto top-up: the payment provider failed');
      await withTx(ctx, (tx) => failAutoTopupTx(tx, org, started.id, null, charge.reason, false));
      break;
    case 'pending':
      // The provider's payment_intent webhook finishes it; until then the resume job looks again every so often.
      await exec(ctx)
        .updateTable('topups')
        .set({ updated_at: nowIso() })
        .where('id', '=', started.id)
        .where('org_id', '=', org)
        .where('status', '=', 'pending')
        .execute();
      break;
  }
}

/** A pending auto top-up older than this was left by a process that died before the charge finished. */
export const STALE_AUTO_TOPUP_MS = 10 * 60_000;

/**
 * Finishes auto top-ups a crash left pending (the row committed, the card not charged or its answer lost): each is
 * charged again with its own idempotency key, so the provider answers the payment it may already have made, and
 * the outcome is recorded as usual. Without this a stuck pending top-up would block every later one.
 */
export async function resumeStaleAutoTopups(deps: Deps, now = new Date()): Promise<number> {
  if (!deps.config.billing.enabled || !deps.config.billing.payments) return 0;
  const before = new Date(now.getTime() - STALE_AUTO_TOPUP_MS).toISOString();
  const stale = await deps.db.kysely
    .selectFrom('topups')
    .innerJoin('billing_accounts', 'billing_accounts.org_id', 'topups.org_id')
    .select([
      'topups.id',
      'topups.org_id',
      'topups.amount_cents',
      'topups.created_at',
      'billing_accounts.payment_customer_id',
      'billing_accounts.payment_method_id',
    ])
    .where('topups.kind', '=', 'auto')
    .where('topups.status', '=', 'pending')
    .where('topups.updated_at', '<', before)
    .limit(100)
    .execute();
  // The provider keeps an idempotency key for a day: past that a retry could be a second payment, so a top-up still
  // pending after most of a day is failed instead (its webhook, if the payment did complete, still credits it).
  const giveUp = new Date(now.getTime() - 20 * 3600_000).toISOString();
  for (const t of stale) {
    if (t.created_at < giveUp) {
      await withTx(billingCtx(deps, t.org_id), (tx) => failAutoTopupTx(tx, t.org_id, t.id, null, 'the payment did not complete within a day', false));
      continue;
    }
    if (!t.payment_customer_id || !t.payment_method_id) {
      await withTx(billingCtx(deps, t.org_id), (tx) => failAutoTopupTx(tx, t.org_id, t.id, null, 'the saved payment method is gone', false));
      continue;
    }
    await chargeAutoTopup(deps, t.org_id, {
      id: t.id,
      cents: Number(t.amount_cents),
      customerId: t.payment_customer_id,
      paymentMethodId: t.payment_method_id,
    });
  }
  return stale.length;
}

/** Registers auto top-up as work after every charge that moved a balance (billing's job start-up does this). */
export function registerAutoTopup(deps: Deps): void {
  onAfterCharge(deps, async (d, accounts) => {
    for (const a of accounts) await maybeAutoTopup(d, a.orgId);
  });
}
