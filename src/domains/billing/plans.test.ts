import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { addOrgMember, createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { ConfigError } from '../../config.js';
import { assignPlan } from './index.js';

const dir = mkdtempSync(path.join(tmpdir(), 'hangar-plans-'));
const plansFile = path.join(dir, 'plans.json');
writeFileSync(
  plansFile,
  JSON.stringify({
    plans: [
      {
        id: 'pro',
        name: 'Pro',
        includedMonthlyCents: 2000,
        prices: { modelClasses: { large: { inputPerMTok: 3, outputPerMTok: 15 } }, toolExecutionMicros: 500 },
        limits: { runningSandboxes: 25 },
      },
    ],
  }),
);

describe('billing plans', () => {
  let h: Harness;
  let admin: Actor;
  let member: Actor;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_BILLING_PLANS_FILE: plansFile, HANGAR_SIGNUP_CREDITS_CENTS: '500' });
    admin = await createOrgAdmin(h);
    member = await addOrgMember(h, admin);
  });
  afterAll(() => h.close());

  const plan = async (a: Actor) => h.app.inject({ method: 'GET', url: '/v1/billing/plan', headers: a.headers });

  it('a new organization is on the free plan, with its prices, limits, period and credit summary', async () => {
    const res = await plan(admin);
    expect(res.statusCode).toBe(200);
    const d = json(res).data;
    expect(d.plan).toMatchObject({ id: 'free', name: 'Free', includedMonthlyCents: 0, limits: { runningSandboxes: 10 } });
    expect(d.plan.prices).toMatchObject({ toolExecutionMicros: 1000, sandboxVcpuSecondMicros: 14 });
    expect(d.billingEnabled).toBe(true);
    const now = new Date();
    expect(d.period.start).toBe(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)).toISOString());
    expect(d.credits).toMatchObject({
      balanceCents: 500,
      grantedCents: 500,
      purchasedCents: 0,
      spentThisPeriodCents: 0,
      pendingCents: 0,
      availableCents: 500,
      exhaustedAt: null,
    });
  });

  it('members may not read the plan', async () => {
    expect((await plan(admin)).statusCode).toBe(200);
    const res = await plan(member);
    expect(res.statusCode).toBe(403);
    expect(json(res).error.code).toBe('forbidden');
  });

  it('an operator puts an organization on a plan: its included credits are granted once per period', async () => {
    const res = await assignPlan(h.deps, { orgId: admin.orgId, plan: 'pro' });
    expect(res).toEqual({ orgId: admin.orgId, plan: 'pro', previous: 'free' });
    const d = json(await plan(admin)).data;
    expect(d.plan).toMatchObject({ id: 'pro', includedMonthlyCents: 2000, limits: { runningSandboxes: 25 } });
    expect(d.plan.prices.modelClasses.large).toEqual({ inputPerMTok: 3, outputPerMTok: 15 });
    expect(d.credits).toMatchObject({ balanceCents: 2500, grantedCents: 2500 });
    await expectActivity(h, admin, { eventType: 'billing.plan.changed', resourceType: 'billing', resourceId: admin.orgId });

    // Back and forth in the same period: the period's grant is not paid twice.
    await assignPlan(h.deps, { orgId: admin.orgId, plan: 'free' });
    await assignPlan(h.deps, { orgId: admin.orgId, plan: 'pro' });
    expect(json(await plan(admin)).data.credits.balanceCents).toBe(2500);
    const history = json(await h.app.inject({ method: 'GET', url: '/v1/billing/credits/history', headers: admin.headers })).data;
    expect(history.filter((e: { kind: string }) => e.kind === 'plan_grant')).toHaveLength(1);
  });

  it('an unknown plan or organization is refused', async () => {
    await expect(assignPlan(h.deps, { orgId: admin.orgId, plan: 'gold' })).rejects.toThrow('no plan "gold"');
    await expect(assignPlan(h.deps, { orgId: 'org_nope', plan: 'pro' })).rejects.toThrow('org_nope');
    expect(json(await plan(admin)).data.plan.id).toBe('pro');
  });
});

describe('the plans file', () => {
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('a bad plans file stops start-up naming the setting and the plan', async () => {
    const bad = path.join(dir, 'bad.json');
    writeFileSync(bad, JSON.stringify({ plans: [{ id: 'team', name: 'Team', includedMonthlyCents: -5 }] }));
    await expect(createHarness({ HANGAR_BILLING_PLANS_FILE: bad })).rejects.toThrow(/^HANGAR_BILLING_PLANS_FILE: plan team: .*includedMonthlyCents/);
  });

  it('a default plan that no file defines stops start-up', async () => {
    await expect(createHarness({ HANGAR_BILLING_DEFAULT_PLAN: 'gold' })).rejects.toThrow(ConfigError);
    await expect(createHarness({ HANGAR_BILLING_DEFAULT_PLAN: 'gold' })).rejects.toThrow('HANGAR_BILLING_DEFAULT_PLAN');
  });
});
