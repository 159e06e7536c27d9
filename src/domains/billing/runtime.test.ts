import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { describeNeeding } from '../../../test/needs.js';
import { systemCtx, withTx, type Ctx } from '../../platform/context.js';
import { reconcile } from '../sandboxes/service.js';
import { recordUsage, settleUsage } from './meter.js';
import { periodOf } from './plans.js';
import { finishRuntime, refreshRuntime } from './runtime.js';

// The free plan's prices: 14 micros per vCPU-second, 4.5 per GiB-second.
const rate = (cpu: number, memoryMb: number) => cpu * 14 + (memoryMb / 1024) * 4.5;

const h: Harness = await createHarness({ HANGAR_SIGNUP_CREDITS_CENTS: '1000' });
afterAll(() => h.close(), 60_000);

const ctxOf = (a: Actor): Ctx => systemCtx(h.deps, { userId: a.userId, orgId: a.orgId, role: 'admin', scopes: new Set(), apiKeyId: null });

const eventBySource = (sourceId: string) =>
  h.deps.db.kysely.selectFrom('usage_events').selectAll().where('source_id', '=', sourceId).executeTakeFirstOrThrow();

async function credits(a: Actor) {
  const res = await h.app.inject({ method: 'GET', url: '/v1/billing/plan', headers: a.headers });
  expect(res.statusCode, res.body).toBe(200);
  return json(res).data.credits as { pendingMicros: number; balanceMicros: number };
}

async function ledger(a: Actor) {
  const res = await h.app.inject({ method: 'GET', url: '/v1/billing/credits/history?limit=200', headers: a.headers });
  expect(res.statusCode, res.body).toBe(200);
  return json(res).data as { id: string; kind: string; amountMicros: number }[];
}

let n = 0;
async function pending(a: Actor, startedAt: string, size = { cpu: 1, memoryMb: 1024 }): Promise<string> {
  const sourceId = `srt_test_${++n}`;
  await withTx(ctxOf(a), (tx) =>
    recordUsage(tx, {
      kind: 'sandbox_runtime',
      orgId: a.orgId,
      userId: a.userId,
      sourceId,
      sandboxId: `sbx_test_${n}`,
      ...size,
      seconds: 0,
      startedAt,
      endedAt: null,
      state: 'pending',
    }),
  );
  return sourceId;
}

const finish = (a: Actor, sourceId: string, endedAt: string, outcome: 'due' | 'forgiven') =>
  withTx(ctxOf(a), (tx) => finishRuntime(tx, a.orgId, sourceId, { endedAt, outcome }));

const iso = (ms: number) => new Date(ms).toISOString();

