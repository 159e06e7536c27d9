import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { startPaymentsFake, type PaymentsFake } from '../../../test/fakes/payments.js';
import { addOrgMember, createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { securitySuite } from '../../../test/security.js';
import { systemCtx, withTx } from '../../platform/context.js';
import { prefixedId } from '../../platform/ids.js';
import { MICROS_PER_CENT, postEntries } from './ledger.js';
import { runAfterCharge } from './meter.js';
import { resumeStaleAutoTopups } from './topups.js';

const SECRET_KEY = 'sk_test_hangar_payments';
const WEBHOOK_SECRET = 'whsec_hangar_payments_test';

describe('top-ups and auto top-up through the payment provider', () => {
  let h: Harness;
  let fake: PaymentsFake;
  let admin: Actor;
  let member: Actor;

  beforeAll(async () => {
    fake = await startPaymentsFake({ secretKey: SECRET_KEY, webhookSecret: WEBHOOK_SECRET });
    h = await createHarness({
      HANGAR_SIGNUP_CREDITS_CENTS: '500',
      HANGAR_STRIPE_SECRET_KEY: SECRET_KEY,
      HANGAR_STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET,
      HANGAR_STRIPE_API_URL: fake.url,
      HANGAR_STRIPE_WEBHOOK_TOLERANCE_SECONDS: '300',
      HANGAR_BILLING_TOPUP_MIN_CENTS: '500',
      HANGAR_BILLING_TOPUP_MAX_CENTS: '50000',
    });
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    fake.webhookUrl = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}/v1/billing/webhooks/payments`;
    admin = await createOrgAdmin(h);
    member = await addOrgMember(h, admin, 'member');
  });
  afterAll(async () => {
    await fake?.idle();
    await h?.close();
    await fake?.close();
  });

  const call = (
    actor: { headers: Record<string, string> },
    method: 'GET' | 'POST' | 'PUT',
    url: string,
    payload?: unknown,
    extra: Record<string, string> = {},
  ) => h.app.inject({ method, url, headers: { ...actor.headers, ...extra }, ...(payload === undefined ? {} : { payload: payload as object }) });
  const balance = async (actor: Actor) => json(await call(actor, 'GET', '/v1/billing/credits')).data.balanceMicros as number;
  const ledgerKinds = async (actor: Actor) =>
    json(await call(actor, 'GET', '/v1/billing/credits/history')).data as { kind: string; amountCents: number }[];
  const topup = async (actor: Actor, amountCents: number, key?: string) => {
    const res = await call(actor, 'POST', '/v1/billing/topup', { amountCents }, key ? { 'idempotency-key': key } : {});
    expect(res.statusCode, res.body).toBe(201);
    return json(res).data as { id: string; checkoutUrl: string; sessionId: string; amountCents: number; status: string; expiresAt?: string };
  };
  const success = (actor: Actor, sessionId: string) => call(actor, 'GET', `/v1/billing/success?session_id=${sessionId}`);

  it('a top-up opens a checkout at the provider; the webhook credits it once and the return afterwards adds nothing', async () => {
    const before = await balance(admin);
    const t = await topup(admin, 1500);
    expect(t).toEqual({
      id: expect.stringMatching(/^top_/),
      checkoutUrl: expect.stringContaining('/c/pay/cs_test_'),
      sessionId: expect.stringMatching(/^cs_test_/),
      amountCents: 1500,
      status: 'pending',
      expiresAt: expect.any(String),
    });
    // What the provider was asked for, in its wire format.
    const created = fake.requests.find((r) => r.method === 'POST' && r.path === '/v1/checkout/sessions')!;
    expect(created.headers.authorization).toBe(`Bearer ${SECRET_KEY}`);
    expect(created.body).toMatchObject({
      mode: 'payment',
      client_reference_id: admin.orgId,
      customer: expect.stringMatching(/^cus_test_/),
      metadata: { org_id: admin.orgId, topup_id: t.id },
      line_items: [{ quantity: '1', price_data: { currency: 'usd', unit_amount: '1500', product_data: { name: 'Hangar credits' } } }],
      payment_intent_data: { setup_future_usage: 'off_session' },
    });
    expect(created.body.success_url).toMatch(/\/v1\/billing\/success\?session_id=\{CHECKOUT_SESSION_ID\}$/);
    expect(fake.customers.size).toBe(1);
    await expectActivity(h, admin, { eventType: 'billing.topup.started', metadata: { topupId: t.id, sessionId: t.sessionId, amountCents: 1500 } });

    const unpaid = await success(admin, t.sessionId);
    expect(unpaid.statusCode).toBe(409);
    expect(json(unpaid).error).toMatchObject({ code: 'invalid_state', state: 'unpaid' });
    expect(await balance(admin)).toBe(before);

    const { delivery } = await fake.pay(t.sessionId);
    expect(delivery!.status, delivery!.body).toBe(200);
    expect(JSON.parse(delivery!.body).data).toEqual({ received: true, duplicate: false });
    expect(await balance(admin)).toBe(before + 1500 * MICROS_PER_CENT);
    expect((await ledgerKinds(admin)).filter((e) => e.kind === 'topup')).toEqual([expect.objectContaining({ kind: 'topup', amountCents: 1500 })]);
    await expectActivity(h, admin, { eventType: 'billing.topup.completed', metadata: { topupId: t.id, amountCents: 1500 } });

    const again = await success(admin, t.sessionId);
    expect(again.statusCode, again.body).toBe(200);
    expect(json(again).data).toEqual({
      id: t.id,
      sessionId: t.sessionId,
      amountCents: 1500,
      status: 'completed',
      creditedNow: false,
      balanceCents: (before + 1500 * MICROS_PER_CENT) / MICROS_PER_CENT,
    });
    expect(await balance(admin)).toBe(before + 1500 * MICROS_PER_CENT);

    // Paying saved the card; the second top-up reuses the customer.
    expect(json(await call(admin, 'GET', '/v1/billing/auto-topup')).data).toMatchObject({ paymentMethodSaved: true, enabled: false });
    await topup(admin, 500);
    expect(fake.customers.size).toBe(1);
  });

  it('the return first, then the webhook: credited once', async () => {
    const before = await balance(admin);
    const t = await topup(admin, 700);
    const { event } = await fake.pay(t.sessionId, { deliver: false });
    const res = await success(admin, t.sessionId);
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data).toMatchObject({ creditedNow: true, amountCents: 700 });
    const hook = await fake.deliver(event);
    expect(hook.status).toBe(200);
    expect(await balance(admin)).toBe(before + 700 * MICROS_PER_CENT);
  });

  it('the return and the webhook at once: credited once', async () => {
    const before = await balance(admin);
    const t = await topup(admin, 800);
    const { event } = await fake.pay(t.sessionId, { deliver: false });
    const [hook, ret, ret2] = await Promise.all([fake.deliver(event), success(admin, t.sessionId), success(admin, t.sessionId)]);
    expect(hook.status).toBe(200);
    expect(ret.statusCode).toBe(200);
    expect(ret2.statusCode).toBe(200);
    expect(await balance(admin)).toBe(before + 800 * MICROS_PER_CENT);
    const credited = (await ledgerKinds(admin)).filter((e) => e.kind === 'topup' && e.amountCents === 800);
    expect(credited).toHaveLength(1);
  });

  it('a forged, missing or stale signature is refused with 400 and credits nothing; a replayed event does nothing', async () => {
    const before = await balance(admin);
    const t = await topup(admin, 900);
    const { event } = await fake.pay(t.sessionId, { deliver: false });

    const forged = await fake.deliver(event, { secret: 'whsec_not_the_secret' });
    expect(forged.status).toBe(400);
    expect(JSON.parse(forged.body).error.code).toBe('invalid_request');
    const missing = await fake.deliver(event, { signature: null });
    expect(missing.status).toBe(400);
    expect(JSON.parse(missing.body).error.message).toContain('Stripe-Signature');
    const stale = await fake.deliver(event, { timestamp: Math.floor(Date.now() / 1000) - 3600 });
    expect(stale.status).toBe(400);
    // The body altered after signing (the amount) does not verify either.
    const tampered = await h.app.inject({
      method: 'POST',
      url: '/v1/billing/webhooks/payments',
      headers: { 'content-type': 'application/json', 'stripe-signature': `t=${Math.floor(Date.now() / 1000)},v1=${'0'.repeat(64)}` },
      payload: JSON.stringify(event),
    });
    expect(tampered.statusCode).toBe(400);
    expect(await balance(admin)).toBe(before);

    const first = await fake.deliver(event);
    expect(first.status).toBe(200);
    expect(await balance(admin)).toBe(before + 900 * MICROS_PER_CENT);
    const replay = await fake.deliver(event);
    expect(replay.status).toBe(200);
    expect(JSON.parse(replay.body).data).toEqual({ received: true, duplicate: true });
    expect(await balance(admin)).toBe(before + 900 * MICROS_PER_CENT);
  });

  it('an expired checkout fails the top-up and credits nothing', async () => {
    const before = await balance(admin);
    const t = await topup(admin, 600);
    const { delivery } = await fake.expire(t.sessionId);
    expect(delivery!.status).toBe(200);
    await expectActivity(h, admin, { eventType: 'billing.topup.failed', metadata: { topupId: t.id, reason: 'expired' } });
    const res = await success(admin, t.sessionId);
    expect(res.statusCode).toBe(409);
    expect(await balance(admin)).toBe(before);
  });

  it('the same Idempotency-Key answers the same checkout, sequentially and concurrently', async () => {
    const sessionsBefore = fake.sessions.size;
    const a = await topup(admin, 1000, 'order-42');
    const b = await topup(admin, 1000, 'order-42');
    expect(b).toMatchObject({ id: a.id, sessionId: a.sessionId, checkoutUrl: a.checkoutUrl, status: 'pending' });
    const [c, d] = await Promise.all([topup(admin, 1200, 'order-43'), topup(admin, 1200, 'order-43')]);
    expect(c.sessionId).toBe(d.sessionId);
    expect(c.id).toBe(d.id);
    const e = await topup(admin, 1000, 'order-44');
    expect(e.sessionId).not.toBe(a.sessionId);
    expect(fake.sessions.size).toBe(sessionsBefore + 3);
    // Another organization's same key is its own.
    const other = await createOrgAdmin(h);
    const f = await topup(other, 1000, 'order-42');
    expect(f.sessionId).not.toBe(a.sessionId);
  });

  it('refuses bad amounts with 400', async () => {
    for (const amountCents of [0, -5, 1.5, 10 ** 12, '500', null, 100, 50001]) {
      const res = await call(admin, 'POST', '/v1/billing/topup', { amountCents });
      expect(res.statusCode, `${amountCents}: ${res.body}`).toBe(400);
      expect(json(res).error.code).toBe('invalid_request');
      expect(json(res).error.message).toContain('amountCents');
    }
    const res = await call(admin, 'POST', '/v1/billing/topup', { amountCents: 100 });
    expect(json(res).error.message).toContain('from 500 ($5.00) to 50000 ($500.00)');
    expect((await call(admin, 'POST', '/v1/billing/topup', {})).statusCode).toBe(400);
  });

  it('members are refused on every route', async () => {
    const t = await topup(admin, 500);
    for (const [method, url, body] of [
      ['POST', '/v1/billing/topup', { amountCents: 500 }],
      ['GET', `/v1/billing/success?session_id=${t.sessionId}`, undefined],
      ['GET', '/v1/billing/auto-topup', undefined],
      ['PUT', '/v1/billing/auto-topup', { enabled: false, thresholdCents: 0, topupAmountCents: 500 }],
    ] as const) {
      const res = await call(member, method, url, body);
      expect(res.statusCode, url).toBe(403);
      expect(json(res).error.code).toBe('forbidden');
    }
  });

  it('another organization’s checkout session is 404 (the owner’s return is the control)', async () => {
    const t = await topup(admin, 500);
    await fake.pay(t.sessionId, { deliver: false });
    const stranger = await createOrgAdmin(h);
    const strangerBefore = await balance(stranger);
    const res = await success(stranger, t.sessionId);
    expect(res.statusCode).toBe(404);
    expect(json(res).error.code).toBe('not_found');
    expect(await balance(stranger)).toBe(strangerBefore);
    const control = await success(admin, t.sessionId);
    expect(control.statusCode).toBe(200);
    expect(json(control).data.creditedNow).toBe(true);
    // An id the provider does not know is 404 too.
    expect((await success(admin, 'cs_test_unknown')).statusCode).toBe(404);
  });

  /** Spends `cents` from the organization's balance the way a settled charge does, then the after-charge work. */
  async function charge(org: string, cents: number) {
    const ctx = systemCtx(h.deps, { userId: 'system', orgId: org, role: null, scopes: new Set(), apiKeyId: null });
    const posted = await withTx(ctx, (tx) =>
      postEntries(tx, [
        {
          id: prefixedId('led'),
          orgId: org,
          kind: 'usage_charge',
          amountMicros: -cents * MICROS_PER_CENT,
          idempotencyKey: `test:${prefixedId('k')}`,
          description: 'Test charge',
        },
      ]),
    );
    await runAfterCharge(h.deps, posted.accounts);
  }
  const settings = async (actor: Actor) => json(await call(actor, 'GET', '/v1/billing/auto-topup')).data;
  const intentsCreated = () => fake.requests.filter((r) => r.method === 'POST' && r.path === '/v1/payment_intents').length;

  it('auto top-up needs a saved card, then charges it off-session once when racing charges cross the threshold', async () => {
    const owner = await createOrgAdmin(h);
    expect(await settings(owner)).toEqual({
      enabled: false,
      thresholdCents: 0,
      topupAmountCents: 0,
      paymentMethodSaved: false,
      consecutiveFailures: 0,
      pendingTopupId: null,
    });
    const off = await call(owner, 'PUT', '/v1/billing/auto-topup', { enabled: true, thresholdCents: 1000, topupAmountCents: 2000 });
    expect(off.statusCode).toBe(409);
    expect(json(off).error.message).toContain('first top-up');
    for (const bad of [
      { enabled: true, thresholdCents: -1, topupAmountCents: 2000 },
      { enabled: true, thresholdCents: 1000, topupAmountCents: 10 },
      { enabled: true, thresholdCents: 1.5, topupAmountCents: 2000 },
      { enabled: 'yes', thresholdCents: 1000, topupAmountCents: 2000 },
    ]) {
      expect((await call(owner, 'PUT', '/v1/billing/auto-topup', bad)).statusCode, JSON.stringify(bad)).toBe(400);
    }

    const t = await topup(owner, 1000);
    await fake.pay(t.sessionId);
    const put = await call(owner, 'PUT', '/v1/billing/auto-topup', { enabled: true, thresholdCents: 1000, topupAmountCents: 2000 });
    expect(put.statusCode, put.body).toBe(200);
    expect(json(put).data).toEqual({
      enabled: true,
      thresholdCents: 1000,
      topupAmountCents: 2000,
      paymentMethodSaved: true,
      consecutiveFailures: 0,
      pendingTopupId: null,
    });
    await expectActivity(h, owner, { eventType: 'billing.auto_topup.updated', metadata: { enabled: true, thresholdCents: 1000 } });

    const start = await balance(owner); // 500 sign-up + 1000 top-up = 1500 cents
    expect(start).toBe(1500 * MICROS_PER_CENT);
    const intentsBefore = intentsCreated();
    await charge(owner.orgId, 100); // 1400 cents: above the threshold
    expect(intentsCreated()).toBe(intentsBefore);

    await Promise.all([charge(owner.orgId, 300), charge(owner.orgId, 300)]); // 800 cents: at or below 1000
    await fake.idle();
    expect(intentsCreated()).toBe(intentsBefore + 1);
    const pi = fake.requests.filter((r) => r.path === '/v1/payment_intents').at(-1)!;
    expect(pi.body).toMatchObject({ amount: '2000', currency: 'usd', off_session: 'true', confirm: 'true', metadata: { org_id: owner.orgId } });
    expect(pi.headers['idempotency-key']).toContain(pi.body.metadata.topup_id);
    expect(await balance(owner)).toBe((800 + 2000) * MICROS_PER_CENT);
    expect((await ledgerKinds(owner)).filter((e) => e.kind === 'auto_topup')).toEqual([expect.objectContaining({ amountCents: 2000 })]);
    await expectActivity(h, owner, { eventType: 'billing.auto_topup.triggered', metadata: { amountCents: 2000 } });
    await expectActivity(h, owner, { eventType: 'billing.topup.completed', metadata: { kind: 'auto', amountCents: 2000 } });
    expect(await settings(owner)).toMatchObject({ enabled: true, consecutiveFailures: 0, pendingTopupId: null });
  });

  it('an auto top-up a crash left pending is charged again with its own idempotency key: paid once, credited once', async () => {
    const owner = await createOrgAdmin(h);
    const t = await topup(owner, 1000);
    await fake.pay(t.sessionId);
    expect((await call(owner, 'PUT', '/v1/billing/auto-topup', { enabled: true, thresholdCents: 100, topupAmountCents: 1500 })).statusCode).toBe(200);
    // A process recorded the pending top-up and died before charging the card (no provider call was made).
    const id = prefixedId('top');
    const old = new Date(Date.now() - 15 * 60_000).toISOString();
    await h.deps.db.kysely
      .insertInto('topups')
      .values({
        id,
        org_id: owner.orgId,
        kind: 'auto',
        provider_ref: null,
        amount_cents: 1500,
        status: 'pending',
        idempotency_key: null,
        url: null,
        failure_reason: null,
        created_by_user_id: null,
        created_at: old,
        updated_at: old,
        completed_at: null,
      })
      .execute();
    expect(await settings(owner)).toMatchObject({ pendingTopupId: id });
    const start = await balance(owner);
    // Control: while it is pending, a charge across the threshold starts no second top-up.
    const before = intentsCreated();
    await charge(owner.orgId, 1450);
    expect(intentsCreated()).toBe(before);

    expect(await resumeStaleAutoTopups(h.deps)).toBe(1);
    await fake.idle();
    expect(intentsCreated()).toBe(before + 1);
    expect(await balance(owner)).toBe(start - 1450 * MICROS_PER_CENT + 1500 * MICROS_PER_CENT);
    expect(await settings(owner)).toMatchObject({ pendingTopupId: null, consecutiveFailures: 0 });
    // Run again (a second replica, a later round): nothing is pending, nothing is charged.
    expect(await resumeStaleAutoTopups(h.deps)).toBe(0);
    expect(intentsCreated()).toBe(before + 1);
    expect((await ledgerKinds(owner)).filter((e) => e.kind === 'auto_topup')).toHaveLength(1);
  });

  it('three declines in a row turn auto top-up off', async () => {
    const owner = await createOrgAdmin(h);
    const t = await topup(owner, 500);
    await fake.pay(t.sessionId);
    expect((await call(owner, 'PUT', '/v1/billing/auto-topup', { enabled: true, thresholdCents: 950, topupAmountCents: 1000 })).statusCode).toBe(200);
    const start = await balance(owner); // 1000 cents
    for (let i = 1; i <= 3; i++) {
      fake.failNextCharge();
      await charge(owner.orgId, 100);
      await fake.idle(); // the payment_intent.payment_failed webhook arrives too: it counts once
      const s = await settings(owner);
      expect(s.consecutiveFailures, `after decline ${i}`).toBe(i);
      expect(s.pendingTopupId).toBeNull();
      expect(s.enabled).toBe(i < 3);
    }
    await expectActivity(h, owner, { eventType: 'billing.topup.failed', metadata: { kind: 'auto', declined: true, consecutiveFailures: 1 } });
    await expectActivity(h, owner, { eventType: 'billing.auto_topup.disabled', metadata: { consecutiveFailures: 3 } });
    expect(await balance(owner)).toBe(start - 300 * MICROS_PER_CENT);

    // Off now: another charge starts nothing. Turning it on again resets the failures.
    const before = intentsCreated();
    await charge(owner.orgId, 100);
    expect(intentsCreated()).toBe(before);
    const again = await call(owner, 'PUT', '/v1/billing/auto-topup', { enabled: true, thresholdCents: 100, topupAmountCents: 1000 });
    expect(json(again).data).toMatchObject({ enabled: true, consecutiveFailures: 0 });
  });
});

describe('top-ups without a payment provider, and with billing off', () => {
  let h: Harness;
  let off: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness();
    off = await createHarness({
      HANGAR_BILLING: 'off',
      HANGAR_STRIPE_SECRET_KEY: SECRET_KEY,
      HANGAR_STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET,
      HANGAR_STRIPE_API_URL: 'http://127.0.0.1:9',
    });
    admin = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    await off?.close();
  });

  it('answers 409 payments_not_configured naming the setting; the settings still read', async () => {
    for (const [method, url, payload] of [
      ['POST', '/v1/billing/topup', { amountCents: 1000 }],
      ['GET', '/v1/billing/success?session_id=cs_test_x', undefined],
      ['PUT', '/v1/billing/auto-topup', { enabled: true, thresholdCents: 0, topupAmountCents: 1000 }],
    ] as const) {
      const res = await h.app.inject({ method, url, headers: admin.headers, ...(payload ? { payload } : {}) });
      expect(res.statusCode, url).toBe(409);
      expect(json(res).error.code).toBe('payments_not_configured');
      expect(json(res).error.message).toContain('HANGAR_STRIPE_SECRET_KEY');
    }
    const get = await h.app.inject({ method: 'GET', url: '/v1/billing/auto-topup', headers: admin.headers });
    expect(get.statusCode).toBe(200);
    expect(json(get).data.enabled).toBe(false);
    const disable = await h.app.inject({
      method: 'PUT',
      url: '/v1/billing/auto-topup',
      headers: admin.headers,
      payload: { enabled: false, thresholdCents: 0, topupAmountCents: 1000 },
    });
    expect(disable.statusCode).toBe(200);
    const hook = await h.app.inject({
      method: 'POST',
      url: '/v1/billing/webhooks/payments',
      headers: { 'content-type': 'application/json' },
      payload: '{}',
    });
    expect(hook.statusCode).toBe(409);
  });

  it('with billing off a top-up is 409 saying so', async () => {
    const a = await createOrgAdmin(off);
    const res = await off.app.inject({ method: 'POST', url: '/v1/billing/topup', headers: a.headers, payload: { amountCents: 1000 } });
    expect(res.statusCode).toBe(409);
    expect(json(res).error.message).toContain('HANGAR_BILLING=off');
  });
});

securitySuite('billing payments', [
  { method: 'POST', url: () => '/v1/billing/topup', scope: 'billing:write', body: { amountCents: 1000 } },
  { method: 'GET', url: () => '/v1/billing/success?session_id=cs_test_x', scope: 'billing:write' },
  { method: 'GET', url: () => '/v1/billing/auto-topup', scope: 'billing:read' },
  { method: 'PUT', url: () => '/v1/billing/auto-topup', scope: 'billing:write', body: { enabled: false, thresholdCents: 0, topupAmountCents: 1000 } },
]);
