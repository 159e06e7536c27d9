import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { expectError, sleep, until } from '../../../test/helpers.js';
import { describeNeeding, type Need } from '../../../test/needs.js';
import { systemCtx, withTx } from '../../platform/context.js';
import { prefixedId } from '../../platform/ids.js';
import { MICROS_PER_CENT, postEntries } from './ledger.js';
import { planLimits } from './limits.js';

const dir = mkdtempSync(path.join(tmpdir(), 'hangar-limits-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const hello = { messages: [{ role: 'user', content: 'Say hello' }] };

/** A models file with a priced platform model and a BYOK model, both served by `fake`. */
function modelsFile(fake: FakeOpenAI): string {
  const file = path.join(dir, `models-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(
    file,
    JSON.stringify({
      platform: [{ id: 'plat-a', provider: 'openai', pricing: { inputPerMTok: 1, outputPerMTok: 2 } }],
      byok: [{ id: 'byok/fake', provider: 'openai', model: 'x', baseUrl: fake.url, requiresSecret: 'FAKE_KEY' }],
    }),
  );
  return file;
}

function envFor(fake: FakeOpenAI, extra: Record<string, string> = {}): Record<string, string> {
  return { HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_MODELS_FILE: modelsFile(fake), ...extra };
}

/** Moves the organization's balance to `cents` with one ledger entry (test set-up through the ledger's own path). */
async function setCredits(h: Harness, org: string, cents: number): Promise<void> {
  const ctx = systemCtx(h.deps, { userId: 'system', orgId: org, role: null, scopes: new Set(), apiKeyId: null });
  const acc = await h.deps.db.kysely.selectFrom('billing_accounts').select('balance_micros').where('org_id', '=', org).executeTakeFirstOrThrow();
  const delta = cents * MICROS_PER_CENT - Number(acc.balance_micros);
  if (delta === 0) return;
  const key = prefixedId('test');
  await withTx(ctx, (tx) =>
    postEntries(tx, [
      { id: key, orgId: org, kind: delta < 0 ? 'reversal' : 'promo', amountMicros: delta, idempotencyKey: key, description: 'test set-up' },
    ]),
  );
}

function client(h: () => Harness) {
  const call = (actor: Actor, method: 'GET' | 'POST', url: string, payload?: unknown) =>
    h().app.inject({ method, url, headers: actor.headers, payload: payload as object });
  return {
    call,
    proxy: (actor: Actor) => call(actor, 'POST', '/v1/model-proxy', { model: 'plat-a', options: hello }),
    stream: (actor: Actor) => call(actor, 'POST', '/v1/model-proxy/stream', { model: 'plat-a', options: hello }),
    execute: (actor: Actor) => call(actor, 'POST', '/v1/execute', { language: 'bash', code: 'echo hi' }),
    run: (actor: Actor, agent: string) => call(actor, 'POST', '/v1/run', { agent, prompt: 'Hi' }),
    agents: async (actor: Actor) => {
      for (const [slug, model] of [
        ['platformer', 'plat-a'],
        ['own-key', 'byok/fake'],
      ]) {
        const res = await call(actor, 'POST', '/v1/agents', { slug, model, instructions: 'Be brief.' });
        expect(res.statusCode, res.body).toBe(201);
      }
      const secret = await call(actor, 'POST', '/v1/secrets', { name: 'FAKE_KEY', value: 'sk-users-own-key' });
      expect(secret.statusCode, secret.body).toBe(201);
    },
  };
}

function expectNoCredits(res: { statusCode: number; body: string }, balanceCents?: number) {
  const err = expectError<{ code: string; message: string; balanceCents: number; availableCents: number }>(res, 402, 'insufficient_credits');
  // Zero, or below it once calls let through (an auto top-up that could run) were charged.
  if (balanceCents === undefined) expect(err.balanceCents).toBeLessThanOrEqual(0);
  else expect(err.balanceCents).toBe(balanceCents);
  expect(err.availableCents).toBeLessThanOrEqual(0);
  expect(err.message).toContain('BYOK');
  return err;
}

describe('credit limits', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  const c = client(() => h);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness(envFor(fake));
    admin = await createOrgAdmin(h);
    await c.agents(admin);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('with credits, a platform model call and a platform-model run go through', async () => {
    const res = await c.proxy(admin);
    expect(res.statusCode, res.body).toBe(200);
    const run = await c.run(admin, 'platformer');
    expect(run.statusCode, run.body).toBe(200);
    expect(json(run).data.status).toBe('completed');
    expect((await c.execute(admin)).statusCode).not.toBe(402);
  });

  it('with none, platform model calls, platform-model runs and code executions are refused with 402 and the balance', async () => {
    await setCredits(h, admin.orgId, 0);
    const before = fake.requests.length;
    expectNoCredits(await c.proxy(admin));
    expectNoCredits(await c.stream(admin));
    const run = expectNoCredits(await c.run(admin, 'platformer'));
    expect(run.message).toContain('platformer');
    expectNoCredits(await c.execute(admin));
    expect(fake.requests.length).toBe(before); // nothing reached the provider
    // Refused before any work: no new thread or run was recorded for the refused run.
    const runs = await h.deps.db.kysely
      .selectFrom('agent_runs')
      .select('id')
      .where('org_id', '=', admin.orgId)
      .where('agent_slug', '=', 'platformer')
      .execute();
    expect(runs).toHaveLength(1);
  });

  it('a BYOK model keeps working with no credit at all', async () => {
    await setCredits(h, admin.orgId, 0);
    fake.script({ text: 'on your dime', usage: { prompt: 5, completion: 2 } });
    const res = await c.run(admin, 'own-key');
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data).toMatchObject({ status: 'completed', result: 'on your dime', model: 'byok/fake' });
    expect(fake.requests.at(-1)!.headers.authorization).toBe('Bearer sk-users-own-key');
  });

  it('a negative balance shows in the error; credits added let calls through again', async () => {
    await setCredits(h, admin.orgId, -3);
    expectNoCredits(await c.proxy(admin), -3);
    await setCredits(h, admin.orgId, 100);
    expect((await c.proxy(admin)).statusCode).toBe(200);
  });

  it('an auto top-up that can still run lets calls through; after three failures it does not', async () => {
    await setCredits(h, admin.orgId, 0);
    const set = (values: { auto_topup_enabled?: number; payment_method_id?: string | null; auto_topup_failures?: number }) =>
      h.deps.db.kysely.updateTable('billing_accounts').set(values).where('org_id', '=', admin.orgId).execute();
    await set({ auto_topup_enabled: 1, payment_method_id: null, auto_topup_failures: 0 });
    expectNoCredits(await c.proxy(admin)); // on, but no saved payment method: it cannot run
    await set({ payment_method_id: 'pm_test_card' });
    expect((await c.proxy(admin)).statusCode).toBe(200);
    expect((await c.run(admin, 'platformer')).statusCode).toBe(200);
    await set({ auto_topup_failures: 3 });
    expectNoCredits(await c.proxy(admin));
    await set({ auto_topup_enabled: 0, payment_method_id: null, auto_topup_failures: 0 });
  });

  it('one organization running out does not refuse another', async () => {
    await setCredits(h, admin.orgId, 0);
    const other = await createOrgAdmin(h);
    expectNoCredits(await c.proxy(admin));
    expect((await c.proxy(other)).statusCode).toBe(200);
  });
});

describe('credit limits with HANGAR_BILLING=off', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  const c = client(() => h);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness(envFor(fake, { HANGAR_BILLING: 'off', HANGAR_SIGNUP_CREDITS_CENTS: '0' }));
    admin = await createOrgAdmin(h);
    await c.agents(admin);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('nothing is refused for credits', async () => {
    await setCredits(h, admin.orgId, -50);
    expect((await c.proxy(admin)).statusCode).toBe(200);
    const run = await c.run(admin, 'platformer');
    expect(run.statusCode, run.body).toBe(200);
    expect((await c.execute(admin)).statusCode).not.toBe(402);
    const sbx = await c.call(admin, 'POST', '/v1/sandboxes', { network: false, template: 'no-such-template' });
    expect(sbx.statusCode).not.toBe(402);
  });
});

describe('plan limits', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    const plans = path.join(dir, 'plans.json');
    writeFileSync(plans, JSON.stringify({ plans: [{ id: 'team', name: 'Team', limits: { runningSandboxes: 3 } }] }));
    h = await createHarness({ HANGAR_BILLING_PLANS_FILE: plans, HANGAR_SANDBOX_MAX_RUNNING: '7' });
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  it("the running-sandbox limit is the plan's, else the server's", async () => {
    const ctx = systemCtx(h.deps, { userId: admin.userId, orgId: admin.orgId, role: 'admin', scopes: new Set(), apiKeyId: null });
    expect(await planLimits(ctx, admin.orgId)).toEqual({ runningSandboxes: 7 });
    await h.deps.db.kysely.updateTable('billing_accounts').set({ plan: 'team' }).where('org_id', '=', admin.orgId).execute();
    expect(await planLimits(ctx, admin.orgId)).toEqual({ runningSandboxes: 3 });
    const plan = await h.app.inject({ method: 'GET', url: '/v1/billing/plan', headers: admin.headers });
    expect(json(plan).data.plan.limits).toEqual({ runningSandboxes: 3 });
  });
});

// ---- sandboxes: they need runc ----------------------------------------------------------------

const plans = path.join(dir, 'sandbox-plans.json');
writeFileSync(plans, JSON.stringify({ plans: [{ id: 'solo', name: 'Solo', limits: { runningSandboxes: 1 } }] }));
// One installation for the sandbox suites, made first: whether it can run sandboxes decides whether they run.
const sh = await createHarness({ HANGAR_BILLING_GRACE_SECONDS: '1', HANGAR_BILLING_PLANS_FILE: plans });
afterAll(() => sh.close());
const runc: Need = {
  what: 'persistent sandboxes (runc, root)',
  present: sh.deps.sandboxes.available,
  reason: sh.deps.sandboxes.unavailableReason,
};

describeNeeding(runc, 'credit limits on sandboxes, and the exhaustion grace', () => {
  const call = (actor: Actor, method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown) =>
    sh.app.inject({ method, url, headers: actor.headers, payload: payload as object });
  const create = async (actor: Actor) => {
    const res = await call(actor, 'POST', '/v1/sandboxes', { network: false });
    expect(res.statusCode, res.body).toBe(201);
    return json(res).data.id as string;
  };
  const state = async (actor: Actor, id: string) => {
    const res = await call(actor, 'GET', `/v1/sandboxes/${id}`);
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data.state as string;
  };
  const pause = async (actor: Actor, id: string) => expect((await call(actor, 'POST', `/v1/sandboxes/${id}/pause`)).statusCode).toBe(200);
  const destroy = async (actor: Actor, id: string) => expect((await call(actor, 'DELETE', `/v1/sandboxes/${id}`)).statusCode).toBe(204);

  it('with no credit, creating and resuming a sandbox is refused with 402; with credits both work', async () => {
    const admin = await createOrgAdmin(sh);
    const id = await create(admin);
    await pause(admin, id);
    await setCredits(sh, admin.orgId, 0);
    expectNoCredits(await call(admin, 'POST', '/v1/sandboxes', { network: false }));
    expectNoCredits(await call(admin, 'POST', `/v1/sandboxes/${id}/resume`));
    expect(await state(admin, id)).toBe('paused');
    await setCredits(sh, admin.orgId, 100);
    const resumed = await call(admin, 'POST', `/v1/sandboxes/${id}/resume`);
    expect(resumed.statusCode, resumed.body).toBe(200);
    expect(json(resumed).data.state).toBe('running');
    await destroy(admin, id);
  }, 120_000);

  it("the plan's running-sandbox limit applies", async () => {
    const admin = await createOrgAdmin(sh);
    await sh.deps.db.kysely.updateTable('billing_accounts').set({ plan: 'solo' }).where('org_id', '=', admin.orgId).execute();
    const id = await create(admin);
    const second = expectError(await call(admin, 'POST', '/v1/sandboxes', { network: false }), 429, 'limit_exceeded');
    expect(second.message).toContain('1 running sandbox');
    expect(second.message).toContain('plan');
    await destroy(admin, id);
  }, 120_000);

  it('after the grace, the running sandboxes of an organization out of credits are paused, not destroyed; one whose credits came back keeps running', async () => {
    const out = await createOrgAdmin(sh);
    const back = await createOrgAdmin(sh);
    const outBox = await create(out);
    const backBox = await create(back);

    await setCredits(sh, out.orgId, 0);
    await setCredits(sh, back.orgId, 0);
    await setCredits(sh, back.orgId, 50); // credits came back within the grace
    // Still running right after running out: the grace (1 s here) is not over.
    expect(await state(out, outBox)).toBe('running');

    await until('the out-of-credits sandbox is paused', async () => (await state(out, outBox)) === 'paused', 20_000);
    const ev = await expectActivity(sh, out, {
      eventType: 'sandbox.paused',
      resourceType: 'sandbox',
      resourceId: outBox,
      metadata: { trigger: 'credits_exhausted' },
    });
    expect(ev.summary).toContain('ran out of credits');
    // The grace sweep runs every 500 ms: after several rounds, the other organization's sandbox still runs.
    await sleep(2_000);
    expect(await state(back, backBox)).toBe('running');
    expect(await state(out, outBox)).toBe('paused');

    // Paused, not destroyed: with credits again, it resumes.
    expectNoCredits(await call(out, 'POST', `/v1/sandboxes/${outBox}/resume`));
    await setCredits(sh, out.orgId, 100);
    const resumed = await call(out, 'POST', `/v1/sandboxes/${outBox}/resume`);
    expect(resumed.statusCode, resumed.body).toBe(200);
    await destroy(out, outBox);
    await destroy(back, backBox);
  }, 120_000);
});