describe('runtime charges without sandboxes (the meter alone)', () => {
  let a: Actor;
  beforeAll(async () => {
    a = await createOrgAdmin(h);
  });

  it('a pending charge is re-estimated by the job, shown as pending, then made due once and charged its exact cost', async () => {
    const now = Date.now();
    const start = now - 100_000;
    const src = await pending(a, iso(start), { cpu: 2, memoryMb: 512 });
    expect(await eventBySource(src)).toMatchObject({ state: 'pending', cost_micros: 0, user_id: a.userId });
    expect((await credits(a)).pendingMicros).toBe(0);

    await refreshRuntime(h.deps, new Date(now));
    const estimate = Math.round(100 * rate(2, 512));
    expect(await eventBySource(src)).toMatchObject({ state: 'pending', quantity: 100 });
    expect(Number((await eventBySource(src)).cost_micros)).toBe(estimate);
    expect((await credits(a)).pendingMicros).toBe(estimate);

    const balanceBefore = (await credits(a)).balanceMicros;
    const id = await finish(a, src, iso(start + 120_000), 'due');
    expect(id).toBe((await eventBySource(src)).id);
    expect(await finish(a, src, iso(start + 500_000), 'due')).toBeNull(); // a second close does nothing
    expect(await finish(a, src, iso(start + 500_000), 'forgiven')).toBeNull();
    const ev = await eventBySource(src);
    const cost = Math.round(120 * rate(2, 512));
    expect(ev).toMatchObject({ state: 'due', quantity: 120, ended_at: iso(start + 120_000) });
    expect(Number(ev.cost_micros)).toBe(cost);
    expect((await credits(a)).pendingMicros).toBe(0);

    expect(await settleUsage(h.deps, { ids: [id!] })).toBe(1);
    expect(await settleUsage(h.deps, { ids: [id!] })).toBe(0);
    expect((await eventBySource(src)).state).toBe('settled');
    const charges = (await ledger(a)).filter((e) => e.kind === 'usage_charge');
    expect(charges).toEqual([expect.objectContaining({ id: `chg_${id}`, amountMicros: -cost })]);
    expect((await credits(a)).balanceMicros).toBe(balanceBefore - cost);
  });

  it('a forgiven charge keeps its cost for display and is never charged', async () => {
    const start = Date.now() - 60_000;
    const src = await pending(a, iso(start));
    await refreshRuntime(h.deps);
    expect((await credits(a)).pendingMicros).toBeGreaterThan(0);
    const before = await ledger(a);
    const id = await finish(a, src, iso(start + 60_000), 'forgiven');
    expect(id).not.toBeNull();
    expect(await finish(a, src, iso(start + 90_000), 'due')).toBeNull();
    const ev = await eventBySource(src);
    expect(ev.state).toBe('forgiven');
    expect(Number(ev.cost_micros)).toBe(Math.round(60 * rate(1, 1024)));
    expect(await settleUsage(h.deps, { ids: [id!] })).toBe(0);
    expect(await ledger(a)).toEqual(before);
    expect((await credits(a)).pendingMicros).toBe(0);
  });

  it('two closes racing: exactly one moves the charge', async () => {
    const start = Date.now() - 10_000;
    const src = await pending(a, iso(start));
    const results = await Promise.all([finish(a, src, iso(start + 10_000), 'due'), finish(a, src, iso(start + 10_000), 'forgiven')]);
    expect(results.filter((r) => r !== null)).toHaveLength(1);
  });

  it('at a period’s end the earlier part is charged as its own event and the rest stays pending; the parts cover the interval', async () => {
    const b = await createOrgAdmin(h);
    const now = new Date();
    const periodStart = Date.parse(periodOf(now).start);
    const start = periodStart - 3_600_000; // an hour before this period began
    const src = await pending(b, iso(start));

    await refreshRuntime(h.deps, now);
    await refreshRuntime(h.deps, now); // a second run splits nothing more
    const previousKey = periodOf(new Date(start)).key;
    const part = await eventBySource(`${src}:${previousKey}`);
    expect(part).toMatchObject({ state: 'settled', quantity: 3600, started_at: iso(start), ended_at: iso(periodStart), user_id: b.userId });
    expect(Number(part.cost_micros)).toBe(Math.round(3600 * rate(1, 1024)));
    const rest = await eventBySource(src);
    expect(rest).toMatchObject({ state: 'pending', started_at: iso(periodStart) });
    expect(rest.quantity).toBeCloseTo((now.getTime() - periodStart) / 1000, 3);
    expect((await credits(b)).pendingMicros).toBe(Number(rest.cost_micros));
    const charged = (await ledger(b)).filter((e) => e.kind === 'usage_charge');
    expect(charged).toEqual([expect.objectContaining({ id: `chg_${part.id}`, amountMicros: -Number(part.cost_micros) })]);

    const end = now.getTime() + 5_000;
    expect(await finish(b, src, iso(end), 'due')).toBe(rest.id);
    const last = await eventBySource(src);
    expect(part.quantity + last.quantity).toBeCloseTo((end - start) / 1000, 3);
    expect((await credits(b)).pendingMicros).toBe(0);
  });

  it('a charge pending across two period ends (no job ran) is split into one part per period, also when it is closed', async () => {
    const c = await createOrgAdmin(h);
    const now = new Date();
    const thisStart = new Date(periodOf(now).start);
    const start = Date.UTC(thisStart.getUTCFullYear(), thisStart.getUTCMonth() - 2, 20);
    const src = await pending(c, iso(start));
    const end = now.getTime();
    expect(await finish(c, src, iso(end), 'due')).not.toBeNull();
    const rows = await h.deps.db.kysely.selectFrom('usage_events').selectAll().where('org_id', '=', c.orgId).orderBy('started_at').execute();
    expect(rows.map((r) => r.source_id)).toEqual([
      `${src}:${periodOf(new Date(start)).key}`,
      `${src}:${periodOf(new Date(Date.UTC(thisStart.getUTCFullYear(), thisStart.getUTCMonth() - 1, 1))).key}`,
      src,
    ]);
    expect(rows.every((r) => r.state === 'due')).toBe(true);
    expect(rows.reduce((s, r) => s + r.quantity, 0)).toBeCloseTo((end - start) / 1000, 3);
    expect(rows[2]!.started_at).toBe(thisStart.toISOString());
  });

  it('an account showing a pending total without pending charges is put right by the job', async () => {
    await h.deps.db.kysely.updateTable('billing_accounts').set({ pending_micros: 12_345 }).where('org_id', '=', a.orgId).execute();
    await refreshRuntime(h.deps);
    expect((await credits(a)).pendingMicros).toBe(0);
  });

  it('finishing is scoped by organization: another organization’s id moves nothing', async () => {
    const start = Date.now() - 5_000;
    const src = await pending(a, iso(start));
    const other = await createOrgAdmin(h);
    expect(await finish(other, src, iso(start + 5_000), 'due')).toBeNull();
    expect((await eventBySource(src)).state).toBe('pending');
    expect(await finish(a, src, iso(start + 5_000), 'due')).not.toBeNull();
  });
});

describeNeeding(
  { what: 'persistent sandboxes (runc, root)', present: h.deps.sandboxes.available, reason: h.deps.sandboxes.unavailableReason },
  'runtime charges of real sandboxes',
  () => {
    let a: Actor;
    beforeAll(async () => {
      a = await createOrgAdmin(h);
    });

    const call = (method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown) =>
      h.app.inject({ method, url, headers: a.headers, ...(payload ? { payload } : {}) });
    const eventsOf = (sandboxId: string) =>
      h.deps.db.kysely.selectFrom('usage_events').selectAll().where('subject', '=', sandboxId).orderBy('created_at').execute();

    it('create, pause, resume and destroy: pending, then charged exactly once per interval', async () => {
      const res = await call('POST', '/v1/sandboxes', { network: false, cpu: 0.5, memoryMb: 256 });
      expect(res.statusCode, res.body).toBe(201);
      const id = json(res).data.id as string;
      const [first] = await eventsOf(id);
      expect(first).toMatchObject({ kind: 'sandbox_runtime', state: 'pending', user_id: a.userId, org_id: a.orgId });
      const interval = await h.deps.db.kysely.selectFrom('sandbox_runtime').selectAll().where('sandbox_id', '=', id).executeTakeFirstOrThrow();
      expect(first!.source_id).toBe(interval.id);
      expect(first!.started_at).toBe(interval.started_at);

      await new Promise((r) => setTimeout(r, 1_100));
      await refreshRuntime(h.deps);
      expect((await credits(a)).pendingMicros).toBeGreaterThan(0);

      expect((await call('POST', `/v1/sandboxes/${id}/pause`)).statusCode).toBe(200);
      const paused = (await eventsOf(id))[0]!;
      expect(paused.state).toBe('settled');
      expect(paused.quantity).toBeGreaterThanOrEqual(1.1);
      expect(Number(paused.cost_micros)).toBe(Math.round(paused.quantity * rate(0.5, 256)));
      expect((await ledger(a)).filter((e) => e.kind === 'usage_charge')).toEqual([
        expect.objectContaining({ id: `chg_${paused.id}`, amountMicros: -Number(paused.cost_micros) }),
      ]);
      expect((await credits(a)).pendingMicros).toBe(0);

      expect((await call('POST', `/v1/sandboxes/${id}/resume`)).statusCode).toBe(200);
      const resumed = await eventsOf(id);
      expect(resumed.map((e) => e.state)).toEqual(['settled', 'pending']);

      expect((await call('DELETE', `/v1/sandboxes/${id}`)).statusCode).toBe(204);
      const done = await eventsOf(id);
      expect(done.map((e) => e.state)).toEqual(['settled', 'settled']);
      const charges = (await ledger(a)).filter((e) => e.kind === 'usage_charge');
      expect(charges.map((e) => e.id).sort()).toEqual(done.map((e) => `chg_${e.id}`).sort());
      // The interval is closed: closing it again moves nothing.
      expect(await finish(a, done[1]!.source_id, new Date().toISOString(), 'due')).toBeNull();
    }, 120_000);

    it('a sandbox whose container is gone when Hangar starts is stopped and its running time forgiven, not charged', async () => {
      const res = await call('POST', '/v1/sandboxes', { network: false, cpu: 0.5, memoryMb: 256 });
      expect(res.statusCode, res.body).toBe(201);
      const id = json(res).data.id as string;
      const before = await ledger(a);
      await h.deps.sandboxes.stop(id); // as if the host had restarted
      await reconcile(h.deps);
      const box = json(await call('GET', `/v1/sandboxes/${id}`)).data;
      expect(box.state).toBe('stopped');
      const [ev] = await eventsOf(id);
      expect(ev!.state).toBe('forgiven');
      expect(ev!.ended_at).not.toBeNull();
      expect(await ledger(a)).toEqual(before);
      expect((await credits(a)).pendingMicros).toBe(0);
      expect((await call('DELETE', `/v1/sandboxes/${id}`)).statusCode).toBe(204);
      expect(await ledger(a)).toEqual(before);
    }, 120_000);
  },
);
